"""The second generation's layers against numpy versions of timm's and DINOv3's own functions: rotary embeddings
(three variants, both layouts, square and non-square grids, in the graph too), SwiGLU (split and packed), RMSNorm;
config round trips, `.keras` files, and the fused attention route of a RoPE model."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import layers as L
from keras_vit.layers import attention_kernel
from tests.support import rope_reference as ref

EPS32 = float(np.finfo(np.float32).eps)
HEAD_DIM = 16


def _queries(tokens, seed=0):
    return np.random.default_rng(seed).standard_normal((2, tokens, 3, HEAD_DIM)).astype("float32")


def _layer_rotation(layer, grid, x):
    table = keras.ops.convert_to_tensor(layer.table(grid)[None], "float32")
    return keras.ops.convert_to_numpy(L.rotate(x, table, layer.layout)).astype(np.float64)


# (variant, RotaryEmbedding options, grid, the library's (sin, cos), half layout)
CASES = {
    "dinov3_4x4": ("dinov3", {}, (4, 4), lambda g: ref.dinov3_rope(g, HEAD_DIM), True),
    "dinov3_4x6": ("dinov3", {}, (4, 6), lambda g: ref.dinov3_rope(g, HEAD_DIM), True),
    "eva_3x3_ref16": ("eva", {"ref_grid": (16, 16)}, (3, 3), lambda g: ref.timm_cat_rope(g, HEAD_DIM, (16, 16)), False),
    "eva_3x5_ref16": ("eva", {"ref_grid": (16, 16)}, (3, 5), lambda g: ref.timm_cat_rope(g, HEAD_DIM, (16, 16)), False),
    "eva_no_ref": ("eva", {}, (4, 6), lambda g: ref.timm_cat_rope(g, HEAD_DIM), False),
    "pe_4x6_ref24": (
        "pe", {"ref_grid": (24, 24)}, (4, 6), lambda g: ref.timm_cat_rope(g, HEAD_DIM, (24, 24), 1.0, "xy"), False,
    ),
    "pe_ref_12x20": (
        "pe", {"ref_grid": (12, 20)}, (3, 5), lambda g: ref.timm_cat_rope(g, HEAD_DIM, (12, 20), 1.0, "xy"), False,
    ),
    "pe_no_offset": (
        "pe", {"ref_grid": (32, 32), "offset": 0.0}, (4, 4),
        lambda g: ref.timm_cat_rope(g, HEAD_DIM, (32, 32), 0.0, "xy"), False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=CASES.keys())
def test_rotation_matches_the_librarys_own(case):
    variant, options, grid, library, half = CASES[case]
    prefix = 5
    layer = L.RotaryEmbedding(variant, HEAD_DIM, grid, num_prefix_tokens=prefix, **options)
    x = _queries(prefix + grid[0] * grid[1])
    sin, cos = library(grid)
    want = ref.apply_rope(x.astype(np.float64), sin, cos, half, prefix)
    got = _layer_rotation(layer, grid, x)
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-6 * scale
    np.testing.assert_array_equal(got[:, :prefix], x[:, :prefix])  # class and register tokens not rotated


# The same library's table with the axes swapped (a negative control).
SWAPPED_AXES = {
    "dinov3_4x6": lambda g: ref.dinov3_rope(g, HEAD_DIM, order="xy"),
    "eva_3x5_ref16": lambda g: ref.timm_cat_rope(g, HEAD_DIM, (16, 16), 0.0, "xy"),
    "pe_4x6_ref24": lambda g: ref.timm_cat_rope(g, HEAD_DIM, (24, 24), 1.0, "ij"),
}


@pytest.mark.parametrize("case", SWAPPED_AXES, ids=SWAPPED_AXES.keys())
def test_the_other_layout_or_axis_order_misses(case):
    """Negative controls: the library's angles paired the other way, or its axes swapped, are far from the layer."""
    variant, options, grid, library, half = CASES[case]
    x = _queries(grid[0] * grid[1])
    layer = L.RotaryEmbedding(variant, HEAD_DIM, grid, **options)
    got = _layer_rotation(layer, grid, x)
    x64 = x.astype(np.float64)
    sin, cos = library(grid)
    assert np.abs(got - ref.apply_rope(x64, sin, cos, half)).max() <= 1e-6 * np.abs(x).max() * 2
    assert np.abs(got - ref.apply_rope(x64, sin, cos, not half)).max() > 1e-3
    sin, cos = SWAPPED_AXES[case](grid)
    assert np.abs(got - ref.apply_rope(x64, sin, cos, half)).max() > 1e-3


