"""dynamic_image_size: one model for every image size, equal to a model rebuilt at that size.

The reference for each size is a second model built at that size whose position embedding was resized offline
by `scipy.ndimage.zoom(order=1)` (the original code's resize, independent of keras_vit's) or by
`tf.image.resize` (bilinear); every other weight is copied from the dynamic model.
"""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import scipy.ndimage

import keras_vit
from keras_vit.layers.position_embedding import resize_position_embedding, resize_position_embedding_in_graph
from keras_vit.weights.loading import POSEMB_KEY, checkpoint_variables, load_params
from tests import support

ROOT = str(support.ROOT)
SIZES = [(48, 48), (40, 56)]  # grids 6x6 and 5x7 from the stored 4x4


def randomised(model, seed=0):
    """Every weight moved off its initial value (a fresh head and class token are zero, which would hide errors)."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(np.asarray(variable) + rng.normal(0.0, 0.05, variable.shape).astype("float32"))
    return model


def dynamic_model(seed=0, **overrides):
    return randomised(keras_vit.create_model("testing", dynamic_image_size=True, **overrides), seed)


def scipy_zoomed(posemb, old_grid, new_grid):
    grid = np.asarray(posemb, np.float64)[0, 1:].reshape(*old_grid, -1)
    zoom = (new_grid[0] / old_grid[0], new_grid[1] / old_grid[1], 1)
    zoomed = scipy.ndimage.zoom(grid, zoom, order=1).reshape(1, -1, grid.shape[-1])
    return np.concatenate([np.asarray(posemb)[:, :1], zoomed], axis=1).astype(np.float32)


def rebuilt_at(dynamic, size, posemb):
    """A fixed-size model of `size` with the dynamic model's weights and the given position embedding."""
    fixed = keras_vit.create_model("testing", image_size=size)
    for mine, theirs in zip(fixed.weights, dynamic.weights, strict=True):
        mine.assign(posemb if mine.path.endswith("pos_embedding") else np.asarray(theirs))
    return fixed


def images(size, n=2, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *size, 3)).astype("float32")


def stored_posemb(model):
    return np.asarray(model.get_layer("posembed_input").pos_embedding)


@pytest.mark.parametrize("size", SIZES)
def test_equals_a_model_rebuilt_at_that_size(size):
    model = dynamic_model()
    grid = (size[0] // 8, size[1] // 8)
    reference_posemb = scipy_zoomed(stored_posemb(model), (4, 4), grid)
    in_graph = np.asarray(model.get_layer("posembed_input").table_for(images(size)))
    np.testing.assert_allclose(in_graph, reference_posemb, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(in_graph[0, 0], stored_posemb(model)[0, 0])  # the class-token row as it is

    fixed = rebuilt_at(model, size, reference_posemb)
    x = images(size)
    expected = np.asarray(fixed(x))
    assert np.abs(expected).max() > 0.1  # random head: the comparison below is not between zeros
    np.testing.assert_allclose(np.asarray(model(x)), expected, atol=1e-5, rtol=0)

    # The loading path (load_params, as load_npz and every other format use it) resizes the same way.
    loaded = keras_vit.create_model("testing", image_size=size)
    params = {key: np.asarray(v) for key, v in checkpoint_variables(model).items()}
    report = load_params(loaded, params, source="the dynamic model")
    assert POSEMB_KEY in report.resized
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), atol=1e-5, rtol=0)


def test_stored_grid_uses_the_stored_table_bit_for_bit():
    import tensorflow as tf

    model = dynamic_model()
    layer = model.get_layer("posembed_input")
    x = images((32, 32))
    np.testing.assert_array_equal(np.asarray(layer.table_for(x)), stored_posemb(model))
    # A graph whose size is unknown when traced takes the interpolation path; on the stored grid it is exact too.
    traced = tf.function(layer.table_for, input_signature=[tf.TensorSpec((None, None, None, 3))])
    np.testing.assert_array_equal(traced(x).numpy(), stored_posemb(model))
    fixed = rebuilt_at(model, (32, 32), stored_posemb(model))
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(fixed(x)))


