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
