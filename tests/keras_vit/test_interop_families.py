"""The ViT relatives (DeiT, DeiT-III, DINOv2 with and without registers, CLIP, SigLIP, timm's fc_norm pooling) from
timm's and transformers' own folders: the outputs those libraries computed (fixtures/interop_families/), the options
read, and the round trip through save_pretrained back to the same layout."""

import os

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_vit
from tests import support
from tests.support.numerics import scaled_diff

FAMILIES = os.path.join(str(support.FIXTURES), "interop_families")
TOL = 1e-5


def io(name):
    return dict(np.load(os.path.join(FAMILIES, name, "io.npz")))


def layer_output(model, images, layer):
    return keras.Model(model.input, model.get_layer(layer).output).predict(images, verbose=0)


def _pre_logits(model, images):
    if model.config.distillation_token:  # timm: the mean of the class and distillation tokens
        return (layer_output(model, images, "pool") + layer_output(model, images, "pool_dist")) / 2
    layer = "MAPHead_0" if model.config.pooling == "map" else "fc_norm" if model.config.fc_norm else "pool"
    return layer_output(model, images, layer)


def _tokens_layer(model, fmt):
    """The layer whose output is timm's forward_features / transformers' last_hidden_state."""
    config = model.config
    if config.fc_norm or (config.pre_norm and fmt == "transformers"):
        return (
            f"encoderblock_{config.num_layers - 1}"  # timm's norm is Identity; CLIP's post_layernorm: class token only
        )
    return "encoder_norm"


def outputs(model, images, names, fmt):
    """{output name: the model's value} for the names a fixture's io.npz holds."""
    got = {}
    for name in names:
        if name in ("logits", "pooler_output"):
            got[name] = model.predict(images, verbose=0)
        elif name == "pre_logits":
            got[name] = _pre_logits(model, images)
        elif name in ("tokens", "last_hidden_state"):
            got[name] = layer_output(model, images, _tokens_layer(model, fmt))
    return got


# fixture: (the options keras-vit must read, prefix tokens)
EXPECTED = {
    "timm_deit3_small": (dict(layer_scale=1e-5, no_embed_class=True, gelu="exact"), 1),
    "timm_dinov2_small": (dict(layer_scale=1e-5, no_embed_class=False, patch_size=14), 1),
    "timm_vit_cls_fc_norm": (dict(fc_norm=True, pooling="gap", class_token=True), 1),
    "timm_dinov2_small_reg4": (dict(num_registers=4, no_embed_class=True, layer_scale=1e-5), 5),
    "timm_clip_base": (dict(pre_norm=True, patch_bias=False, layer_norm_epsilon=1e-5, gelu="exact"), 1),
    "timm_clip_quickgelu": (dict(pre_norm=True, patch_bias=False, layer_norm_epsilon=1e-5, gelu="quick"), 1),
    "timm_siglip_base": (dict(pooling="map", class_token=False, gelu="exact"), 0),
    "timm_deit_tiny_distilled": (dict(distillation_token=True, pooling="token"), 2),
    "hf_dinov2_small": (dict(layer_scale=1e-5, num_classes=0, layer_norm_epsilon=1e-6), 1),
    "hf_dinov2_small_registers": (dict(layer_scale=1e-5, num_registers=4, no_embed_class=False), 5),
    "hf_clip_vision": (dict(pre_norm=True, patch_bias=False, gelu="quick", layer_norm_epsilon=1e-5), 1),
    "hf_siglip_vision": (dict(pooling="map", class_token=False, gelu="tanh", num_classes=0), 0),
    "hf_deit_distilled": (dict(distillation_token=True, num_classes=5, layer_norm_epsilon=1e-12), 2),
}


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def fixture(request):
    """(name, model loaded from the fixture, its io.npz), one load per fixture."""
    name = request.param
    return name, keras_vit.from_pretrained(os.path.join(FAMILIES, name)), io(name)


def fmt(name):
    return "timm" if name.startswith("timm") else "transformers"


def test_fixture_matches_its_library(fixture):
    name, model, ref = fixture
    names = [k for k in ("logits", "pre_logits", "tokens", "last_hidden_state", "pooler_output") if k in ref]
    got = outputs(model, ref["images"], names, fmt(name))
    diffs = {k: scaled_diff(got[k], ref[k]) for k in names}
    assert max(diffs.values()) < TOL, diffs


def test_fixture_options_and_prefix_tokens(fixture):
    name, model, _ = fixture
    options, prefix = EXPECTED[name]
    assert {k: getattr(model.config, k) for k in options} == options
    assert model.config.num_prefix_tokens == prefix


@pytest.mark.slow
def test_save_pretrained_round_trip(fixture, tmp_path):
    name, model, ref = fixture
    out = keras_vit.save_pretrained(model, tmp_path / name, format=fmt(name))
    written = load_file(os.path.join(out, "model.safetensors"))
    original = load_file(os.path.join(FAMILIES, name, "model.safetensors"))
    assert {k: v.shape for k, v in written.items()} == {k: v.shape for k, v in original.items()}
    again = keras_vit.from_pretrained(out)
    assert again.config == model.config
    names = [k for k in ("logits", "pre_logits", "tokens", "last_hidden_state", "pooler_output") if k in ref]
    got = outputs(again, ref["images"], names, fmt(name))
    diffs = {k: scaled_diff(got[k], ref[k]) for k in names}
    assert max(diffs.values()) < TOL, diffs