@pytest.mark.slow
def test_tf_function_and_xla_match_eager_and_the_rebuilt_model_at_every_size():
    import tensorflow as tf

    model = dynamic_model()
    open_shape = tf.function(lambda x: model(x, training=False), input_signature=[tf.TensorSpec((None, None, None, 3))])
    compiled = tf.function(lambda x: model(x, training=False), jit_compile=True)
    for size in [*SIZES, (64, 24)]:
        x = images(size)
        grid = (size[0] // 8, size[1] // 8)
        expected = np.asarray(rebuilt_at(model, size, scipy_zoomed(stored_posemb(model), (4, 4), grid))(x))
        assert np.abs(expected).max() > 0.1
        # docs/dynamic_image_size.md: within 2e-7 of the rebuilt model eagerly, 5e-7 under jit_compile=True.
        for name, run, bound in (("eager", model, 1e-6), ("tf.function", open_shape, 1e-6), ("XLA", compiled, 2e-6)):
            diff = np.abs(np.asarray(run(x)) - expected).max()
            assert diff <= bound, (name, size, diff)


@pytest.mark.parametrize("old, new", [((4, 4), (6, 6)), ((4, 4), (5, 7)), ((5, 3), (2, 4)), ((3, 3), (1, 1))])
def test_other_methods_match_their_offline_resize(old, new):
    import tensorflow as tf

    rng = np.random.default_rng(2)
    posemb = rng.standard_normal((1, 1 + old[0] * old[1], 8)).astype(np.float32)
    bilinear = np.asarray(resize_position_embedding_in_graph(posemb, new, old, 1, "bilinear"))
    expected = tf.image.resize(posemb[:, 1:].reshape(1, *old, 8), new, method="bilinear", antialias=False).numpy()
    np.testing.assert_allclose(bilinear[:, 1:].reshape(1, *new, 8), expected, atol=1e-5, rtol=0)
    for method in ("zoom", "bicubic"):
        in_graph = np.asarray(resize_position_embedding_in_graph(posemb, new, old, 1, method))
        offline = resize_position_embedding(posemb, new, old_grid=old, method=method)
        np.testing.assert_allclose(in_graph, offline, atol=1e-5, rtol=0)
        np.testing.assert_array_equal(
            np.asarray(resize_position_embedding_in_graph(posemb, old, old, 1, method)), posemb
        )


def test_bilinear_option_equals_a_model_rebuilt_with_tf_resize():
    import tensorflow as tf

    model = dynamic_model(dynamic_resize_method="bilinear")
    posemb = stored_posemb(model)
    grid = tf.image.resize(posemb[:, 1:].reshape(1, 4, 4, -1), (5, 7), method="bilinear", antialias=False)
    reference = np.concatenate([posemb[:, :1], grid.numpy().reshape(1, 35, -1)], axis=1)
    x = images((40, 56))
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(rebuilt_at(model, (40, 56), reference)(x)), atol=1e-5)


@pytest.mark.slow
def test_fit_trains_the_stored_embedding_at_any_size():
    model = dynamic_model()
    before = stored_posemb(model).copy()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(True))
    history = model.fit(images((40, 56), n=4), np.arange(4), batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert np.isfinite(model.train_on_batch(images((48, 48), n=2), np.arange(2)))  # another size, same model
    assert stored_posemb(model).shape == before.shape and np.abs(stored_posemb(model) - before).max() > 0


def test_keras_file_round_trip(tmp_path):
    model = dynamic_model()
    model.save(tmp_path / "dynamic.keras")
    loaded = keras.saving.load_model(tmp_path / "dynamic.keras")
    assert loaded.config.dynamic_image_size and loaded.get_config()["dynamic_resize_method"] == "zoom"
    assert loaded.input_shape == (None, None, None, 3)
    x = images((40, 56))
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))


def test_errors_name_the_problem_and_the_fix():
    model = keras_vit.create_model("testing", dynamic_image_size=True)
    with pytest.raises(ValueError, match=r"dynamic_image_size=True\) takes images whose height and width are "
                       r"multiples of 8 \(patch_size=8\), but received 30x32.*e\.g\. to 24x32"):  # fmt: skip
        model(np.zeros((1, 30, 32, 3), "float32"))
    with pytest.raises(ValueError, match="expects 3 channels but received 1.*repeat the channel"):
        model(np.zeros((1, 32, 32, 1), "float32"))
    with pytest.raises(ValueError, match="dynamic_resize_method must be one of"):
        keras_vit.create_model("testing", dynamic_image_size=True, dynamic_resize_method="nearest")
    with pytest.raises(ValueError, match="position_embedding='sincos2d' is a fixed table"):
        keras_vit.create_model("testing", dynamic_image_size=True, position_embedding="sincos2d", class_token=False,
                               pooling="gap")  # fmt: skip
    fixed = keras_vit.create_model("testing")
    with pytest.raises(ValueError, match=r"built for 32x32 images but received 48x48.*dynamic_image_size=True"):
        fixed(np.zeros((1, 48, 48, 3), "float32"))


@pytest.mark.slow
def test_hybrid_uses_the_resnet_stride():
    config = dict(image_size=64, num_layers=1, resnet_layers=(1, 1, 1, 1), num_classes=3)
    model = randomised(keras_vit.create_model("R26+S/32", dynamic_image_size=True, **config))
    fixed = keras_vit.create_model("R26+S/32", **{**config, "image_size": (96, 128)})
    load_params(fixed, {k: np.asarray(v) for k, v in checkpoint_variables(model).items()}, source="dynamic")
    x = images((96, 128), n=1)
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(fixed(x)), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="multiples of 32 \\(the hybrid's ResNet output stride 32"):
        model(np.zeros((1, 80, 128, 3), "float32"))


