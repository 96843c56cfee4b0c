"""The fused attention route (keras.ops.dot_product_attention, sequences padded and masked) against numpy and
against the explicit route, on the CPU in float32; the env switch; the projections Keras' tools reach."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import MultiHeadSelfAttention, attention_kernel
from tests import support


def _numpy_attention(q, k, v, scale):
    scores = np.einsum("bqhk,bshk->bhqs", q.astype(np.float64) * scale, k.astype(np.float64))
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhqs,bshk->bqhk", weights, v.astype(np.float64))


@pytest.mark.parametrize("multiple", [1, 2, 64])
@pytest.mark.parametrize("tokens, keys", [(197, 197), (1, 50), (64, 64)])
def test_fused_route_matches_numpy_and_the_explicit_route(multiple, tokens, keys):
    rng = np.random.default_rng(tokens + keys + multiple)
    q = rng.standard_normal((2, tokens, 3, 8)).astype("float32")
    k, v = (rng.standard_normal((2, keys, 3, 8)).astype("float32") for _ in range(2))
    scale = 8**-0.5
    fused = keras.ops.convert_to_numpy(attention_kernel.fused(q, k, v, scale, multiple=multiple))
    explicit, weights = attention_kernel.explicit(q, k, v, scale)
    assert fused.shape == (2, tokens, 3, 8)
    np.testing.assert_allclose(fused, _numpy_attention(q, k, v, scale), atol=1e-6, rtol=0)
    np.testing.assert_allclose(fused, keras.ops.convert_to_numpy(explicit), atol=1e-6, rtol=0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights).sum(-1), 1.0, atol=1e-6)


def _model_outputs(monkeypatch, mode, **kwargs):
    monkeypatch.setenv(attention_kernel.ENV, mode)
    keras.utils.set_random_seed(3)
    model = keras_vit.create_model("testing", num_classes=5, image_size=32, **kwargs)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.5, head.kernel.shape))
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    return keras.ops.convert_to_numpy(model(images, training=False))


@pytest.mark.parametrize("pooling", ["token", "map"])
def test_a_model_on_the_fused_route_computes_what_the_explicit_route_does(monkeypatch, pooling):
    explicit = _model_outputs(monkeypatch, "never", pooling=pooling)
    fused = _model_outputs(monkeypatch, "always", pooling=pooling)
    assert np.abs(explicit).max() > 0.1  # a decisive head: the comparison means something
    np.testing.assert_allclose(fused, explicit, atol=1e-6, rtol=0)


def test_auto_keeps_the_explicit_route_on_this_cpu(monkeypatch):
    monkeypatch.delenv(attention_kernel.ENV, raising=False)
    q = np.zeros((1, 4, 2, 8), "float32")
    assert attention_kernel.mode() == "auto"
    assert not attention_kernel.use_fused(q)
    assert attention_kernel.padding_multiple(q) == 1


def test_bad_switch_values_are_refused_in_one_line(monkeypatch):
    monkeypatch.setenv(attention_kernel.ENV, "fast")
    with pytest.raises(ValueError, match="KERAS_VIT_FUSED_ATTENTION must be auto, always or never"):
        attention_kernel.mode()


def test_projections_are_einsum_dense_layers_with_the_checkpoint_layout():
    layer = MultiHeadSelfAttention(4)
    layer.build((None, 10, 32))
    for name in ("query", "key", "value"):
        sub = getattr(layer, name)
        assert isinstance(sub, keras.layers.EinsumDense)
        assert tuple(sub.kernel.shape) == (32, 4, 8) and tuple(sub.bias.shape) == (4, 8)
    assert tuple(layer.out.kernel.shape) == (4, 8, 32) and tuple(layer.out.bias.shape) == (32,)
    assert layer.query_kernel is layer.query.kernel  # the loaders' names


def test_a_keras_file_from_before_the_projection_layers_loads_to_its_own_outputs():
    """tests/fixtures/keras_vit_07f07df_testing.keras: a `testing` model (32 px, 3 classes, random head) saved by
    keras-vit at 07f07df, when the attention layer held its eight variables itself; the logits beside it are what
    that version computed for these images."""
    fixtures = support.FIXTURES
    model = keras.saving.load_model(fixtures / "keras_vit_07f07df_testing.keras")
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = np.load(fixtures / "keras_vit_07f07df_testing_logits.npy")
    # Another CPU (vector width, FMA) rounds float32 sums apart by a few ulps of the logits' scale: a relative bound.
    scale = np.abs(expected).max()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(images)), expected, atol=1e-5 * scale, rtol=0)
