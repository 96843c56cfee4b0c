"""The NaFlex model's parts: the per-image position-table resize against a numpy antialiased bilinear, padded keys
masked in every attention, `.keras` saving and the config round trip."""

import keras
import numpy as np
import pytest

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.naflex_position_embedding import NaFlexPositionEmbedding, interpolation_weights
from keras_vit.models.naflex import NaFlexViT

TINY = dict(
    max_num_patches=12, patch_size=2, position_grid=(3, 4), hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
    num_classes=3,
)  # fmt: skip


def antialiased_bilinear(n_in, n_out):
    """(n_out, n_in): F.interpolate(mode="bilinear", align_corners=False, antialias=True) as a matrix, written
    the way Pillow's and PyTorch's resamplers compute their taps (a window, then the triangle kernel)."""
    scale = n_in / n_out
    support = max(scale, 1.0)
    matrix = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
        for j in range(lo, hi):
            matrix[i, j] = max(0.0, 1.0 - abs((j - center + 0.5) / support))
        matrix[i] /= matrix[i].sum()
    return matrix


@pytest.mark.parametrize("grid", [(3, 4), (2, 6), (6, 2), (1, 1), (4, 3), (3, 2), (1, 12)])
def test_interpolation_weights_are_antialiased_bilinear(grid):
    table = (3, 4)
    got = np.asarray(interpolation_weights(np.array([grid], np.int32), 12, table))[0]
    h, w = grid
    expected = np.einsum("ia,jb->ijab", antialiased_bilinear(table[0], h), antialiased_bilinear(table[1], w))
    np.testing.assert_allclose(got[: h * w], expected.reshape(h * w, -1), atol=1e-6)
    assert not got[h * w :].any()  # padding tokens get no table row


def test_shrinking_by_two_spreads_over_three_rows():
    # PyTorch's antialiased bilinear, 4 -> 2: the first output takes rows 0, 1, 2 with weights 3/7, 3/7, 1/7.
    weights = np.asarray(interpolation_weights(np.array([[2, 1]], np.int32), 2, (4, 1)))[0]
    np.testing.assert_allclose(weights[0], [3 / 7, 3 / 7, 1 / 7, 0], atol=1e-6)


def test_the_tables_own_grid_adds_the_table():
    layer = NaFlexPositionEmbedding((3, 4))
    tokens = np.zeros((1, 12, 5), np.float32)
    out = np.asarray(layer(tokens, np.array([[3, 4]], np.int32)))
    np.testing.assert_allclose(out[0], np.asarray(layer.pos_embedding)[0], atol=1e-7)


def test_masked_keys_take_no_attention():
    layer = MultiHeadSelfAttention(2)
    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(2, 6, 8)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], np.int32)
    out, weights = layer(tokens, key_mask=mask, return_attention_scores=True)
    assert np.asarray(weights)[0, :, :, 4:].max() == 0 and np.asarray(weights)[1, :, :, 3:].max() == 0
    noisy = tokens.copy()
    noisy[0, 4:] = 100.0
    noisy[1, 3:] = -100.0
    again = layer(noisy, key_mask=mask)
    np.testing.assert_allclose(np.asarray(again)[0, :4], np.asarray(out)[0, :4], atol=1e-5)
    np.testing.assert_allclose(np.asarray(again)[1, :3], np.asarray(out)[1, :3], atol=1e-5)


def _inputs(rng, grids, n=12, patch=2):
    patches = rng.normal(size=(len(grids), n, patch * patch * 3)).astype(np.float32)
    counts = np.array([h * w for h, w in grids])
    mask = (np.arange(n)[None] < counts[:, None]).astype(np.int32)
    return dict(patches=patches * mask[..., None], mask=mask, grid=np.array(grids, np.int32))


def test_padding_rows_do_not_reach_the_outputs():
    model = NaFlexViT(**TINY)
    for layer in model.layers:  # a nonzero head, so that the logits depend on the tokens
        if layer.name == "head":
            layer.kernel.assign(np.random.default_rng(1).normal(size=layer.kernel.shape))
    inputs = _inputs(np.random.default_rng(0), [(3, 4), (2, 5), (1, 7)])
    logits = np.asarray(model(inputs))
    noisy = dict(inputs, patches=np.where(inputs["mask"][..., None] > 0, inputs["patches"], 50.0).astype(np.float32))
    np.testing.assert_allclose(np.asarray(model(noisy)), logits, atol=1e-5)
    unmasked = dict(noisy, mask=np.ones_like(inputs["mask"]))
    assert np.abs(np.asarray(model(unmasked)) - logits).max() > 1e-3  # the mask is what kept them out


def test_keras_file_round_trip(tmp_path):
    model = NaFlexViT(**TINY, class_names=["a", "b", "c"])
    inputs = _inputs(np.random.default_rng(0), [(3, 4), (2, 3)])
    expected = np.asarray(keras.Model(model.inputs, model.get_layer("MAPHead_0").output)(inputs))
    model.save(tmp_path / "naflex.keras")
    loaded = keras.saving.load_model(tmp_path / "naflex.keras")
    assert isinstance(loaded, NaFlexViT) and loaded.class_names == ("a", "b", "c")
    assert loaded.get_config() == model.get_config()
    got = np.asarray(keras.Model(loaded.inputs, loaded.get_layer("MAPHead_0").output)(inputs))
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_compiled_predict_matches_eager():
    model = NaFlexViT(**dict(TINY, num_classes=0))
    inputs = _inputs(np.random.default_rng(0), [(3, 4), (2, 3), (4, 3)])
    np.testing.assert_allclose(model.predict(inputs, verbose=0), np.asarray(model(inputs)), atol=1e-5)


def test_bad_options_are_one_line():
    with pytest.raises(ValueError, match=r"pooling must be one of \('map', 'gap'\). Received: pooling='token'"):
        NaFlexViT(**dict(TINY, pooling="token"))
    with pytest.raises(ValueError, match="divisible by num_heads"):
        NaFlexViT(**dict(TINY, num_heads=3))


def test_the_fused_route_masks_as_the_explicit_one(monkeypatch):
    """`keras.ops.dot_product_attention` with the additive bias (the GPU/TPU route) equals the explicit softmax."""
    layer = MultiHeadSelfAttention(2)
    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(2, 6, 8)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], np.int32)
    monkeypatch.setenv("KERAS_VIT_FUSED_ATTENTION", "never")
    explicit = np.asarray(layer(tokens, key_mask=mask))
    monkeypatch.setenv("KERAS_VIT_FUSED_ATTENTION", "always")
    fused = np.asarray(layer(tokens, key_mask=mask))
    np.testing.assert_allclose(fused, explicit, atol=1e-5)
    assert np.abs(np.asarray(layer(tokens)) - fused).max() > 1e-3
