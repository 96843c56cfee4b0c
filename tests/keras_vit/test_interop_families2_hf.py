"""The second round's transformers folders (fixtures/interop_families2/hf_*): MetaCLIP 2 read as CLIP, the outputs
transformers computed, the options read, the round trip through save_pretrained, and the refusal of a model type
keras-vit does not know."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_vit
from tests import support
from tests.support.numerics import scaled_diff

FAMILIES2 = os.path.join(str(support.FIXTURES), "interop_families2")
TOL = 1e-5
OUTPUTS = ("last_hidden_state", "pooler_output")


def io(name):
    return dict(np.load(os.path.join(FAMILIES2, name, "io.npz")))


def last_hidden_state(model, images):
    """transformers' last_hidden_state: CLIP's is the last block's output (its post_layernorm sees the class token
    only, which keras-vit's encoder_norm + pool compute); the others' is the final norm's."""
    config = model.config
    layer = f"encoderblock_{config.num_layers - 1}" if config.pre_norm else "encoder_norm"
    return keras.Model(model.input, model.get_layer(layer).output).predict(images, verbose=0)


def outputs(model, images):
    return {"last_hidden_state": last_hidden_state(model, images), "pooler_output": model.predict(images, verbose=0)}


CLIP_LIKE = dict(pre_norm=True, patch_bias=False, gelu="quick", layer_norm_epsilon=1e-5, num_classes=0)
DINOV3 = dict(
    rope="dinov3", position_embedding="none", class_token=True, num_registers=4, qkv_bias="qv", pooling="token",
    layer_norm_epsilon=1e-5, num_classes=0,
)  # fmt: skip
# fixture: the options keras-vit must read
EXPECTED = {
    "hf_metaclip2_vision": CLIP_LIKE,
    "hf_metaclip2_dual": CLIP_LIKE,
    "hf_dinov3_vit": dict(DINOV3, mlp_type="gelu", mlp_dim=192, gelu="exact"),
    "hf_dinov3_vit_gated": dict(DINOV3, mlp_type="swiglu", mlp_dim=128),
    "hf_aimv2_vision": dict(
        norm="rms",
        patch_norm=True,
        class_token=False,
        qkv_bias="none",
        proj_bias=False,
        mlp_type="swiglu",
        mlp_bias=False,
        mlp_dim=128,
        pooling="map",
        layer_norm_epsilon=1e-5,
    ),
    "hf_dinov2_swiglu": dict(mlp_type="swiglu", mlp_dim=128, layer_norm_epsilon=1e-6, class_token=True),
}
WIDE = ("hf_dinov3_vit", "hf_dinov3_vit_gated")
# Written again from a model: tensors whose values change on the way (the patch embedding absorbs the folder's
# mean/std; the mask token, unused, is written as zeros).
REWRITTEN = ("embeddings.patch_embedding.weight", "embeddings.patch_embeddings.weight",
             "embeddings.patch_embeddings.bias", "embeddings.patch_embed.weight", "embeddings.patch_embed.bias",
             "embeddings.patch_embeddings.projection.weight", "embeddings.patch_embeddings.projection.bias",
             "embeddings.mask_token")  # fmt: skip


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def fixture(request):
    """(name, model loaded from the fixture folder, its io.npz), one load per fixture."""
    name = request.param
    return name, keras_vit.from_pretrained(os.path.join(FAMILIES2, name)), io(name)