@pytest.mark.parametrize("case", ["dinov3_4x6", "eva_3x5_ref16", "pe_4x6_ref24"])
def test_the_table_computed_in_the_graph_matches_the_constant(case):
    """The float32 in-graph table (dynamic_image_size) against the float64 constant: within float32 rounding of
    the largest angle."""
    variant, options, grid, _, _ = CASES[case]
    layer = L.RotaryEmbedding(variant, HEAD_DIM, grid, num_prefix_tokens=1, **options)
    constant = layer.table(grid)
    in_graph = keras.ops.convert_to_numpy(
        layer._table_in_graph(tuple(keras.ops.convert_to_tensor(g, "int32") for g in grid))
    )
    largest = np.abs(layer.angles(grid)).max()
    assert np.abs(in_graph - constant).max() <= 4 * largest * EPS32 + EPS32


def test_dynamic_model_reads_the_grid_of_each_input():
    model = keras_vit.create_model(
        "testing", hidden_size=48, num_heads=3, rope="dinov3", position_embedding="none", dynamic_image_size=True
    )
    fixed = keras_vit.create_model("testing", hidden_size=48, num_heads=3, rope="dinov3", position_embedding="none",
                                   image_size=(32, 48))  # fmt: skip
    fixed.set_weights(model.get_weights())
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.5, head.kernel.shape))
    fixed.get_layer("head").kernel.assign(head.kernel)
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 48, 3)).astype("float32")
    got = model.predict(images, verbose=0)
    want = fixed.predict(images, verbose=0)
    assert np.abs(want).max() > 0.1
    np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max(), rtol=0)


def _dense(layer, weight, bias):
    layer.kernel.assign(weight.T)
    if bias is not None:
        layer.bias.assign(bias)


def _linear(rng, n_out, n_in, scale=0.3):
    return rng.normal(0, scale, (n_out, n_in)), rng.normal(0, scale, n_out)


@pytest.mark.parametrize("sub_norm", [False, True])
def test_swiglu_matches_timms_split_layout(sub_norm):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, 12))
    fc1_g, fc1_x, fc2 = _linear(rng, 20, 12), _linear(rng, 20, 12), _linear(rng, 12, 20)
    norm = (1 + rng.normal(0, 0.2, 20), rng.normal(0, 0.2, 20)) if sub_norm else None
    layer = L.SwiGLU(20, norm="layer" if sub_norm else None, norm_epsilon=1e-6)
    layer.build((None, None, 12))
    _dense(layer.gate, *fc1_g)
    _dense(layer.up, *fc1_x)
    _dense(layer.dense_1, *fc2)
    if sub_norm:
        layer.norm.gamma.assign(norm[0])
        layer.norm.beta.assign(norm[1])
    want = ref.timm_swiglu(x, fc1_g, fc1_x, fc2, norm)
    got = keras.ops.convert_to_numpy(layer(x.astype("float32")))
    assert np.abs(got - want).max() <= 1e-6 * max(1.0, np.abs(want).max())


