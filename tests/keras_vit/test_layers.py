"""Behaviour of the individual layers and of the model's structure."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import layers as L
from tests.support import numpy_vit
from tests.support.checkpoints import vit_checkpoint


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


@pytest.mark.parametrize("initializer", ["glorot_uniform", "seeded", "generator"])
def test_projections_start_from_their_own_draws(initializer):
    """Query, key, value and output start from different values (one shared Keras initialiser instance repeats its
    draw: until 2026-12-04 they started equal), and the draws are still reproducible from the seeds."""
    made = {
        "glorot_uniform": lambda: "glorot_uniform",
        "seeded": lambda: keras.initializers.GlorotUniform(seed=3),
        "generator": lambda: keras.initializers.GlorotUniform(seed=keras.random.SeedGenerator(3)),
    }[initializer]

    def kernels():
        keras.utils.set_random_seed(7)
        layer = L.MultiHeadSelfAttention(4, kernel_initializer=made(), bias_initializer=made())
        layer.build((None, 5, 128))
        return [np.asarray(getattr(layer, f"{n}_{w}")).reshape(-1) for n in ("query", "key", "value", "out")
                for w in ("kernel", "bias")]  # fmt: skip

    first = kernels()
    for i in range(8):
        for j in range(i + 2, 8, 2):  # two projections' kernels (biases) uncorrelated: 16384 (128) values each
            assert abs(np.corrcoef(first[i], first[j])[0, 1]) < 0.45, (i, j)
    for a, b in zip(first, kernels()):
        np.testing.assert_array_equal(a, b)
    limit = np.sqrt(6 / (128 + 128))
    assert all(np.abs(k).max() <= limit and k.std() > 0.4 * limit for k in first[::2])


def test_mlp_denses_draw_their_own_biases():
    keras.utils.set_random_seed(1)
    block = L.MlpBlock(16)
    block.build((None, 3, 16))
    b0, b1 = np.asarray(block.dense_0.bias), np.asarray(block.dense_1.bias)
    assert not np.isclose(b0[:16], b1, rtol=0, atol=0).any()


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


@pytest.mark.skipif(keras.config.backend() == "torch", reason="on PyTorch GELU stays bfloat16 (faster there)")
@pytest.mark.parametrize("gelu", ["tanh", "exact", "quick"])
def test_mlp_gelu_under_bfloat16_is_computed_in_float32(gelu):
    """Under mixed_bfloat16 the activation is float32 maths on the bfloat16 pre-activation, rounded once."""
    import math

    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 9, 8)).astype("float32") * 3
    mlp = L.MlpBlock(64, gelu=gelu, dtype="mixed_bfloat16")
    mlp.build(x.shape)
    h = mlp.dense_0(keras.ops.cast(x, "bfloat16"))
    got = np.asarray(keras.ops.cast(mlp._activate(h), "float32"))
    assert keras.backend.standardize_dtype(mlp._activate(h).dtype) == "bfloat16"
    z = np.asarray(keras.ops.cast(h, "float32")).astype(np.float64)
    if gelu == "tanh":
        y = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    elif gelu == "exact":
        y = 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    else:
        y = z / (1 + np.exp(-1.702 * z))
    expected = np.asarray(keras.ops.cast(keras.ops.cast(y.astype("float32"), "bfloat16"), "float32"))
    # One rounding of the float32 result to bfloat16: at most one bfloat16 step (2^-8 relative) from numpy's value
    # rounded the same way, where bfloat16 arithmetic throughout drifts by several.
    np.testing.assert_allclose(got, expected, rtol=2**-8, atol=1e-6)


# ----- the ViT family's building blocks, against numpy -----


def test_quick_gelu_and_layer_scale_match_numpy():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 5, 8)).astype("float32")
    mlp = L.MlpBlock(16, gelu="quick")
    mlp.build(x.shape)
    w0, b0, w1, b1 = (v.numpy().astype(np.float64) for v in mlp.weights)
    h = x @ w0 + b0
    expected = (h / (1 + np.exp(-1.702 * h))) @ w1 + b1
    np.testing.assert_allclose(np.asarray(mlp(x)), expected, atol=1e-5)
    scale = L.LayerScale(1e-5)
    scale.build(x.shape)
    np.testing.assert_allclose(scale.scale.numpy(), 1e-5)
    gain = rng.standard_normal(8).astype("float32")
    scale.scale.assign(gain)
    np.testing.assert_allclose(np.asarray(scale(x)), x * gain, rtol=1e-6)


def test_register_tokens_go_after_the_class_token():
    x = np.random.default_rng(7).standard_normal((2, 5, 4)).astype("float32")
    layer = L.RegisterTokens(3, insert_at=1)
    out = np.asarray(layer(x))
    registers = layer.tokens.numpy()[0]
    assert out.shape == (2, 8, 4)
    np.testing.assert_array_equal(out[:, 0], x[:, 0])
    np.testing.assert_array_equal(out[:, 1:4], np.broadcast_to(registers, (2, 3, 4)))
    np.testing.assert_array_equal(out[:, 4:], x[:, 1:])


def test_map_head_matches_numpy():
    rng = np.random.default_rng(8)
    tokens = rng.standard_normal((2, 6, 8)).astype("float32")
    head = L.MAPHead(2, 16, gelu="tanh", layer_norm_epsilon=1e-6)
    head.build(tokens.shape)
    for w in head.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype("float32"))
    p = {w.path.split("/", 1)[1]: w.numpy().astype(np.float64) for w in head.weights}
    att = {"_".join(k.split("/")[-2:]): v for k, v in p.items() if "MultiHeadDotProductAttention_0" in k}
    q = np.einsum("d,dhk->hk", p["probe"][0, 0], att["query_kernel"]) + att["query_bias"]  # (H, Dh)
    k = np.einsum("btd,dhk->bthk", tokens, att["key_kernel"]) + att["key_bias"]
    v = np.einsum("btd,dhk->bthk", tokens, att["value_kernel"]) + att["value_bias"]
    weights = numpy_vit.softmax(np.einsum("hk,bthk->bht", q, k) / np.sqrt(4))
    y = np.einsum("bht,bthk,hkd->bd", weights, v, att["out_kernel"]) + att["out_bias"]
    norm = {k.split("/")[-1]: v for k, v in p.items() if "LayerNorm_0" in k}
    z = numpy_vit.layer_norm(y, norm["gamma"], norm["beta"], eps=1e-6)
    dense = [v for k, v in sorted(p.items()) if "MlpBlock_0" in k]  # Dense_0 bias, kernel, Dense_1 bias, kernel
    h = z @ dense[1] + dense[0]
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    expected = y + h @ dense[3] + dense[2]
    np.testing.assert_allclose(np.asarray(head(tokens)), expected, atol=1e-4)


def test_no_embed_class_adds_positions_to_patch_tokens_only():
    model = keras_vit.create_model("testing", no_embed_class=True, num_registers=2)
    rng = np.random.default_rng(9)
    for w in model.weights:
        w.assign(rng.normal(0, 0.2, w.shape).astype("float32"))
    assert model.get_layer("posembed_input").pos_embedding.shape == (1, 16, 32)
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    patches = keras.Model(model.input, model.get_layer("embedding").output).predict(images, verbose=0)
    tokens = keras.Model(model.input, model.get_layer("encoderblock_0").input).predict(images, verbose=0)
    assert tokens.shape == (2, 1 + 2 + 16, 32) and model.config.num_prefix_tokens == 3
    np.testing.assert_allclose(tokens[:, 0], np.broadcast_to(model.get_layer("cls").cls.numpy()[0, 0], (2, 32)))
    np.testing.assert_allclose(
        tokens[:, 1:3], np.broadcast_to(model.get_layer("registers").tokens.numpy()[0], (2, 2, 32))
    )
    posemb = model.get_layer("posembed_input").pos_embedding.numpy()
    np.testing.assert_allclose(tokens[:, 3:], patches + posemb, atol=1e-6)


@pytest.mark.slow
def test_distillation_averages_the_two_heads():
    model = keras_vit.create_model("testing", distillation_token=True, num_classes=3)
    rng = np.random.default_rng(10)
    for w in model.weights:
        w.assign(rng.normal(0, 0.2, w.shape).astype("float32"))
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    normed = keras.Model(model.input, model.get_layer("encoder_norm").output).predict(images, verbose=0)
    head, dist = model.get_layer("head"), model.get_layer("head_dist")
    expected = (normed[:, 0] @ head.kernel.numpy() + head.bias.numpy()) / 2
    expected += (normed[:, 1] @ dist.kernel.numpy() + dist.bias.numpy()) / 2
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, atol=1e-5)
    features = keras_vit.create_model("testing", distillation_token=True, num_classes=0)
    assert features.output_shape == (None, 32)


def test_bias_free_patch_embedding_and_pre_norm_layers():
    model = keras_vit.create_model("testing", patch_bias=False, pre_norm=True)
    assert model.get_layer("embedding").bias is None
    names = [layer.name for layer in model.layers]
    assert names.index("norm_pre") < names.index("encoderblock_0")
    with pytest.raises(ValueError, match="distillation_token=True needs class_token=True"):
        keras_vit.create_model("testing", distillation_token=True, class_token=False, pooling="gap")


@pytest.mark.parametrize("class_token", [True, False])
def test_fc_norm_normalises_the_mean_of_the_patch_tokens(class_token):
    model = keras_vit.create_model("testing", pooling="gap", fc_norm=True, class_token=class_token, num_classes=3)
    assert "encoder_norm" not in [layer.name for layer in model.layers]
    rng = np.random.default_rng(11)
    for w in model.weights:
        w.assign(rng.normal(0, 0.3, w.shape).astype("float32"))
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    tokens = keras.Model(model.input, model.get_layer("encoderblock_1").output).predict(images, verbose=0)
    assert tokens.shape[1] == 16 + class_token
    norm, head = model.get_layer("fc_norm"), model.get_layer("head")
    pooled = tokens[:, int(class_token) :].astype(np.float64).mean(1)
    expected = numpy_vit.layer_norm(pooled, norm.gamma.numpy(), norm.beta.numpy(), eps=1e-6)
    expected = expected @ head.kernel.numpy() + head.bias.numpy()
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, atol=1e-5)