def _copy(name, tmp_path, **config_changes):
    import json
    import shutil

    folder = tmp_path / name
    shutil.copytree(os.path.join(FAMILIES, name), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(config_changes)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize(
    "name, changes, message",
    [
        ("hf_dinov2_small", dict(use_swiglu_ffn=True), "says use_swiglu_ffn=True but its MLP tensors are a GELU"),
        ("hf_dinov2_small", dict(architectures=["Dinov2ForImageClassification"]), "class token concatenated"),
        ("hf_clip_vision", dict(architectures=["CLIPVisionModelWithProjection"]), "visual projection"),
        ("hf_deit_distilled", dict(architectures=["DeiTForImageClassification"]), "class-token-only classifier"),
    ],
)
def test_transformers_members_keras_vit_cannot_build_are_refused_in_one_line(tmp_path, name, changes, message):
    with pytest.raises(keras_vit.CheckpointError, match=message) as err:
        keras_vit.from_pretrained(_copy(name, tmp_path, **changes))
    assert "\n" not in str(err.value)


def test_family_models_without_a_counterpart_are_refused_on_save(tmp_path):
    timm_only = keras_vit.from_pretrained(os.path.join(FAMILIES, "timm_deit3_small"))  # a head, no_embed_class
    with pytest.raises(keras_vit.CheckpointError, match="has no counterpart for this model"):
        keras_vit.save_pretrained(timm_only, tmp_path / "hf", format="transformers")
    with pytest.raises(keras_vit.CheckpointError, match="keras-hub's ViT has none of layer_scale"):
        keras_vit.save_pretrained(timm_only, tmp_path / "kh", format="keras_hub")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["timm_siglip_base", "timm_dinov2_small_reg4", "timm_deit_tiny_distilled"])
def test_family_models_convert_to_builtin_tflite(name):
    from ai_edge_litert.interpreter import Interpreter

    import export

    model = keras_vit.from_pretrained(os.path.join(FAMILIES, name))
    ref = io(name)
    flatbuffer = export.convert_tflite(model, output="logits")
    assert export.non_builtin_ops(export.read_ops(flatbuffer)) == []
    interpreter = Interpreter(model_content=flatbuffer)
    interpreter.allocate_tensors()
    given, taken = interpreter.get_input_details()[0]["index"], interpreter.get_output_details()[0]["index"]
    for image, logits in zip(ref["images"], ref["logits"]):
        interpreter.set_tensor(given, image[None].astype("float32"))
        interpreter.invoke()
        assert scaled_diff(interpreter.get_tensor(taken)[0], logits) < TOL


def test_registers_with_position_rows_are_refused_both_ways(tmp_path):
    from safetensors.numpy import save_file

    folder = _copy("timm_dinov2_small_reg4", tmp_path)
    state = load_file(folder / "model.safetensors")
    grid_rows = state["pos_embed"]
    state["pos_embed"] = np.concatenate([np.zeros((1, 5, 48), np.float32), grid_rows], axis=1)  # class + 4 registers
    save_file(state, folder / "model.safetensors")
    with pytest.raises(keras_vit.CheckpointError, match="rows for the register tokens"):
        keras_vit.from_pretrained(folder)
    hf_registers = keras_vit.from_pretrained(os.path.join(FAMILIES, "hf_dinov2_small_registers"))
    with pytest.raises(keras_vit.CheckpointError, match="save it as 'transformers'"):
        keras_vit.save_pretrained(hf_registers, tmp_path / "timm", format="timm")


def test_inspection_layout_counts_every_prefix_token():
    from keras_vit import inspect

    model = keras_vit.create_model("testing", num_registers=2, no_embed_class=True, layer_scale=1e-5)
    layout = inspect.token_layout(model)
    assert layout.num_prefix_tokens == model.config.num_prefix_tokens == 3
    assert inspect.position_embedding_similarity(model).shape == (4, 4, 4, 4)


@pytest.mark.slow
def test_every_family_exports_to_tflite_and_passes_the_exports_verification(tmp_path):
    """Each fixture through `export.export_model` (float32 TFLite): a classifier or, head-less, an image embedder."""
    import numpy as np

    import export

    kinds = {}
    for name in sorted(EXPECTED):
        model = keras_vit.from_pretrained(os.path.join(FAMILIES, name))
        size = model.input_shape[1]
        images = np.random.default_rng(0).integers(0, 256, (6, size, size, 3), dtype=np.uint8)
        report = export.export_model(
            export.ExportSource(model, heldout=(images, None)), tmp_path / name,
            export.ExportOptions(formats=("tflite",), quantize=("float32",), latency_runs=1, latency_warmup=0,
                                 gpu_check="off"),
        )  # fmt: skip
        assert report["passed"], name
        (artifact,) = report["artifacts"]
        assert artifact["passed"] and artifact["non_builtin_ops"] == [], name
        kinds[name] = artifact["name"]
    assert set(kinds) == set(EXPECTED)
    heads = {name for name, file in kinds.items() if file.startswith("model_")}
    embedders = {name for name, file in kinds.items() if file.startswith("embedder_")}
    assert heads and embedders and heads | embedders == set(EXPECTED), kinds
