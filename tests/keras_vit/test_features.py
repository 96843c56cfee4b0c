"""keras_vit.feature_model: chosen encoder blocks as outputs, against get_layer, the numpy reference and the
fixtures of timm, transformers and keras-hub; its errors; .keras, TFLite and SavedModel export."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import TokenSplit
from keras_vit.models.features import num_prefix_tokens
from tests import support
from tests.support import numpy_vit
from tests.support.checkpoints import vit_checkpoint

INTEROP = os.path.join(str(support.FIXTURES), "interop")
TOL = 1e-5
GRID = (3, 5)  # a non-square grid: a transposed NHWC map would not fit it
LAYERS = 3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 3-block ViT on 24x40 images with random weights, the checkpoint they came from, and images."""
    rng = np.random.default_rng(0)
    ckpt = vit_checkpoint(rng, hidden=32, layers=LAYERS, heads=2, mlp=64, patch=8, grid=GRID, classes=4)
    path = tmp_path_factory.mktemp("features") / "ckpt.npz"
    np.savez(path, **ckpt)
    model = keras_vit.create_model(
        "testing", image_size=(24, 40), num_layers=LAYERS, mlp_dim=64, num_classes=4, gelu="tanh"
    )
    keras_vit.load_npz(model, path)
    images = rng.uniform(-1, 1, (2, 24, 40, 3)).astype(np.float32)
    return model, ckpt, images


def numpy_blocks(images, ckpt):
    """Every block's output (batch, 1 + patches, width), from the independent numpy ViT."""
    params = {k: np.asarray(v, np.float64) for k, v in ckpt.items()}
    z, out = numpy_vit.embed(images, params), []
    for i in range(LAYERS):
        z = numpy_vit.encoder_block(z, params, i)
        out.append(z)
    return out, params


def read_layers(model, images, names):
    """The named layers' outputs (a list) through a plain keras.Model over the model's own tensors."""
    out = keras.Model(model.input, [model.get_layer(n).output for n in names]).predict(images, verbose=0)
    return out if len(names) > 1 else [out]  # Keras returns a one-output model's array itself


def max_diff(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def assert_same(actual, expected):
    """The same layers on the same tensors, compiled into another graph: equal up to float32 round-off."""
    assert np.shape(actual) == np.shape(expected)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-6 * max(1.0, float(np.abs(expected).max())))


@pytest.mark.slow
def test_nhwc_and_prefix_tokens_equal_get_layer_and_numpy(tiny):
    model, ckpt, images = tiny
    features = keras_vit.feature_model(model, blocks=(0, -1), output="NHWC", return_prefix_tokens=True)
    maps0, prefix0, maps2, prefix2 = features.predict(images, verbose=0)
    assert maps0.shape == maps2.shape == (2, *GRID, 32) and prefix0.shape == (2, 1, 32)
    read = read_layers(model, images, ["encoderblock_0", "encoderblock_2"])
    expected, _ = numpy_blocks(images, ckpt)
    for maps, prefix, tokens, ref in ((maps0, prefix0, read[0], expected[0]), (maps2, prefix2, read[1], expected[2])):
        assert_same(maps, tokens[:, 1:].reshape(2, *GRID, 32))
        assert_same(prefix, tokens[:, :1])
        # Patches in row-major order: the map's (row r, column c) is the patch of pixels [8r:8r+8, 8c:8c+8].
        assert max_diff(maps, ref[:, 1:].reshape(2, *GRID, 32)) < TOL * np.abs(ref).max()
        assert max_diff(prefix, ref[:, :1]) < TOL * np.abs(ref).max()


def test_norm_applies_the_final_layer_norm_to_every_block(tiny):
    model, ckpt, images = tiny
    features = keras_vit.feature_model(model, blocks=LAYERS, norm=True)  # an int: the last n blocks, as timm
    outputs = features.predict(images, verbose=0)
    assert len(outputs) == LAYERS and outputs[0].shape == (2, GRID[0] * GRID[1], 32)
    expected, params = numpy_blocks(images, ckpt)
    for out, ref in zip(outputs, expected):
        normed = numpy_vit.encoder_norm(ref, params)
        assert max_diff(out, normed[:, 1:]) < TOL * np.abs(normed).max()
    final = keras.Model(model.input, model.get_layer("encoder_norm").output).predict(images, verbose=0)
    assert_same(outputs[-1], final[:, 1:])


