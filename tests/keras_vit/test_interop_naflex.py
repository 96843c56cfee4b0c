"""SigLIP 2 NaFlex against transformers' and timm's own outputs (fixtures/interop_families2/): from the libraries'
preprocessed inputs and from keras_vit's preprocessing of the same pixels, with grids that shrink the table along one
axis and padding; fixed-resolution SigLIP towers as NaFlex; writing both layouts back."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_vit
from keras_vit.naflex_inputs import naflex_batch
from tests import support
from tests.support.naflex_fixtures import HF, TIMM, TOL, check, folder, io, library_inputs, outputs
from tests.support.numerics import scaled_diff

ROUND1 = os.path.join(str(support.FIXTURES), "interop_families")


@pytest.fixture(scope="module", params=[HF, TIMM])
def case(request):
    name = request.param
    arrays = io(name)
    model = keras_vit.from_pretrained(folder(name), max_num_patches=16)
    return name, arrays, model


def test_from_the_librarys_inputs(case):
    name, arrays, model = case
    inputs = library_inputs(name, arrays)
    assert isinstance(model, keras_vit.NaFlexViT)
    check(model, inputs, arrays, np.asarray(inputs["mask"], bool))


def test_from_keras_vits_preprocessing(case):
    name, arrays, model = case
    style = "transformers" if name == HF else "timm"
    inputs = naflex_batch([arrays[f"pixels_{i}"] for i in range(3)], 8, 16, style)
    # Grids 4x4, 2x7 (the table's rows 4 -> 2) and 5x3 (its columns 4 -> 3); the last two leave padding.
    np.testing.assert_array_equal(inputs["grid"], [[4, 4], [2, 7], [5, 3]])
    check(model, inputs, arrays, inputs["mask"].astype(bool))


def test_padding_beyond_the_images_changes_nothing(case):
    """transformers#37907: valid patches that do not fill N. Twice the padding, filled with noise, as N = 32."""
    name, arrays, _ = case
    model = keras_vit.from_pretrained(folder(name), max_num_patches=32)
    inputs = {k: np.asarray(v) for k, v in library_inputs(name, arrays).items()}
    patches = np.random.default_rng(0).normal(size=(3, 32, inputs["patches"].shape[-1])).astype(np.float32)
    patches[:, :16] = np.where(inputs["mask"][..., None], inputs["patches"], patches[:, :16])
    mask = np.zeros((3, 32), np.int32)
    mask[:, :16] = inputs["mask"]
    wide = dict(patches=patches, mask=mask, grid=inputs["grid"])
    valid = np.zeros((3, 32), bool)
    valid[:, :16] = inputs["mask"].astype(bool)
    got = outputs(model, wide)
    for key in ("pooler_output", "pre_logits", "logits"):
        if key in arrays:
            assert scaled_diff(got[key], arrays[key]) <= TOL
    token_key = "last_hidden_state" if name == HF else "tokens"
    assert scaled_diff(got[token_key][:, :16], arrays[token_key], valid[:, :16]) <= TOL


