"""A NaFlex model converts to TFLite with builtin ops only and to ONNX (run by onnxruntime and OpenVINO), and each
gives transformers' outputs for the three aspect ratios of fixtures/interop_families2/hf_siglip2_naflex (the graph
itself; `python -m export` of a NaFlex model is tests/training/test_naflex_cli.py)."""

import os

import numpy as np
import pytest

import keras_vit
from tests import support
from tests.support.numerics import scaled_diff

FOLDER = os.path.join(str(support.FIXTURES), "interop_families2", "hf_siglip2_naflex")
TOL = 1e-5


@pytest.fixture(scope="module")
def case():
    import tensorflow as tf

    arrays = dict(np.load(os.path.join(FOLDER, "io.npz")))
    model = keras_vit.from_pretrained(FOLDER)
    spec = [
        tf.TensorSpec((1, 16, 192), tf.float32, name="patches"),
        tf.TensorSpec((1, 16), tf.int32, name="mask"),
        tf.TensorSpec((1, 2), tf.int32, name="grid"),
    ]

    @tf.function(input_signature=spec)
    def serve(patches, mask, grid):
        return model({"patches": patches, "mask": mask, "grid": grid}, training=False)

    inputs = [
        dict(
            patches=arrays["pixel_values"][i : i + 1],
            mask=arrays["pixel_attention_mask"][i : i + 1].astype(np.int32),
            grid=arrays["spatial_shapes"][i : i + 1].astype(np.int32),
        )
        for i in range(3)
    ]
    return model, serve, spec, inputs, arrays["pooler_output"]


@pytest.mark.slow
def test_tflite_builtins(case):
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    model, serve, _, inputs, expected = case
    frozen = convert_variables_to_constants_v2(serve.get_concrete_function())
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen], model)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # fails on any op without a builtin
    flatbuffer = converter.convert()
    for i, feed in enumerate(inputs):  # 4x4, 2x7 and 5x3 grids, the last two padded
        interpreter = Interpreter(model_content=flatbuffer)
        interpreter.allocate_tensors()
        for detail in interpreter.get_input_details():
            name = next(k for k in feed if k in detail["name"])
            interpreter.set_tensor(detail["index"], feed[name])
        interpreter.invoke()
        got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
        assert scaled_diff(got, expected[i : i + 1]) <= TOL


@pytest.fixture(scope="module")
def onnx_bytes(case):
    import tf2onnx

    _, serve, spec, _, _ = case
    proto, _ = tf2onnx.convert.from_function(serve, input_signature=spec, opset=17)
    return proto.SerializeToString()


@pytest.mark.slow
def test_onnx(case, onnx_bytes):
    import onnxruntime

    _, _, _, inputs, expected = case
    session = onnxruntime.InferenceSession(onnx_bytes)
    for i, feed in enumerate(inputs):
        got = session.run(None, feed)[0]
        assert scaled_diff(got, expected[i : i + 1]) <= TOL


@pytest.mark.slow
def test_openvino(case, onnx_bytes, tmp_path):
    """The same ONNX graph read and compiled by OpenVINO (f32 inference, as the exporter asks for)."""
    import openvino as ov

    _, _, _, inputs, expected = case
    (tmp_path / "naflex.onnx").write_bytes(onnx_bytes)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(tmp_path / "naflex.onnx"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for i, feed in enumerate(inputs):
        got = compiled(feed)[compiled.outputs[0]]
        assert scaled_diff(got, expected[i : i + 1]) <= TOL