def test_swiglu_reads_timms_packed_layout_gate_first():
    """timm's `GluMlp(gate_last=False)` fc1 [2H, D]: the first H rows are the gate; reading them as `up` misses."""
    from keras_vit.weights.timm_eva import split_packed_fc1

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 12))
    fc1, fc2 = _linear(rng, 40, 12), _linear(rng, 12, 20)
    want = ref.timm_glu_packed(x, fc1, fc2)
    gate, up = split_packed_fc1(*fc1)
    layer = L.SwiGLU(20)
    layer.build((None, None, 12))
    _dense(layer.dense_1, *fc2)
    for first, second, close in ((gate, up, True), (up, gate, False)):
        _dense(layer.gate, *first)
        _dense(layer.up, *second)
        diff = np.abs(keras.ops.convert_to_numpy(layer(x.astype("float32"))) - want).max()
        assert (diff <= 1e-6 * np.abs(want).max()) == close, diff


def test_rms_norm_matches_numpy():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 8)) * 3
    gain = 1 + rng.normal(0, 0.2, 8)
    layer = L.RMSNorm(1e-5)
    layer.build((None, None, 8))
    layer.gamma.assign(gain)
    want = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-5) * gain
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x.astype("float32"))), want, atol=1e-6 * 3, rtol=0)


NEW_LAYERS = [
    L.RotaryEmbedding("dinov3", 16, (4, 6), num_prefix_tokens=5),
    L.RotaryEmbedding("pe", 16, (4, 4), ref_grid=(24, 24), offset=0.0, patch_stride=8),
    L.RotaryAttention(3, biases=("query", "value", "out"), rope_layout="interleaved", inner_norm="layer"),
    L.SwiGLU(32, use_bias=False, norm="rms", norm_epsilon=1e-5),
    L.RMSNorm(1e-5),
    L.EncoderBlock(
        3,
        32,
        mlp_type="swiglu",
        mlp_norm=True,
        attention_norm=True,
        biases=("query", "value", "out"),
        rope_layout="interleaved",
        layer_scale=1e-5,
    ),
    L.EncoderBlock(3, 32, mlp_type="swiglu", mlp_bias=False, biases=(), norm="rms"),
]