@pytest.mark.slow
def test_training_evaluate_takes_a_dynamic_model(tmp_path):
    import json

    import tensorflow as tf

    import training
    from training.model_setup import build_model
    from training.run_plan import source_of

    config = training.TrainConfig(dataset="synthetic", image_size=16, batch_size=8, num_samples=8,
                                  model={"dynamic_image_size": True})  # fmt: skip
    source = source_of(config)
    model = randomised(build_model(config, source.num_classes), seed=4)  # a random head: varied predictions
    assert model.input_shape == (None, None, None, 3)
    model.save(tmp_path / "model.keras")
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    metrics = training.evaluate(str(tmp_path))
    # The same figures computed here: every held-out image resized to the run's 16x16 and scaled as the pixel
    # contract says ((x - 127.5) / 127.5), top-1 and mean cross-entropy in float64.
    raw, labels = zip(*((r.numpy(), int(y)) for r, y in source.heldout), strict=True)
    x = tf.image.resize(np.stack(raw).astype(np.float32), (16, 16), method="bilinear").numpy()
    logits = model.predict((x - 127.5) / 127.5, verbose=0).astype(np.float64)
    labels = np.array(labels)
    assert len(labels) == metrics["num_heldout"] == 64
    assert len(set(logits.argmax(-1))) > 1  # not a constant prediction
    top1 = np.mean(logits.argmax(-1) == labels)
    top5 = np.mean((np.argsort(-logits, -1)[:, :5] == labels[:, None]).any(-1))
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    assert (metrics["top1"], metrics["top5"]) == pytest.approx((top1, top5), abs=1e-6), (metrics, top1, top5)
    assert metrics["loss"] == pytest.approx(-log_probs[np.arange(len(labels)), labels].mean(), rel=1e-5)


def test_inspection_runs_on_the_stored_grid():
    from keras_vit.inspect.attention import attention_weights

    model = dynamic_model()
    fixed = rebuilt_at(model, (32, 32), stored_posemb(model))
    x = images((32, 32))
    np.testing.assert_allclose(attention_weights(model, x), attention_weights(fixed, x), atol=1e-6, rtol=0)


@pytest.mark.slow
def test_tflite_export_is_at_the_stored_size(tmp_path):
    import export
    from export.saved_model import build_serving_module
    from export.tflite.runner import TFLiteRunner

    model = dynamic_model()
    report = export.export_model(model, tmp_path, export.ExportOptions(
        formats=("tflite",), quantize=("float32",), tflite_output="logits", latency_runs=1, latency_warmup=0,
        max_verify_images=4))  # fmt: skip
    assert report["passed"] and report["model"]["image_size"] == [32, 32]
    assert [a["name"] for a in report["artifacts"]] == ["model_float32.tflite"]
    assert any("dynamic_image_size=True" in note and "exported at 32x32" in note for note in report["notes"])
    runner = TFLiteRunner(path=tmp_path / "model_float32.tflite")
    assert list(runner.input["shape_signature"]) == [1, 32, 32, 3]
    x = images((32, 32), n=3)
    np.testing.assert_allclose(runner.outputs(x)["logits"], np.asarray(model(x)), atol=1e-5, rtol=0)
    # The SavedModel's signatures are traced at that size too (their serving signature resizes to it).
    _, signatures = build_serving_module(model, [str(i) for i in range(10)])
    assert signatures["model_space"].structured_input_signature[0][0].shape.as_list() == [None, 32, 32, 3]


JAX_CHECK = textwrap.dedent("""
    import sys
    import keras, numpy as np
    assert keras.backend.backend() == "jax"
    from tests.keras_vit.test_dynamic_image_size import images
    import keras_vit
    model = keras_vit.create_model("testing", dynamic_image_size=True)
    model.load_weights(sys.argv[1])
    x = images((40, 56))
    expected = np.load(sys.argv[2])
    stored = np.asarray(model.get_layer("posembed_input").pos_embedding)
    same = np.asarray(model.get_layer("posembed_input").table_for(images((32, 32))))
    print("DIFF", float(np.abs(model.predict(x, verbose=0) - expected).max()),  # jitted
          float(np.abs(np.asarray(model(x)) - expected).max()), bool((same == stored).all()))
""")


@pytest.mark.slow  # a JAX subprocess: 31 s measured
def test_jax_backend(tmp_path):
    """The same weights under JAX (jitted and eager) against the TensorFlow model rebuilt at 40x56."""
    model = dynamic_model()
    model.save_weights(tmp_path / "dynamic.weights.h5")
    fixed = rebuilt_at(model, (40, 56), scipy_zoomed(stored_posemb(model), (4, 4), (5, 7)))
    expected = np.asarray(fixed(images((40, 56))))
    assert np.abs(expected).max() > 0.1
    np.save(tmp_path / "expected.npy", expected)
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-c", JAX_CHECK, str(tmp_path / "dynamic.weights.h5"), str(tmp_path / "expected.npy")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    jitted, eager, same = result.stdout.split("DIFF", 1)[1].split()
    assert float(jitted) <= 1e-5 and float(eager) <= 1e-5 and same == "True", result.stdout
