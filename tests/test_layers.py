"""Behaviour of the individual layers and of the model's structure."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import layers as L
from tests import numpy_vit
from tests.checkpoints import vit_checkpoint


def test_gap_excludes_the_class_token():
    tokens = np.random.default_rng(0).standard_normal((2, 5, 3)).astype("float32")
    tokens[:, 0] = 1e4  # a class token that would dominate any mean it entered
    pooled = np.asarray(L.TokenPooling("gap", num_prefix_tokens=1)(tokens))
    np.testing.assert_allclose(pooled, tokens[:, 1:].mean(1), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(L.TokenPooling("token")(tokens)), tokens[:, 0])


def test_head_is_zero_initialised_and_bias_init_is_honoured():
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(keras_vit.create_model("testing").predict(images, verbose=0), 0)
    logits = keras_vit.create_model("testing", head_bias_init=-6.9).predict(images, verbose=0)
    np.testing.assert_allclose(logits, -6.9, rtol=1e-6)


def test_class_token_is_zero_and_position_embedding_is_small_normal():
    model = keras_vit.create_model("B/16", num_layers=1)
    np.testing.assert_array_equal(model.get_layer("cls").cls.numpy(), 0)
    posemb = model.get_layer("posembed_input").pos_embedding.numpy()
    assert posemb.shape == (1, 197, 768)
    assert abs(posemb.std() - 0.02) < 0.001 and abs(posemb.mean()) < 0.001


@pytest.mark.parametrize("representation_size, width", [(None, 32), (24, 24)])
def test_num_classes_zero_returns_pooled_features(representation_size, width):
    model = keras_vit.create_model("testing", num_classes=0, representation_size=representation_size)
    assert "head" not in [layer.name for layer in model.layers]
    assert model.output_shape == (None, width)


def test_intermediates_by_layer_name(tmp_path):
    ckpt = vit_checkpoint(
        np.random.default_rng(2), hidden=32, layers=2, heads=2, mlp=128, patch=8, grid=(4, 4), classes=10
    )
    np.savez(tmp_path / "c.npz", **ckpt)
    model = keras_vit.create_model("testing")
    keras_vit.load_npz(model, tmp_path / "c.npz")
    images = np.random.default_rng(3).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    tokens = keras.Model(model.input, model.get_layer("encoderblock_0").input).predict(images, verbose=0)
    assert tokens.shape == (2, 17, 32)
    out, weights = model.get_layer("encoderblock_0")(tokens, return_attention_scores=True)
    weights = np.asarray(weights)
    assert weights.shape == (2, 2, 17, 17)
    np.testing.assert_allclose(weights.sum(-1), 1, rtol=1e-5)
    # The same attention, computed head by head in numpy from the checkpoint.
    params = {k: v.astype(np.float64) for k, v in ckpt.items()}
    prefix = "Transformer/encoderblock_0"
    y = numpy_vit.layer_norm(tokens, params[f"{prefix}/LayerNorm_0/scale"], params[f"{prefix}/LayerNorm_0/bias"])
    q = np.einsum("btd,dhk->bhtk", y, params[f"{prefix}/MultiHeadDotProductAttention_1/query/kernel"])
    q += params[f"{prefix}/MultiHeadDotProductAttention_1/query/bias"][None, :, None]
    k = np.einsum("btd,dhk->bhtk", y, params[f"{prefix}/MultiHeadDotProductAttention_1/key/kernel"])
    k += params[f"{prefix}/MultiHeadDotProductAttention_1/key/bias"][None, :, None]
    expected = numpy_vit.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(16))
    np.testing.assert_allclose(weights, expected, atol=1e-5)
    block_out = keras.Model(model.input, model.get_layer("encoderblock_0").output).predict(images, verbose=0)
    np.testing.assert_allclose(np.asarray(out), block_out, atol=1e-5)


def test_drop_path_drops_whole_examples_and_rescales():
    x = np.ones((2000, 3, 4), "float32")
    out = np.asarray(L.DropPath(0.25, seed=0)(x, training=True))
    per_example = out.reshape(2000, -1)
    kept_or_dropped = np.isclose(per_example, 0) | np.isclose(per_example, 1 / 0.75)
    assert kept_or_dropped.all()
    assert (per_example == per_example[:, :1]).all()  # all or nothing per example
    assert abs((per_example[:, 0] == 0).mean() - 0.25) < 0.04
    np.testing.assert_array_equal(np.asarray(L.DropPath(0.25)(x, training=False)), x)


def test_stochastic_depth_grows_linearly():
    model = keras_vit.create_model("testing", num_layers=5, stochastic_depth_rate=0.2)
    rates = [model.get_layer(f"encoderblock_{i}").drop_path_rate for i in range(5)]
    np.testing.assert_allclose(rates, [0.0, 0.05, 0.1, 0.15, 0.2])


def test_dropout_only_in_training():
    model = keras_vit.create_model("testing", dropout_rate=0.5, attention_dropout_rate=0.5, head_bias_init=0.0)
    rng = np.random.default_rng(4)
    for w in model.weights:
        w.assign(rng.normal(0, 0.2, w.shape).astype("float32"))
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(model(images)), np.asarray(model(images)))
    assert np.abs(np.asarray(model(images, training=True)) - np.asarray(model(images))).max() > 1e-3


def test_attention_initialiser_uses_matrix_fans():
    """Xavier-uniform on the (D, H*D_h) matrix, as the reference initialises Flax's DenseGeneral."""
    layer = L.MultiHeadSelfAttention(12)
    layer.build((None, 197, 768))
    limit = np.sqrt(6 / (768 + 768))
    kernel = layer.query_kernel.numpy()
    assert kernel.shape == (768, 12, 64)
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.95 * limit


def test_layer_norm_matches_numpy_and_keras():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 7, 24)) * 3 + 1).astype("float32")
    ours = L.LayerNorm(epsilon=1e-6)
    ours.build(x.shape)
    gamma, beta = rng.standard_normal(24).astype("float32"), rng.standard_normal(24).astype("float32")
    ours.gamma.assign(gamma)
    ours.beta.assign(beta)
    expected = numpy_vit.layer_norm(x.astype(np.float64), gamma, beta, eps=1e-6)
    np.testing.assert_allclose(np.asarray(ours(x)), expected, atol=1e-5)
    theirs = keras.layers.LayerNormalization(epsilon=1e-6)
    theirs.build(x.shape)
    theirs.set_weights([gamma, beta])
    np.testing.assert_allclose(np.asarray(ours(x)), np.asarray(theirs(x)), atol=1e-5)
    mixed = L.LayerNorm(epsilon=1e-6, dtype="mixed_bfloat16")
    mixed.build(x.shape)
    assert mixed.gamma.dtype == "float32"
    y = mixed(keras.ops.cast(x, "bfloat16"))
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