@pytest.mark.parametrize("name", ["hf_siglip_vision", "timm_siglip_base"])
def test_a_fixed_resolution_siglip_tower_is_a_naflex_model(name):
    """The same weights: on the table's own 4 x 4 grid, NaFlex gives the fixed model's library outputs."""
    arrays = io(name, ROUND1)
    model = keras_vit.from_pretrained(os.path.join(ROUND1, name), naflex=True, max_num_patches=16)
    assert isinstance(model, keras_vit.NaFlexViT) and model.options["position_grid"] == [4, 4]
    patches = arrays["images"].reshape(4, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(4, 16, 192)
    inputs = dict(patches=patches, mask=np.ones((4, 16), np.int32), grid=np.full((4, 2), 4, np.int32))
    check(model, inputs, arrays, np.ones((4, 16), bool))


def test_a_naflex_folder_builds_the_fixed_model_too():
    arrays = io("hf_siglip2_naflex")
    model = keras_vit.from_pretrained(folder(HF), naflex=False)
    assert isinstance(model, keras_vit.VisionTransformer) and model.config.image_size == (32, 32)
    square = arrays["pixel_values"][:1].reshape(1, 4, 4, 8, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(1, 32, 32, 3)
    pooled = keras.Model(model.input, model.get_layer("MAPHead_0").output)(square)
    assert scaled_diff(pooled, arrays["pooler_output"][:1]) <= TOL


@pytest.mark.parametrize("name, fmt", [(HF, "transformers"), (TIMM, "timm")])
def test_save_pretrained_writes_the_librarys_tensors(name, fmt, tmp_path):
    model = keras_vit.from_pretrained(folder(name), max_num_patches=16)
    written = keras_vit.save_pretrained(model, tmp_path / "out", format=fmt)
    original, again = (
        load_file(os.path.join(folder(name), "model.safetensors")),
        load_file(os.path.join(written, "model.safetensors")),
    )
    assert sorted(again) == sorted(original)
    for key, value in original.items():
        np.testing.assert_allclose(again[key], value, rtol=0, atol=1e-6, err_msg=key)
    back = keras_vit.from_pretrained(written, max_num_patches=16)
    arrays = io(name)
    inputs = library_inputs(name, arrays)
    check(back, inputs, arrays, np.asarray(inputs["mask"], bool))


JAX_CHECK = """
import sys, numpy as np, keras, jax
import keras_vit
folder, io_path = sys.argv[1:3]
arrays = dict(np.load(io_path))
model = keras_vit.from_pretrained(folder, max_num_patches=16)
inputs = dict(patches=arrays["pixel_values"], mask=arrays["pixel_attention_mask"],
              grid=arrays["spatial_shapes"].astype("int32"))
pooled = keras.Model(model.inputs, model.get_layer("MAPHead_0").output)
jitted = np.asarray(jax.jit(lambda x: pooled(x))(inputs))
print("DIFF", keras.config.backend(), float(np.abs(jitted - arrays["pooler_output"]).max()))
"""


@pytest.mark.slow
def test_jax_backend_reproduces_transformers():
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(support.ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-c", JAX_CHECK, folder(HF), os.path.join(folder(HF), "io.npz")],
        cwd=str(support.ROOT), env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    backend, diff = result.stdout.split("DIFF", 1)[1].split()
    assert backend == "jax" and float(diff) <= TOL, result.stdout


def test_load_weights_into_a_naflex_model_with_a_new_head():
    """Fine-tuning's path: a model built for another class count and table grid; the table is resized when loading
    (4 x 4 -> 2 x 2 here), the head is the model's own."""
    arrays = io(HF)
    model = keras_vit.NaFlexViT(
        max_num_patches=16, patch_size=8, position_grid=(4, 4), hidden_size=48, num_layers=2, num_heads=3,
        mlp_dim=192, num_classes=2,
    )  # fmt: skip
    report = keras_vit.load_weights(model, folder(HF), new_head=True)
    assert "head/kernel" in report.skipped and not np.asarray(model.get_layer("head").kernel).any()
    check(model, library_inputs(HF, arrays), arrays, arrays["pixel_attention_mask"].astype(bool))
    small = keras_vit.NaFlexViT(**{**model.options, "position_grid": (2, 2)})
    report = keras_vit.load_weights(small, folder(HF), new_head=True)
    assert "Transformer/posembed_input/pos_embedding" in report.resized


@pytest.mark.slow
def test_a_saved_naflex_model_is_a_source(tmp_path):
    """`from_pretrained("model.keras")` (what `--init` takes): a NaFlexViT back; the fixed model with naflex=False."""
    arrays = io(HF)
    keras_vit.from_pretrained(folder(HF), max_num_patches=16).save(tmp_path / "naflex.keras")
    model = keras_vit.from_pretrained(str(tmp_path / "naflex.keras"))
    assert isinstance(model, keras_vit.NaFlexViT) and model.options["max_num_patches"] == 16
    check(model, library_inputs(HF, arrays), arrays, arrays["pixel_attention_mask"].astype(bool))
    fixed = keras_vit.from_pretrained(str(tmp_path / "naflex.keras"), naflex=False)
    assert isinstance(fixed, keras_vit.VisionTransformer)


@pytest.mark.slow
def test_a_gap_siglip_tower_is_a_naflex_model_that_averages_only_the_valid_tokens(tmp_path):
    """timm's SigLIP 2 `gap` tower as NaFlex: with 4 padding rows after the 4 x 4 grid, the mean of the valid tokens
    gives timm's logits; a mean over every row would not. Written as timm's naflexvit and read back: the same."""
    name = "timm_siglip2_gap"
    arrays = io(name)
    model = keras_vit.from_pretrained(folder(name), naflex=True, max_num_patches=20)
    assert model.options["pooling"] == "gap" and model.get_layer("pool") is not None
    patches = arrays["images"].reshape(4, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(4, 16, 192)
    inputs = dict(
        patches=np.concatenate([patches, np.zeros((4, 4, 192), np.float32)], axis=1),
        mask=np.concatenate([np.ones((4, 16), np.int32), np.zeros((4, 4), np.int32)], axis=1),
        grid=np.full((4, 2), 4, np.int32),
    )
    assert scaled_diff(model.predict(inputs, verbose=0), arrays["logits"]) <= TOL
    normed = keras.Model(model.input, model.get_layer("encoder_norm").output).predict(inputs, verbose=0)
    unmasked = normed.mean(axis=1) @ model.get_layer("head").kernel.numpy() + model.get_layer("head").bias.numpy()
    assert scaled_diff(unmasked, arrays["logits"]) > 1e-3  # the padding rows would have counted
    written = keras_vit.save_pretrained(model, str(tmp_path / "timm"), format="timm")
    again = keras_vit.from_pretrained(written, naflex=True, max_num_patches=20)
    assert scaled_diff(again.predict(inputs, verbose=0), arrays["logits"]) <= TOL
    with pytest.raises(keras_vit.weights.CheckpointError, match="Save it as 'timm'"):
        keras_vit.save_pretrained(model, str(tmp_path / "hf"), format="transformers")


def test_a_naflexvit_folder_with_another_activation_is_refused_by_name(tmp_path):
    import json
    import shutil

    copy = tmp_path / "naflex"
    shutil.copytree(folder(TIMM), copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg.setdefault("model_args", {})["act_layer"] = "relu"
    (copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(keras_vit.weights.CheckpointError, match=r"act_layer='relu'; .*'gelu_tanh', 'quick_gelu'"):
        keras_vit.from_pretrained(str(copy))