@pytest.mark.parametrize("layer", NEW_LAYERS, ids=lambda layer: type(layer).__name__)
def test_new_layer_config_round_trip(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is type(layer) and revived.get_config() == config


NEW_MODELS = {
    "dinov3": dict(rope="dinov3", position_embedding="none", num_registers=4, layer_scale=1e-5, qkv_bias="none",
                   pooling="gap", layer_norm_epsilon=1e-5),
    "dinov3-dynamic": dict(rope="dinov3", position_embedding="none", num_registers=4, qkv_bias="qv",
                           dynamic_image_size=True),
    "eva02-base": dict(rope="eva", rope_ref_grid=(16, 16), mlp_type="swiglu", mlp_norm=True, qkv_bias="qv",
                       fc_norm=True, pooling="gap"),
    "eva02-clip": dict(rope="eva", rope_ref_grid=(16, 16), mlp_type="swiglu", mlp_norm=True, attention_norm=True,
                       qkv_bias="qv"),
    "pe-core": dict(rope="pe", rope_ref_grid=(24, 24), pre_norm=True, patch_bias=False, pooling="map", map_heads=8,
                    layer_norm_epsilon=1e-5, gelu="exact"),
    "pe-spatial": dict(rope="pe", rope_ref_grid=(32, 32), pre_norm=True, patch_bias=False, pooling="gap",
                       encoder_norm=False),
    "aimv2": dict(norm="rms", patch_norm=True, mlp_type="swiglu", mlp_bias=False, qkv_bias="none", proj_bias=False,
                  class_token=False, pooling="gap"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("options", NEW_MODELS.values(), ids=NEW_MODELS.keys())
def test_new_model_config_and_keras_file_round_trip(tmp_path, options):
    model = keras_vit.create_model("testing", hidden_size=48, num_heads=3, **options)
    rng = np.random.default_rng(5)
    for w in model.weights:
        w.assign(rng.normal(0, 0.2, w.shape).astype("float32"))
    clone = keras_vit.VisionTransformer.from_config(model.get_config())
    assert clone.get_config() == model.get_config() and clone.count_params() == model.count_params()
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    model.save(tmp_path / "m.keras")
    revived = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_array_equal(revived.predict(images, verbose=0), model.predict(images, verbose=0))


def test_new_options_are_absent_from_a_plain_vits_config():
    config = keras_vit.create_model("testing").get_config()
    assert not {"rope", "mlp_type", "qkv_bias", "norm", "encoder_norm", "map_heads"} & set(config)


@pytest.mark.parametrize("name", ["dinov3", "eva02-clip", "pe-core"])
def test_a_rope_model_on_the_fused_route_computes_what_the_explicit_route_does(monkeypatch, name):
    outputs = {}
    for mode in ("never", "always"):
        monkeypatch.setenv(attention_kernel.ENV, mode)
        model = keras_vit.create_model("testing", hidden_size=48, num_heads=3, num_classes=5, **NEW_MODELS[name])
        rng = np.random.default_rng(6)
        for w in model.weights:
            w.assign(rng.normal(0, 0.2, w.shape).astype("float32"))
        images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
        outputs[mode] = keras.ops.convert_to_numpy(model(images, training=False))
    assert np.abs(outputs["never"]).max() > 0.1
    np.testing.assert_allclose(outputs["always"], outputs["never"], atol=1e-6 * np.abs(outputs["never"]).max(), rtol=0)


# --- DINOv3's coordinate rescale (training only) ---------------------------------------------------------------------


def test_dinov3_rescale_draws_a_log_uniform_scale_in_training_only():
    """Each training call's table is DINOv3's (numpy reference) at one scale s in [1/2, 2], read back from the table;
    inference gives the plain table."""
    grid, head_dim, prefix = (4, 6), 16, 5
    layer = L.RotaryEmbedding("dinov3", head_dim, grid, prefix, rescale=2.0, seed=3)
    images = np.zeros((1, 32, 48, 3), np.float32)
    sin, cos = ref.dinov3_rope(grid, head_dim)
    plain = np.asarray(layer(images, training=False))[0, prefix:]
    np.testing.assert_allclose(plain, np.concatenate([sin, cos], axis=1), rtol=0, atol=1e-6)
    # Column 3: the y axis at the lowest frequency (angle = 2 pi c / 100^(3/4), |angle| < pi for |c| s <= 2).
    unscaled = 2 * np.pi * (1 / grid[0] - 1) / 100**0.75
    scales = []
    for _ in range(40):
        table = np.asarray(layer(images, training=True))[0, prefix:]
        scale = float(np.arctan2(table[0, 3], table[0, head_dim + 3]) / unscaled)
        sin, cos = ref.dinov3_rope(grid, head_dim, rescale=scale)
        np.testing.assert_allclose(table, np.concatenate([sin, cos], axis=1), rtol=0, atol=1e-5)
        scales.append(scale)
    assert 0.5 - 1e-6 <= min(scales) < 0.8 and 1.25 < max(scales) <= 2.0 + 1e-6, scales
    assert len(set(np.round(scales, 6))) == len(scales)  # a new draw every call


def test_a_model_with_rope_rescale_infers_as_without_and_trains_with_it():
    options = dict(image_size=32, patch_size=8, hidden_size=32, num_heads=2, mlp_dim=64, num_layers=1, num_classes=0,
                   rope="dinov3", position_embedding="none", num_registers=4, pooling="gap")  # fmt: skip
    plain = keras_vit.create_model("testing", **options)
    augmented = keras_vit.create_model("testing", **options, rope_rescale=2.0)
    augmented.set_weights(plain.get_weights())
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    np.testing.assert_array_equal(augmented(images, training=False), plain(images, training=False))
    assert not np.allclose(augmented(images, training=True), plain(images, training=True), atol=1e-6)
    assert keras_vit.VisionTransformer.from_config(augmented.get_config()).config.rope_rescale == 2.0
    with pytest.raises(ValueError, match="rope_rescale is DINOv3's coordinate augmentation"):
        keras_vit.create_model("testing", **{**options, "rope": "eva"}, rope_rescale=2.0)
