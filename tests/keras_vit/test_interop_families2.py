"""The second round's timm folders (DINOv3, EVA-02, Perception Encoder, AIMv2, SigLIP 2; fixtures/interop_families2/):
the outputs timm computed (square and non-square inputs), the options read from the architecture table, the written
folders against the fixtures' own tensors, and the architectures refused by name."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_vit
from keras_vit.models.configs import ViTConfig
from keras_vit.weights import timm, timm_architectures, timm_eva
from keras_vit.weights.errors import CheckpointError
from tests import support
from tests.support.numerics import scaled_diff

FAMILIES = os.path.join(str(support.FIXTURES), "interop_families2")
TOL = 1e-5
TIMM = sorted(n for n in os.listdir(FAMILIES) if n.startswith("timm_") and n != "timm_naflex_siglip")


def io(name):
    return dict(np.load(os.path.join(FAMILIES, name, "io.npz")))


def outputs(model, images):
    """timm's `logits`, `pre_logits` (`forward_head(pre_logits=True)`) and `tokens` (`forward_features`)."""
    config = model.config
    pre = "MAPHead_0" if config.pooling == "map" else "fc_norm" if config.fc_norm else "pool"
    tokens = f"encoderblock_{config.num_layers - 1}" if config.fc_norm or not config.encoder_norm else "encoder_norm"
    probe = keras.Model(model.input, [model.output, model.get_layer(pre).output, model.get_layer(tokens).output])
    return dict(zip(("logits", "pre_logits", "tokens"), probe.predict(images, verbose=0)))


@pytest.fixture(scope="module", params=TIMM)
def fixture(request):
    name = request.param
    return name, keras_vit.from_pretrained(os.path.join(FAMILIES, name)), io(name)


def test_fixture_matches_timm(fixture):
    _, model, ref = fixture
    got = outputs(model, ref["images"])
    diffs = {k: scaled_diff(got[k], ref[k]) for k in got}
    assert max(diffs.values()) < TOL, diffs


@pytest.mark.slow
def test_non_square_input_matches_timms_dynamic_size(fixture):
    name, _, ref = fixture
    if "wide_images" not in ref:
        pytest.skip("no non-square outputs: a learned table alone (round 1's image_size path)")
    model = keras_vit.from_pretrained(os.path.join(FAMILIES, name), dynamic_image_size=True)
    got = outputs(model, ref["wide_images"])
    diffs = {k: scaled_diff(got[k], ref[f"wide_{k}"]) for k in got}
    assert max(diffs.values()) < TOL, diffs


# fixture: the options keras-vit must read (what the architecture function sets, not model_args)
EXPECTED = {
    "timm_dinov3_small": dict(rope="dinov3", position_embedding="none", num_registers=4, qkv_bias="none",
                              pooling="gap", layer_norm_epsilon=1e-5, dynamic_image_size=True),
    "timm_dinov3_small_qkvb": dict(rope="dinov3", qkv_bias="qv", layer_scale=1e-5),
    "timm_dinov3_small_plus": dict(mlp_type="swiglu", mlp_dim=144, mlp_norm=False),
    "timm_dinov3_small_token": dict(pooling="token"),
    "timm_eva02_tiny": dict(rope="eva", rope_ref_grid=(16.0, 16.0), mlp_type="swiglu", mlp_dim=128, qkv_bias="qv",
                            fc_norm=True, layer_norm_epsilon=1e-6),
    "timm_eva02_base": dict(mlp_norm=True, attention_norm=False, qkv_bias="qv"),
    "timm_eva02_base_clip": dict(mlp_norm=True, attention_norm=True, pooling="token", fc_norm=False),
    "timm_pe_core_tiny": dict(rope="pe", rope_ref_grid=(24.0, 24.0), map_heads=8, pooling="map", pre_norm=True,
                              patch_bias=False, layer_norm_epsilon=1e-5, gelu="exact"),
    "timm_pe_spatial_tiny": dict(rope="pe", encoder_norm=False, fc_norm=False, pooling="gap"),
    "timm_aimv2": dict(norm="rms", patch_norm=True, mlp_type="swiglu", mlp_bias=False, qkv_bias="none",
                       proj_bias=False, class_token=False),
    "timm_siglip2_giantopt": dict(gelu="tanh", pooling="map"),
    "timm_siglip2_gap": dict(gelu="exact", pooling="gap", class_token=False),
}  # fmt: skip


def test_options_come_from_the_architecture_table(fixture):
    name, model, _ = fixture
    for key, value in EXPECTED[name].items():
        assert getattr(model.config, key) == value, key