def test_fixture_matches_transformers(fixture):
    name, model, ref = fixture
    got = outputs(model, ref["images"])
    diffs = {k: scaled_diff(got[k], ref[k]) for k in OUTPUTS}
    assert max(diffs.values()) < TOL, diffs
    assert {k: getattr(model.config, k) for k in EXPECTED[name]} == EXPECTED[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", WIDE)
@pytest.mark.parametrize("how", ["dynamic_image_size", "image_size"])
def test_non_square_input_matches_transformers(name, how):
    """DINOv3 computes its rotary table from the input's grid: a model taking any size, or one built at 32x48."""
    ref = io(name)
    images = ref["wide_images"]
    size = dict(dynamic_image_size=True) if how == "dynamic_image_size" else dict(image_size=images.shape[1:3])
    model = keras_vit.from_pretrained(os.path.join(FAMILIES2, name), **size)
    got = outputs(model, images)
    diffs = {k: scaled_diff(got[k], ref[f"wide_{k}"]) for k in OUTPUTS}
    assert max(diffs.values()) < TOL, diffs


@pytest.mark.slow
def test_save_pretrained_round_trip(fixture, tmp_path):
    """Written back in transformers' layout: the (vision tower's) tensor names and shapes, their values (but for
    those the normalisation folds into, and an unused mask token), the same outputs when read again. A MetaCLIP 2
    tower is written as the CLIPVisionModel it is."""
    name, model, ref = fixture
    out = keras_vit.save_pretrained(model, tmp_path / name, format="transformers")
    written = load_file(os.path.join(out, "model.safetensors"))
    original = load_file(os.path.join(FAMILIES2, name, "model.safetensors"))
    if name == "hf_metaclip2_dual":
        original = {k.removeprefix("vision_model."): v for k, v in original.items() if k.startswith("vision_model.")}
    assert {k: v.shape for k, v in written.items()} == {k: v.shape for k, v in original.items()}
    # without a patch bias (CLIP), the normalisation's constant goes into the position table's patch rows
    rewritten = REWRITTEN + (() if model.config.patch_bias else ("embeddings.position_embedding.weight",))
    changed = [k for k in written if k not in rewritten and not np.array_equal(written[k], original[k])]
    assert not changed, changed
    again = keras_vit.from_pretrained(out)
    assert again.config == model.config
    got = outputs(again, ref["images"])
    diffs = {k: scaled_diff(got[k], ref[k]) for k in OUTPUTS}
    assert max(diffs.values()) < TOL, diffs


def _copy(name, tmp_path, **config_changes):
    folder = tmp_path / name
    shutil.copytree(os.path.join(FAMILIES2, name), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(config_changes)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_an_unknown_model_type_is_refused_by_name_whatever_else_the_folder_holds(tmp_path):
    folder = _copy("hf_metaclip2_vision", tmp_path, model_type="made_up_vit")  # its io.npz stays beside it
    assert os.path.exists(folder / "io.npz")
    with pytest.raises(keras_vit.CheckpointError, match="is a transformers 'made_up_vit' model") as err:
        keras_vit.from_pretrained(folder)
    assert "\n" not in str(err.value)


def test_metaclip2_with_projection_is_refused_in_one_line(tmp_path):
    folder = _copy("hf_metaclip2_vision", tmp_path, architectures=["MetaClip2VisionModelWithProjection"])
    with pytest.raises(keras_vit.CheckpointError, match="visual projection") as err:
        keras_vit.from_pretrained(folder)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "name, changes, message",
    [
        ("hf_dinov3_vit", dict(architectures=["DINOv3ViTBackbone"]), "keras-vit reads the DINOv3ViTModel layout"),
        ("hf_dinov3_vit_gated", dict(hidden_act="gelu"), "hidden_act='gelu' in a gated MLP"),
        ("hf_aimv2_vision", dict(is_native=True), "native-resolution AIMv2"),
        ("hf_dinov2_swiglu", dict(use_swiglu_ffn=False), "says use_swiglu_ffn=False but its MLP tensors are a SwiGLU"),
    ],
)
def test_members_keras_vit_cannot_build_are_refused_in_one_line(tmp_path, name, changes, message):
    with pytest.raises(keras_vit.CheckpointError, match=message) as err:
        keras_vit.from_pretrained(_copy(name, tmp_path, **changes))
    assert "\n" not in str(err.value)


def test_a_learned_dinov3_key_bias_is_refused(tmp_path):
    """timm's Eva and keras-vit's DINOv3 have no key bias: one of zeros is dropped, any other refused."""
    from safetensors.numpy import save_file

    folder = _copy("hf_dinov3_vit", tmp_path, key_bias=True)
    state = load_file(folder / "model.safetensors")
    for i in range(2):
        state[f"layer.{i}.attention.k_proj.bias"] = np.zeros(48, np.float32)
    save_file(state, folder / "model.safetensors")
    assert keras_vit.from_pretrained(folder).config.qkv_bias == "qv"
    state["layer.1.attention.k_proj.bias"] = np.full(48, 0.1, np.float32)
    save_file(state, folder / "model.safetensors")
    with pytest.raises(keras_vit.CheckpointError, match="has a learned key bias"):
        keras_vit.from_pretrained(folder)


def test_an_aimv2_head_changed_by_training_is_not_written_as_aimv2(tmp_path):
    """AIMv2's pooling head is read into a MAP head whose query projection is the identity and whose MLP adds zero;
    once those have changed, transformers' Aimv2VisionModel cannot hold it."""
    model = keras_vit.from_pretrained(os.path.join(FAMILIES2, "hf_aimv2_vision"))
    query = model.get_layer("MAPHead_0").attention.query_kernel
    query.assign(query.numpy() * 1.01)
    with pytest.raises(keras_vit.CheckpointError, match="no longer AIMv2's"):
        keras_vit.save_pretrained(model, tmp_path / "aimv2", format="transformers")


KERAS_HUB = os.path.join(str(support.FIXTURES), "kerashub_dinov3")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dinov3_vit", "dinov3_vit_gated"])
def test_keras_hub_dinov3_presets_match_keras_hub(name):
    """keras-hub's DINOV3Backbone presets (made by keras-hub from the transformers fixtures): every token after the
    final norm, at the preset's size and, with dynamic_image_size, at 32x48."""
    folder = os.path.join(KERAS_HUB, name)
    ref = dict(np.load(os.path.join(folder, "io.npz")))
    for prefix, size in (("", {}), ("wide_", dict(dynamic_image_size=True))):
        model = keras_vit.from_pretrained(folder, **size)
        got = last_hidden_state(model, ref[f"{prefix}pixel_values"])  # a backbone preset states no statistics
        assert scaled_diff(got, ref[f"{prefix}backbone_output"]) < TOL, prefix
    assert model.config.mlp_type == ("swiglu" if name.endswith("gated") else "gelu")
    assert (model.config.rope, model.config.num_registers, model.config.qkv_bias) == ("dinov3", 4, "qv")


def test_dinov3_pooling_is_the_users_choice():
    """transformers' pooler_output is the normed class token (`pooling="token"`, read); `pooling="gap"` gives timm's
    default instead: the mean of the normed patch tokens, registers and class token left out."""
    ref = io("hf_dinov3_vit")
    model = keras_vit.from_pretrained(os.path.join(FAMILIES2, "hf_dinov3_vit"), pooling="gap")
    assert model.config.pooling == "gap"
    expected = ref["last_hidden_state"][:, 5:].mean(axis=1)
    assert scaled_diff(model.predict(ref["images"], verbose=0), expected) < TOL


def _h5(path):
    import h5py

    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


@pytest.mark.parametrize("name", ["dinov3_vit", "dinov3_vit_gated"])
def test_keras_hub_dinov3_presets_are_written_back_in_keras_hubs_layout(name, tmp_path):
    """The variables keras-hub's own save_to_preset wrote, path for path and value for value (the unused mask token
    is written as zeros), and the same outputs when read again."""
    folder = os.path.join(KERAS_HUB, name)
    model = keras_vit.from_pretrained(folder)
    out = keras_vit.save_pretrained(model, tmp_path / name, format="keras_hub")
    written, original = _h5(os.path.join(out, "model.weights.h5")), _h5(os.path.join(folder, "model.weights.h5"))
    assert {k: v.shape for k, v in written.items()} == {k: v.shape for k, v in original.items()}
    mask = "layers/dinov3_embedding/vars/1"
    assert [k for k in written if k != mask and not np.array_equal(written[k], original[k])] == []
    assert not np.any(written[mask])
    from pathlib import Path

    cfg, ref_cfg = (json.loads((Path(f) / "config.json").read_text())["config"] for f in (out, folder))
    assert {k: v for k, v in cfg.items() if k not in ("name", "dtype")} == {
        k: v for k, v in ref_cfg.items() if k not in ("name", "dtype")
    }
    again = keras_vit.from_pretrained(out)
    ref = dict(np.load(os.path.join(folder, "io.npz")))
    assert scaled_diff(last_hidden_state(again, ref["pixel_values"]), ref["backbone_output"]) < TOL
