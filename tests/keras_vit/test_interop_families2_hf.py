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

FAMILIES2 = os.path.join(str(support.FIXTURES), "interop_families2")
TOL = 1e-5
OUTPUTS = ("last_hidden_state", "pooler_output")


def io(name):
    return dict(np.load(os.path.join(FAMILIES2, name, "io.npz")))


def scaled_diff(actual, expected):
    """Max |difference| over max(1, max |expected|): absolute for outputs of order 1, relative for larger ones."""
    diff = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64)).max()
    return float(diff / max(1.0, float(np.abs(expected).max())))


def last_hidden_state(model, images):
    """transformers' last_hidden_state: CLIP's is the last block's output (its post_layernorm sees the class token
    only, which keras-vit's encoder_norm + pool compute); the others' is the final norm's."""
    config = model.config
    layer = f"encoderblock_{config.num_layers - 1}" if config.pre_norm else "encoder_norm"
    return keras.Model(model.input, model.get_layer(layer).output).predict(images, verbose=0)


def outputs(model, images):
    return {"last_hidden_state": last_hidden_state(model, images), "pooler_output": model.predict(images, verbose=0)}


# fixture: the options keras-vit must read
EXPECTED = {
    "hf_metaclip2_vision": dict(pre_norm=True, patch_bias=False, gelu="quick", layer_norm_epsilon=1e-5, num_classes=0),
    "hf_metaclip2_dual": dict(pre_norm=True, patch_bias=False, gelu="quick", layer_norm_epsilon=1e-5, num_classes=0),
}


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


def test_save_pretrained_round_trip(fixture, tmp_path):
    """Written back in transformers' layout: the vision tower's tensor names and shapes (a MetaCLIP 2 tower is
    written as the CLIPVisionModel it is), the same outputs when read again."""
    name, model, ref = fixture
    out = keras_vit.save_pretrained(model, tmp_path / name, format="transformers")
    written = load_file(os.path.join(out, "model.safetensors"))
    original = load_file(os.path.join(FAMILIES2, name, "model.safetensors"))
    tower = {k.removeprefix("vision_model."): v.shape for k, v in original.items()}
    tower = {k: v for k, v in tower.items() if k.startswith(("embeddings.", "encoder.", "pre_", "post_", "layer"))}
    assert {k: v.shape for k, v in written.items()} == tower
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