@pytest.mark.slow
def test_save_pretrained_writes_timms_layout(fixture, tmp_path):
    """The written tensors have the fixture's names and shapes; their values are the fixture's (the patch
    embedding and position table aside where mean/std were folded in), and the folder reads back to the model."""
    name, model, ref = fixture
    folder = keras_vit.save_pretrained(model, tmp_path / name, format="timm")
    mine = load_file(os.path.join(folder, "model.safetensors"))
    theirs = load_file(os.path.join(FAMILIES, name, "model.safetensors"))
    assert {k: v.shape for k, v in mine.items()} == {k: v.shape for k, v in theirs.items()}
    folded = {"patch_embed.proj.weight", "patch_embed.proj.bias", "pos_embed"}
    for key in set(theirs) - folded:
        np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)
    back = keras_vit.from_pretrained(folder)
    assert back.config == model.config
    np.testing.assert_array_equal(back.predict(ref["images"], verbose=0), model.predict(ref["images"], verbose=0))


def test_dinov3_pooling_is_the_users_choice_and_is_recorded(tmp_path):
    """timm pools DINOv3 by the mean of the patch tokens; `pooling="token"` gives the normed class token (upstream's
    and transformers' `pooler_output`), and the written folder says so."""
    ref = io("timm_dinov3_small")
    model = keras_vit.from_pretrained(os.path.join(FAMILIES, "timm_dinov3_small"), pooling="token", num_classes=0)
    features = model.predict(ref["images"], verbose=0)
    assert scaled_diff(features, ref["tokens"][:, 0]) < TOL
    assert scaled_diff(features, ref["pre_logits"]) > 1e-2
    folder = keras_vit.save_pretrained(model, tmp_path / "token", format="timm")
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["global_pool"] == cfg["model_args"]["global_pool"] == "token"
    assert keras_vit.from_pretrained(folder).config.pooling == "token"


def _renamed(tmp_path, name, architecture):
    folder = tmp_path / f"{name}_as_{architecture}"
    shutil.copytree(os.path.join(FAMILIES, name), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architecture"] = architecture
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


@pytest.mark.parametrize(
    "name, architecture, words",
    [
        ("timm_pe_core_tiny", "vit_pe_lang_large_patch14_448", "Perception Encoder Lang"),
        ("timm_pe_core_tiny", "vit_pe_core_huge_patch16_448", "outside keras-vit's table"),
        ("timm_dinov3_small", "vit_giant_patch16_dinov3", "outside keras-vit's table"),
        ("timm_eva02_tiny", "eva02_enormous_patch14_clip_224", "post-norm"),
        ("timm_pe_core_tiny", "vit_small_patch16_rope_224", "RoPE-ViT"),
    ],
)
def test_architectures_outside_the_table_are_refused_by_name(tmp_path, name, architecture, words):
    with pytest.raises(CheckpointError) as err:
        keras_vit.from_pretrained(_renamed(tmp_path, name, architecture))
    message = str(err.value)
    assert architecture in message and words in message and "\n" not in message


def test_dinov3_dense_features_at_a_non_square_size():
    """`feature_model` on a DINOv3 folder (any input size, as its architecture sets): the last block's normed patch
    tokens on a 4x6 grid are timm's `forward_features` patch rows there."""
    ref = io("timm_dinov3_small")
    model = keras_vit.from_pretrained(os.path.join(FAMILIES, "timm_dinov3_small"))
    features = keras_vit.feature_model(model, blocks=(-1,), output="NHWC", norm=True)
    maps = features.predict(ref["wide_images"], verbose=0)
    prefix = model.config.num_prefix_tokens
    assert maps.shape == (2, 4, 6, 48) and prefix == 5
    assert scaled_diff(maps, ref["wide_tokens"][:, prefix:].reshape(2, 4, 6, 48)) < TOL


@pytest.mark.parametrize(
    "fixture, fmt",
    [("timm_dinov3_small", "npz"), ("timm_eva02_tiny", "npz"), ("timm_eva02_tiny", "transformers"),
     ("timm_eva02_tiny", "keras_hub")],
)  # fmt: skip
def test_other_layouts_refuse_a_rope_model_in_one_line(tmp_path, fixture, fmt):
    """The original `.npz` would read back a DINOv3 model as a sin-cos ViT; transformers and keras-hub have no
    EVA-02 layout (their DINOv3 layouts are written: tests/keras_vit/test_interop_families2_hf.py)."""
    model = keras_vit.from_pretrained(os.path.join(FAMILIES, fixture))
    with pytest.raises(CheckpointError) as err:
        keras_vit.save_pretrained(model, tmp_path / "out", format=fmt)
    assert "format='timm'" in str(err.value) and "\n" not in str(err.value)


def test_the_architecture_name_alone_gives_the_options_the_tensors_give(fixture):
    """`architecture_options` (a model without a checkpoint, as the benchmark builds) against the folder's read."""
    name, _, _ = fixture
    folder = os.path.join(FAMILIES, name)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    args = dict(cfg.get("model_args") or {})
    size, classes = args.pop("img_size"), args.pop("num_classes")
    if cfg["architecture"] not in timm_architectures.EVA:  # AIMv2 and SigLIP 2 are not Eva models
        with pytest.raises(ValueError, match="not one of the Eva architectures keras-vit builds"):
            timm_eva.architecture_options(cfg["architecture"], size, classes, args)
        return
    options = timm_eva.architecture_options(cfg["architecture"], size, classes, args)
    assert ViTConfig(**options) == ViTConfig(**timm.read(folder).options)
