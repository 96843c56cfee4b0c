"""Every reader, fed a file with an extra tensor or a tensor in another layout (transposed), gives the exact
answer or a refusal, never a model built from a misread tensor."""

import shutil

import h5py
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import keras_vit
from keras_vit.weights.errors import CheckpointError
from tests import support

INTEROP = support.FIXTURES / "interop"


def _expected(folder):
    with np.load(folder / "io.npz") as io:
        return io["images"], io["logits"]


def _close_or_refused(source, folder):
    """The model's logits on the fixture's images match the other library's saved ones, or the file is refused."""
    try:
        model = keras_vit.from_pretrained(str(source))
    except CheckpointError:  # a mismatch lists every tensor that does not fit, a line each
        return "refused"
    images, logits = _expected(folder)
    out = np.asarray(model(images))
    np.testing.assert_allclose(out, logits, atol=1e-4 * np.abs(logits).max())
    return "exact"


def _edit_safetensors(tmp_path, fixture, edit):
    folder = tmp_path / fixture
    shutil.copytree(INTEROP / fixture, folder)
    state = load_file(folder / "model.safetensors")
    edit(state)
    save_file(state, folder / "model.safetensors")
    return folder


@pytest.mark.parametrize(
    ("fixture", "block"), [("timm_vit_tiny", "blocks.0.mlp.fc1"), ("hf_vit_for_image_classification", None)]
)
@pytest.mark.parametrize("change", ["extra", "transposed"])
def test_safetensors_readers(tmp_path, fixture, block, change):
    if block is None:
        block = "vit.encoder.layer.0.intermediate.dense"

    def edit(state):
        if change == "extra":
            state[f"{block}.extra"] = np.ones(3, np.float32)
        else:
            state[f"{block}.weight"] = np.ascontiguousarray(state[f"{block}.weight"].T)

    folder = _edit_safetensors(tmp_path, fixture, edit)
    assert _close_or_refused(folder, INTEROP / fixture) == "refused"


@pytest.mark.parametrize("change", ["extra", "transposed"])
def test_npz_reader(tmp_path, change):
    params = dict(np.load(support.FIXTURES / "vit_tiny_official.npz"))
    key = next(k for k in params if k.endswith("MlpBlock_3/Dense_0/kernel"))
    if change == "extra":
        params["Transformer/extra/kernel"] = np.ones((3, 3), np.float32)
    else:
        params[key] = np.ascontiguousarray(params[key].T)
    np.savez(tmp_path / "edited.npz", **params)
    with pytest.raises(CheckpointError):
        keras_vit.from_pretrained(str(tmp_path / "edited.npz"))


@pytest.mark.parametrize("change", ["extra", "transposed"])
def test_keras_hub_reader(tmp_path, change):
    fixture = "keras_hub_vit_image_classifier"
    folder = tmp_path / fixture
    shutil.copytree(INTEROP / fixture, folder)
    with h5py.File(folder / "model.weights.h5", "r+") as f:
        kernels = []
        f.visititems(
            lambda name, obj: kernels.append(name) if isinstance(obj, h5py.Dataset) and obj.ndim == 2 else None
        )
        name = next(k for k in kernels if f[k].shape[0] != f[k].shape[1])
        if change == "extra":
            f[name].parent.create_dataset(str(len(f[name].parent)), data=np.ones(3, np.float32))
        else:
            data = f[name][()].T
            del f[name]
            f.create_dataset(name, data=data)
    assert _close_or_refused(folder, INTEROP / fixture) in ("refused", "exact")


# transformers' TimmWrapper classes save a timm model as `config.json` with `model_type: timm_wrapper`, the timm
# config's fields, `num_classes` and `label_names` (TimmWrapperConfig.to_dict), and every tensor under `timm_model.`.
WRAPPED = {"timm_vit_tiny": INTEROP, "timm_dinov3_small": support.FIXTURES / "interop_families2"}


def _timm_wrapper_folder(folder, out, **model_args):
    import json

    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_args"] = {**(cfg.get("model_args") or {}), **model_args}
    classes = cfg["num_classes"]
    cfg.update(model_type="timm_wrapper", architectures=["TimmWrapperForImageClassification"], do_pooling=True,
               initializer_range=0.02, label_names=[f"class {i}" for i in range(classes)])  # fmt: skip
    out.mkdir()
    (out / "config.json").write_text(json.dumps(cfg))
    state = load_file(folder / "model.safetensors")
    save_file({f"timm_model.{k}": v for k, v in state.items()}, out / "model.safetensors")
    return out


@pytest.mark.parametrize("name", sorted(WRAPPED))
def test_a_transformers_timm_wrapper_folder_loads_as_its_timm_model(name, tmp_path):
    folder = WRAPPED[name] / name
    model = keras_vit.from_pretrained(str(_timm_wrapper_folder(folder, tmp_path / "wrapped")))
    images, logits = _expected(folder)
    np.testing.assert_allclose(np.asarray(model(images)), logits, rtol=0, atol=1e-5)
    assert model.class_names[0] == "class 0"


def test_a_timm_wrapper_config_that_its_tensors_contradict_is_refused_before_keras_builds(tmp_path):
    wrapped = _timm_wrapper_folder(INTEROP / "timm_vit_tiny", tmp_path / "wrapped", depth=3)
    with pytest.raises(CheckpointError, match="depth"):
        keras_vit.from_pretrained(str(wrapped))
