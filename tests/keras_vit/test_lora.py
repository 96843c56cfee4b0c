"""keras_vit.enable_lora / merge_lora: which variables train, outputs at init, and the merge against numpy."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.lora import TARGET_GROUPS, lora_layers
from tests.conftest import ROOT

# The numpy form of each projection's update A @ B (Keras' factor layout per kernel, keras_vit/lora.py).
UPDATE = {
    "query": "dhr,rk->dhk",
    "key": "dhr,rk->dhk",
    "value": "dhr,rk->dhk",
    "out": "hkr,rd->hkd",
    "Dense_0": "ir,ro->io",
    "Dense_1": "ir,ro->io",
}


def _model(**kwargs):
    """A 'testing' ViT with every weight random and non-zero (the head too), so any change shows in the outputs."""
    keras.utils.set_random_seed(3)
    model = keras_vit.create_model("testing", image_size=32, num_classes=7, **kwargs)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.1, variable.shape).astype("float32"))
    return model


def _images():
    return np.random.default_rng(1).uniform(-1, 1, (3, 32, 32, 3)).astype("float32")


def _predict(model):
    return keras.ops.convert_to_numpy(model(_images(), training=False))


def _paths(variables):
    return {v.path for v in variables}


@pytest.mark.parametrize(
    "targets, per_attention, per_mlp",
    [(("query", "key", "value", "out"), 4, 0), (("value",), 1, 0), (("query", "mlp"), 1, 2), ("qkv", 3, 0),
     ("attention", 4, 0), ("all", 4, 2)],
)  # fmt: skip
def test_only_the_lora_factors_and_the_head_train(targets, per_attention, per_mlp):
    model = _model()
    layers = keras_vit.enable_lora(model, 4, targets=targets)
    targets = TARGET_GROUPS.get(targets, targets)  # a named set: its members
    assert len(layers) == 2 * (per_attention + per_mlp)  # the testing variant's two blocks
    factors = {f"{layer.path}/lora_kernel_{ab}" for layer in layers for ab in "ab"}
    assert _paths(model.trainable_weights) == factors | {"head/kernel", "head/bias"}
    names = {path.rsplit("/", 2)[-2] for path in factors}
    assert names == {n for n in UPDATE if n in targets or (n.startswith("Dense") and "mlp" in targets)}


def test_outputs_are_unchanged_at_init_and_the_merge_matches_numpy():
    model = _model()
    reference = _predict(model)
    kernels = {v.path: v.numpy() for v in model.weights}
    layers = keras_vit.enable_lora(model, 3, targets=("query", "key", "value", "out", "mlp"), alpha=6)
    np.testing.assert_array_equal(_predict(model), reference)  # B starts at zero
    rng = np.random.default_rng(5)
    for layer in layers:
        layer.lora_kernel_b.assign(rng.normal(0, 0.1, layer.lora_kernel_b.shape).astype("float32"))
    adapted = _predict(model)
    assert np.abs(adapted - reference).max() > 1e-2  # the factors now change the outputs

    merged = keras_vit.merge_lora(model)
    assert not [v.path for v in merged.weights if "lora" in v.path]
    assert not any(getattr(layer, "lora_enabled", False) for layer in merged._flatten_layers())
    assert len(merged.weights) == len(kernels) and len(merged.trainable_weights) == len(kernels)
    for layer in layers:
        a, b = layer.lora_kernel_a.numpy(), layer.lora_kernel_b.numpy()
        expected = kernels[f"{layer.path}/kernel"] + (6 / 3) * np.einsum(UPDATE[layer.name], a, b)
        got = {v.path: v.numpy() for v in merged.weights}[f"{layer.path}/kernel"]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    # Every other weight is copied as it was.
    merged_values = {v.path: v.numpy() for v in merged.weights}
    for path, value in kernels.items():
        if not any(path == f"{layer.path}/kernel" for layer in layers):
            np.testing.assert_array_equal(merged_values[path], value)
    np.testing.assert_allclose(_predict(merged), adapted, rtol=0, atol=1e-5)


def test_the_map_heads_attention_gets_factors_and_the_merged_model_saves_as_a_plain_one(tmp_path):
    model = _model(pooling="map", class_token=False)
    layers = keras_vit.enable_lora(model, 2)
    assert sum(layer.path.startswith("MAPHead_0/") for layer in layers) == 4
    for layer in layers:
        layer.lora_kernel_b.assign(np.full(layer.lora_kernel_b.shape, 0.05, "float32"))
    merged = keras_vit.merge_lora(model)
    merged.save(tmp_path / "merged.keras")
    loaded = keras.saving.load_model(tmp_path / "merged.keras")
    np.testing.assert_allclose(_predict(loaded), _predict(model), rtol=0, atol=1e-5)
    assert not [v.path for v in loaded.weights if "lora" in v.path]


def test_bad_arguments_are_one_line_errors_naming_the_fix():
    model = _model()
    with pytest.raises(ValueError, match=r"unknown target\(s\) 'qkv'. Valid targets: query, key, value, out .* mlp"):
        keras_vit.enable_lora(model, 4, targets=("qkv",))
    with pytest.raises(ValueError, match="no target. Valid targets"):
        keras_vit.enable_lora(model, 4, targets=())
    with pytest.raises(ValueError, match="rank must be a positive integer, e.g. 8. Received: rank=0"):
        keras_vit.enable_lora(model, 0)
    keras_vit.enable_lora(model, 4, targets="value")
    with pytest.raises(ValueError, match=r"already enabled on .*value .*keras_vit.merge_lora\(model\)"):
        keras_vit.enable_lora(model, 4)
    with pytest.raises(ValueError, match="has no MultiHeadSelfAttention or MlpBlock layers"):
        keras_vit.enable_lora(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]), 4)


def test_a_model_without_lora_merges_to_an_equal_copy():
    model = _model()
    copy = keras_vit.merge_lora(model)
    assert copy is not model
    np.testing.assert_array_equal(_predict(copy), _predict(model))


def _factors(hidden, heads, layers, rank):
    """q/k/v: A (D, H, r) + B (r, D_h); out: A (H, D_h, r) + B (r, D); per block, for every block."""
    head_dim = hidden // heads
    return layers * (3 * (hidden * heads * rank + rank * head_dim) + (heads * head_dim * rank + rank * hidden))


@pytest.mark.slow
def test_the_trainable_counts_of_docs_training_md():
    from keras_vit.lora import lora_parameter_count

    model = keras_vit.create_model("B/16", image_size=224, num_classes=1000)
    assert model.count_params() == 86_567_656
    keras_vit.enable_lora(model, 8)
    assert lora_parameter_count(model) == (_factors(768, 12, 12, 8), _factors(768, 12, 12, 8) + 769_000)
    assert lora_parameter_count(model) == (2_820_096, 3_589_096)
    # q/k/v alone against PEFT's LoRA on a fused (D, 3D) qkv Linear: A (D, r) + B (r, 3D) per block.
    qkv = lora_layers(model, "qkv")
    ours = sum(int(np.prod(v.shape)) for layer in qkv for v in (layer.lora_kernel_a, layer.lora_kernel_b))
    hidden, blocks = qkv[0].kernel.shape[0], len(qkv) // 3
    peft = blocks * (hidden * 8 + 8 * 3 * hidden)
    per_block = ours // blocks
    print(f"B/16 rank 8 q/k/v: Keras {ours:,} ({per_block:,} per block), PEFT fused qkv {peft:,}: {ours / peft:.2f}x")
    text = " ".join((ROOT / "docs" / "training.md").read_text().split())
    stated = (
        f"Keras' factors hold {ours:,} parameters, 3 x (768 x 12 x 8 + 8 x 64) = {per_block:,} per block, where "
        f"PEFT's LoRA on timm's fused `qkv` Linear (768 -> 2,304) holds A (768, 8) + B (8, 2,304) = "
        f"{peft // blocks:,} per block, {peft:,} in all: {ours / peft:.2f} times fewer"
    )
    assert stated in text
    # L/16 (D 1024, 16 heads, 24 blocks) by the same formula; full fine-tuning 304,326,632 (tests/test_param_counts).
    assert _factors(1024, 16, 24, 8) == 9_867_264 and _factors(1024, 16, 24, 8) + 1_025_000 == 10_892_264


def test_a_distilled_model_keeps_both_heads_trainable():
    model = _model(distillation_token=True)
    layers = keras_vit.enable_lora(model, 2, targets="out")
    heads = {f"{name}/{w}" for name in ("head", "head_dist") for w in ("kernel", "bias")}
    assert (
        _paths(model.trainable_weights) == {f"{layer.path}/lora_kernel_{ab}" for layer in layers for ab in "ab"} | heads
    )


def test_under_mixed_precision_the_merge_is_computed_in_float32():
    model = _model(dtype="mixed_bfloat16")
    layer = keras_vit.enable_lora(model, 4, targets="query")[0]
    kernel = layer._kernel.numpy()
    layer.lora_kernel_b.assign(np.random.default_rng(2).normal(0, 1e-3, layer.lora_kernel_b.shape).astype("float32"))
    expected = kernel + np.einsum("dhr,rk->dhk", layer.lora_kernel_a.numpy(), layer.lora_kernel_b.numpy())
    merged = {v.path: v.numpy() for v in keras_vit.merge_lora(model).weights}[f"{layer.path}/kernel"]
    assert merged.dtype == np.float32
    np.testing.assert_allclose(merged, expected, rtol=0, atol=1e-7)  # Keras' bfloat16 layer.kernel: 8.6e-4 off


@pytest.mark.slow
def test_a_quantized_lora_model_is_refused_by_merge_with_the_order_that_works():
    model = _model()
    with pytest.warns(UserWarning):  # Keras names the layers it has nothing to quantize in
        model.quantize("int8")
    keras_vit.enable_lora(model, 2, targets="value")
    with pytest.raises(ValueError, match=r"is quantized \(int8\)\. .*keras_vit.merge_lora\(model\).quantize\('int8'\)"):
        keras_vit.merge_lora(model)
