"""load_npz on big_vision's key layouts (plain and scan), which must load to the same model as the original."""

import numpy as np
import pytest

import keras_vit
from tests.support import numpy_vit
from tests.support.checkpoints import vit_checkpoint

BLOCK_RENAMES = {
    "MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
    "LayerNorm_2": "LayerNorm_1",
    "MlpBlock_3": "MlpBlock_0",
}


def _big_vision_layout(original, scan):
    """Writes an original-layout checkpoint the way big_vision names it (see ../shared/REFERENCE.md)."""
    out = {}
    blocks = {}
    for key, value in original.items():
        if key == "Transformer/posembed_input/pos_embedding":
            # big_vision adds its (class-row-free) embedding before prepending the class token.
            out["params/pos_embedding"] = value[:, 1:] if "cls" in original else value
            continue
        parts = key.split("/")
        if key.startswith("Transformer/encoderblock_"):
            parts[2] = BLOCK_RENAMES.get(parts[2], parts[2])
            if scan:
                blocks.setdefault("/".join(parts[2:]), {})[int(parts[1].split("_")[1])] = value
                continue
        out["params/" + "/".join(parts)] = value
    for rest, per_layer in blocks.items():
        out[f"params/Transformer/encoderblock/{rest}"] = np.stack([per_layer[i] for i in sorted(per_layer)])
    return out


@pytest.mark.parametrize("scan", [False, True])
def test_big_vision_layout(tmp_path, scan):
    rng = np.random.default_rng(0)
    ckpt = vit_checkpoint(rng, hidden=32, layers=2, heads=2, mlp=128, patch=8, grid=(4, 4), classes=10)
    # big_vision gives the class token no position embedding: the equivalent original checkpoint has a zero row.
    ckpt["Transformer/posembed_input/pos_embedding"][:, 0] = 0
    np.savez(tmp_path / "bv.npz", **_big_vision_layout(ckpt, scan))
    model = keras_vit.create_model("testing")
    keras_vit.load_npz(model, tmp_path / "bv.npz")
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = numpy_vit.vit_forward(images, ckpt, num_layers=2)
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, atol=1e-5 * np.abs(expected).max())


def test_big_vision_gap_model_without_class_token(tmp_path):
    rng = np.random.default_rng(1)
    ckpt = vit_checkpoint(rng, hidden=32, layers=2, heads=2, mlp=128, patch=8, grid=(4, 4), classes=10, cls=False)
    np.savez(tmp_path / "gap.npz", **_big_vision_layout(ckpt, scan=False))
    model = keras_vit.create_model("testing", class_token=False, pooling="gap")
    keras_vit.load_npz(model, tmp_path / "gap.npz")
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = numpy_vit.vit_forward(images, ckpt, num_layers=2, pooling="gap")
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, atol=1e-5 * np.abs(expected).max())