def test_one_block_gives_its_array_and_shares_the_models_weights(tiny):
    model, _, images = tiny
    features = keras_vit.feature_model(model, blocks=(-2,))
    assert features.output_shape == (None, GRID[0] * GRID[1], 32)
    assert features.get_layer("encoderblock_1") is model.get_layer("encoderblock_1")
    assert {id(w) for w in features.weights} <= {id(w) for w in model.weights}
    assert features.name == f"{model.name}_features"
    assert_same(features.predict(images, verbose=0), read_layers(model, images, ["encoderblock_1"])[0][:, 1:])


@pytest.mark.slow
def test_the_model_itself_is_unchanged(tiny, tmp_path):
    model, _, images = tiny
    before = model.predict(images, verbose=0)
    keras_vit.feature_model(model, blocks=(0, 1), norm=True)  # calls encoder_norm on new tensors
    np.testing.assert_array_equal(model.predict(images, verbose=0), before)
    model.save(tmp_path / "m.keras")
    np.testing.assert_array_equal(keras.saving.load_model(tmp_path / "m.keras").predict(images, verbose=0), before)


@pytest.mark.slow
def test_final_entry_with_norm_matches_timm_transformers_and_keras_hub():
    # timm's io.npz holds `pre_logits`, the normed class token; transformers' and keras-hub's hold every token
    # after the final LayerNorm (`last_hidden_state`, `backbone_output`).
    for folder, key in (
        ("timm_vit_tiny", "pre_logits"),
        ("hf_vit_model_with_pooler", "last_hidden_state"),
        ("keras_hub_vit_image_classifier", "backbone_output"),
    ):
        ref = dict(np.load(os.path.join(INTEROP, folder, "io.npz")))
        model = keras_vit.from_pretrained(os.path.join(INTEROP, folder))
        features = keras_vit.feature_model(model, blocks=(-1,), norm=True, return_prefix_tokens=True)
        patches, prefix = features.predict(ref["images"], verbose=0)
        assert patches.shape == (4, 16, 48) and prefix.shape == (4, 1, 48)
        if key == "pre_logits":
            assert max_diff(prefix[:, 0], ref[key]) < TOL, folder
        else:
            assert max_diff(np.concatenate([prefix, patches], axis=1), ref[key]) < TOL, folder


def test_hybrid_gives_its_feature_grid():
    model = keras_vit.create_model("testing", resnet_layers=(1,), patch_size=2, num_layers=1)  # stride 4 x patch 2
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    maps = keras_vit.feature_model(model, output="NHWC").predict(images, verbose=0)
    assert maps.shape == (2, 4, 4, 32)
    tokens = read_layers(model, images, ["encoderblock_0"])[0]
    assert_same(maps, tokens[:, 1:].reshape(2, 4, 4, 32))


@pytest.mark.slow
def test_dynamic_image_size_reads_the_grid_of_each_input():
    model = keras_vit.create_model("testing", dynamic_image_size=True)
    features = keras_vit.feature_model(model, blocks=(0, 1), output="NHWC", return_prefix_tokens=True)
    for size in ((32, 32), (48, 24)):
        images = np.random.default_rng(2).uniform(-1, 1, (2, *size, 3)).astype(np.float32)
        _, _, maps, prefix = features.predict(images, verbose=0)
        tokens = model.get_layer("encoderblock_1").output
        tokens = keras.Model(model.input, tokens).predict(images, verbose=0)
        assert maps.shape == (2, size[0] // 8, size[1] // 8, 32)
        assert_same(maps, tokens[:, 1:].reshape(maps.shape))
        assert_same(prefix, tokens[:, :1])


def test_num_prefix_tokens_counts_the_class_token():
    assert num_prefix_tokens(keras_vit.create_model("testing")) == 1
    assert num_prefix_tokens(keras_vit.create_model("testing", class_token=False, pooling="gap")) == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(blocks=(3,)), r"Block index 3 is out of range for a model with 3 blocks; use 0 to 2, or -1 to -3"),
        (dict(blocks=(-4,)), r"Block index -4 is out of range"),
        (dict(blocks=(1, -2)), r"blocks names a block twice: \(1, -2\) is \(1, 1\)"),
        (dict(blocks=()), r"blocks is empty"),
        (dict(blocks=0), r"blocks=0 asks for the last 0 blocks of a model with 3; pass 1 to 3"),
        (dict(blocks="last"), r"blocks must be a sequence of block indices"),
        (dict(output="NCHW"), r"output must be one of \('tokens', 'NHWC'\). Received: output='NCHW'"),
    ],
)
def test_bad_arguments_fail_in_one_line(tiny, kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        keras_vit.feature_model(tiny[0], **kwargs)
    assert "\n" not in str(info.value)


def test_what_cannot_have_features_fails_in_one_line():
    gap = keras_vit.create_model("testing", class_token=False, pooling="gap")
    with pytest.raises(ValueError, match=r"no prefix tokens \(class_token=False\)") as info:
        keras_vit.feature_model(gap, return_prefix_tokens=True)
    assert "\n" not in str(info.value)
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="takes a keras_vit VisionTransformer.*Received: Sequential"):
        keras_vit.feature_model(plain)


