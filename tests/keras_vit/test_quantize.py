"""Keras' own model.quantize on keras_vit models: every projection quantized, outputs near float, .keras round trip."""

import keras
import numpy as np
import pytest

import keras_vit

MODES = ["int8", "int4", "float8"]


def _model(variant="testing", **kwargs):
    keras.utils.set_random_seed(7)
    model = keras_vit.create_model(variant, num_classes=10, image_size=32, **kwargs)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.2, head.kernel.shape))
    return model


def _images():
    return np.random.default_rng(2).uniform(-1, 1, (4, 32, 32, 3)).astype("float32")


def _projections(model):
    return [
        layer for layer in model._flatten_layers() if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))
    ]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_quantize_reaches_every_projection_and_stays_near_float(mode):
    model = _model()
    reference = keras.ops.convert_to_numpy(model(_images()))
    with pytest.warns(UserWarning):  # Keras names the layers it has nothing to quantize in (norms, tokens)
        model.quantize(mode)
    projections = _projections(model)
    attention = [p for p in projections if p.name in ("query", "key", "value", "out")]
    assert len(attention) == 4 * 2  # the testing variant's two blocks
    assert all(p.quantization_mode == mode for p in projections), [(p.path, p.quantization_mode) for p in projections]
    out = keras.ops.convert_to_numpy(model(_images()))
    scale = np.abs(reference).max()
    assert np.abs(out - reference).max() / scale < {"int8": 0.05, "int4": 0.5, "float8": 0.2}[mode]
    assert (out.argmax(-1) == reference.argmax(-1)).mean() >= 0.75 or mode == "int4"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_a_quantized_model_saves_and_loads(tmp_path, mode):
    model = _model()
    with pytest.warns(UserWarning):
        model.quantize(mode)
    before = keras.ops.convert_to_numpy(model(_images()))
    model.save(tmp_path / "q.keras")
    loaded = keras.saving.load_model(tmp_path / "q.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(_images())), before, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_quantize_works_on_a_hybrid_with_stochastic_depth(mode):
    keras.utils.set_random_seed(7)
    model = keras_vit.create_model(
        "R26+S/32",
        image_size=32,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        mlp_dim=64,
        num_classes=3,
        stochastic_depth_rate=0.1,
    )
    with pytest.warns(UserWarning):
        model.quantize(mode)  # DropPath (no weights) once stopped this: "not built yet"
    assert all(p.quantization_mode == mode for p in _projections(model))
    assert np.isfinite(keras.ops.convert_to_numpy(model(_images()))).all()


@pytest.mark.slow
def test_an_int8_model_exports_to_savedmodel_and_onnx_through_keras(tmp_path):
    """Keras' own `model.export` of a quantized model, each file run by its own runtime against the Keras model.
    (TFLite takes the float model: its converter has no kernel for Keras' int8 matmuls; the exporter's own int8
    modes quantize for LiteRT.)"""
    import onnxruntime
    import tensorflow as tf

    model = _model()
    with pytest.warns(UserWarning):
        model.quantize("int8")
    images = _images()
    reference = keras.ops.convert_to_numpy(model(images))
    model.export(str(tmp_path / "saved"), format="tf_saved_model", verbose=False)
    loaded = tf.saved_model.load(str(tmp_path / "saved"))  # kept: its variables live as long as it does
    saved = loaded.serve(images).numpy()
    model.export(str(tmp_path / "q.onnx"), format="onnx", verbose=False)
    session = onnxruntime.InferenceSession(str(tmp_path / "q.onnx"))
    onnx_out = session.run(None, {session.get_inputs()[0].name: images})[0]
    scale = np.abs(reference).max()
    assert np.abs(saved - reference).max() / scale < 1e-2
    assert np.abs(onnx_out - reference).max() / scale < 1e-2
