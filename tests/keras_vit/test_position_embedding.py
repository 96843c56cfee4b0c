"""Position-embedding interpolation to a new patch grid (fine-tuning at a higher resolution)."""

import numpy as np
import pytest
import scipy.ndimage

import keras_vit
from keras_vit.layers import resize_position_embedding
from tests.support import numpy_vit
from tests.support.checkpoints import vit_checkpoint


def _grid(posemb, grid):
    return posemb[0, 1:].reshape(*grid, -1)


def test_224_checkpoint_loads_into_384_model(tmp_path):
    rng = np.random.default_rng(0)
    ckpt = vit_checkpoint(rng, hidden=192, layers=1, heads=3, mlp=64, patch=16, grid=(14, 14), classes=1000)
    np.savez(tmp_path / "ti16_224.npz", **ckpt)
    model = keras_vit.create_model("Ti/16", image_size=384, num_layers=1, mlp_dim=64)
    report = keras_vit.load_npz(model, tmp_path / "ti16_224.npz")
    assert "Transformer/posembed_input/pos_embedding" in report.resized
    loaded = model.get_layer("posembed_input").pos_embedding.numpy()
    original = ckpt["Transformer/posembed_input/pos_embedding"]
    assert loaded.shape == (1, 24 * 24 + 1, 192)
    np.testing.assert_array_equal(loaded[0, 0], original[0, 0])  # class row unchanged
    expected = scipy.ndimage.zoom(_grid(original, (14, 14)), (24 / 14, 24 / 14, 1), order=1)
    np.testing.assert_allclose(_grid(loaded, (24, 24)), expected, atol=1e-6)


@pytest.mark.parametrize("old, new", [((4, 4), (6, 6)), ((4, 4), (3, 7)), ((3, 5), (6, 10)), ((7, 7), (2, 2))])
def test_zoom_matches_scipy(old, new):
    rng = np.random.default_rng(1)
    posemb = rng.standard_normal((1, 1 + old[0] * old[1], 8)).astype(np.float32)
    out = resize_position_embedding(posemb, new, old_grid=old)
    zoom = (new[0] / old[0], new[1] / old[1], 1)
    np.testing.assert_allclose(_grid(out, new), scipy.ndimage.zoom(_grid(posemb, old), zoom, order=1), atol=1e-5)
    np.testing.assert_array_equal(out[0, 0], posemb[0, 0])


@pytest.mark.parametrize("old, new", [((4, 4), (6, 6)), ((5, 3), (8, 9)), ((6, 6), (4, 4))])
def test_bilinear_matches_tf_resize(old, new):
    import tensorflow as tf

    rng = np.random.default_rng(2)
    posemb = rng.standard_normal((1, old[0] * old[1], 8)).astype(np.float32)  # no class row
    out = resize_position_embedding(posemb, new, old_grid=old, num_prefix_tokens=0, method="bilinear")
    expected = tf.image.resize(posemb.reshape(1, *old, 8), new, method="bilinear", antialias=False).numpy()
    np.testing.assert_allclose(out.reshape(1, *new, 8), expected, atol=1e-5)


@pytest.mark.parametrize("old, new", [((4, 4), (6, 6)), ((5, 3), (8, 9)), ((3, 3), (9, 4))])
def test_bicubic_upsampling_matches_pil_and_tf(old, new):
    """Keys cubic (a = -0.5), half-pixel centres, out-of-grid taps dropped and renormalised. PIL computes the
    kernel exactly (upsampling, no antialias then); TF reads it from a 1024-entry table, hence its looser bound."""
    import tensorflow as tf
    from PIL import Image

    rng = np.random.default_rng(3)
    posemb = rng.standard_normal((1, old[0] * old[1], 2)).astype(np.float32)
    out = resize_position_embedding(posemb, new, old_grid=old, num_prefix_tokens=0, method="bicubic")
    out = out.reshape(*new, 2)
    grid = posemb.reshape(*old, 2)
    for c in range(2):
        pil = np.asarray(Image.fromarray(grid[..., c], mode="F").resize(new[::-1], Image.BICUBIC))
        np.testing.assert_allclose(out[..., c], pil, atol=1e-5)
    tf_out = tf.image.resize(grid[None], new, method="bicubic", antialias=False).numpy()[0]
    np.testing.assert_allclose(out, tf_out, atol=3e-3)


def test_same_grid_is_identity():
    posemb = np.random.default_rng(3).standard_normal((1, 17, 4)).astype(np.float32)
    np.testing.assert_array_equal(resize_position_embedding(posemb, (4, 4)), posemb)


def test_non_square_checkpoint_needs_its_grid():
    posemb = np.zeros((1, 1 + 12, 4), np.float32)
    with pytest.raises(ValueError, match="not a square"):
        resize_position_embedding(posemb, (4, 4))
    assert resize_position_embedding(posemb, (4, 4), old_grid=(3, 4)).shape == (1, 17, 4)


def test_unknown_method():
    with pytest.raises(ValueError, match="Unknown position-embedding resize method 'area'"):
        resize_position_embedding(np.zeros((1, 17, 4)), (2, 2), method="area")


def test_sincos_table_is_fixed_and_loaded_into_model():
    from keras_vit.layers import sincos_2d_table

    model = keras_vit.create_model("testing", position_embedding="sincos2d", pooling="gap", class_token=False)
    layer = model.get_layer("posembed_input")
    assert not layer.pos_embedding.trainable
    np.testing.assert_allclose(layer.pos_embedding.numpy()[0], numpy_vit.sincos_2d((4, 4), 32), atol=1e-6)
    # A non-square grid pins the row/column order; the reference's values written out for a 2x3 grid, width 8
    # (omega = 1, 1e-4): token 1 is row 0, column 1; token 3 is row 1, column 0.
    for grid, width in (((2, 3), 8), ((3, 5), 24), ((14, 14), 384)):
        np.testing.assert_allclose(sincos_2d_table(grid, width), numpy_vit.sincos_2d(grid, width), atol=1e-12)
    s, c = np.sin([1.0, 1e-4]), np.cos([1.0, 1e-4])
    table = sincos_2d_table((2, 3), 8)
    np.testing.assert_allclose(table[1], [*s, *c, 0, 0, 1, 1], atol=1e-12)
    np.testing.assert_allclose(table[3], [0, 0, 1, 1, *s, *c], atol=1e-12)