def test_token_split_config_round_trip():
    layer = TokenSplit(1, output="NHWC", grid_size=(3, 5), return_prefix=True)
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is TokenSplit and revived.get_config() == layer.get_config()


# ----- export -----


@pytest.mark.slow
def test_keras_file_round_trip(tiny, tmp_path):
    model, _, images = tiny
    features = keras_vit.feature_model(model, blocks=(0, 2), output="NHWC", norm=True, return_prefix_tokens=True)
    expected = features.predict(images, verbose=0)
    features.save(tmp_path / "f.keras")
    reloaded = keras.saving.load_model(tmp_path / "f.keras", safe_mode=True)
    outputs = reloaded.predict(images, verbose=0)
    assert len(outputs) == len(expected) == 4
    for got, want in zip(outputs, expected):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TFLite conversion traces a TF graph")
def test_tflite_through_the_exporters_conversion(tiny):
    from ai_edge_litert.interpreter import Interpreter

    from export.tflite.converter import convert

    model, _, images = tiny
    features = keras_vit.feature_model(model, blocks=(-1,), output="NHWC", norm=True)
    flatbuffer = convert(features, "float32", output="logits", metadata=False, dynamic_batch=True)
    interpreter = Interpreter(model_content=flatbuffer)
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    interpreter.resize_tensor_input(inp["index"], images.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], images)
    interpreter.invoke()
    maps = interpreter.get_tensor(out["index"])
    assert maps.shape == (2, *GRID, 32)
    assert max_diff(maps, features.predict(images, verbose=0)) < TOL


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="SavedModel export is TensorFlow's")
def test_saved_model_export(tiny, tmp_path):
    import tensorflow as tf

    model, _, images = tiny
    features = keras_vit.feature_model(model, blocks=(0, -1), output="NHWC", return_prefix_tokens=True)
    features.export(str(tmp_path / "saved"), verbose=False)
    loaded = tf.saved_model.load(str(tmp_path / "saved"))  # held: its variables die with it
    served = loaded.serve(tf.constant(images))
    expected = features.predict(images, verbose=0)
    served = [np.asarray(t) for t in served]
    assert [t.shape for t in served] == [t.shape for t in expected] == [(2, *GRID, 32), (2, 1, 32)] * 2
    for got, want in zip(served, expected):
        assert max_diff(got, want) < TOL


FAMILIES = os.path.join(str(support.FIXTURES), "interop_families")


@pytest.mark.slow
@pytest.mark.parametrize(
    "fixture, prefix", [("timm_dinov2_small_reg4", 5), ("timm_deit_tiny_distilled", 2), ("timm_siglip_base", 0)]
)
def test_prefix_tokens_of_the_families_are_split_off_as_timm_orders_them(fixture, prefix):
    """Class, distillation and register tokens precede the patches; the normed last block is timm's `tokens`."""
    model = keras_vit.from_pretrained(os.path.join(FAMILIES, fixture))
    assert num_prefix_tokens(model) == prefix
    io = np.load(os.path.join(FAMILIES, fixture, "io.npz"))
    outputs = keras_vit.feature_model(model, blocks=(-1,), norm=True, return_prefix_tokens=bool(prefix))
    got = outputs.predict(io["images"], verbose=0)
    patches, first = (got[0], got[1]) if prefix else (got, None)
    assert patches.shape[1] == io["tokens"].shape[1] - prefix
    np.testing.assert_allclose(patches, io["tokens"][:, prefix:], atol=1e-5)
    if prefix:
        np.testing.assert_allclose(first, io["tokens"][:, :prefix], atol=1e-5)
