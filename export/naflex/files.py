"""A NaFlex model's files: one traced function of (patches, mask, grid) written as a SavedModel, a builtin-ops TFLite
flatbuffer, ONNX (tf2onnx) and OpenVINO (read from that ONNX), and a runner per file that takes the same feeds."""

import os
import tempfile

import numpy as np

from ..interchange.onnx import METADATA_PREFIX, OPSET
from ..tflite.flatbuffer import non_builtin_ops, read_ops

INPUTS = ("patches", "mask", "grid")
TFLITE_MODES = ("float32", "float16", "dynamic_int8")  # the calibrated ones would need NaFlex calibration feeds


def input_specs(model, batch):
    """The three inputs' `tf.TensorSpec`s at `batch` (None: open)."""
    import tensorflow as tf

    n, p, c = (model.options[k] for k in ("max_num_patches", "patch_size", "channels"))
    return [
        tf.TensorSpec((batch, n, p * p * c), tf.float32, name="patches"),
        tf.TensorSpec((batch, n), tf.int32, name="mask"),
        tf.TensorSpec((batch, 2), tf.int32, name="grid"),
    ]


def serving_function(model, output, batch):
    """The `tf.function` every file is made from: the three inputs -> {output: the model's output}."""
    import tensorflow as tf

    @tf.function(input_signature=input_specs(model, batch))
    def serve(patches, mask, grid):
        return {output: model({"patches": patches, "mask": mask, "grid": grid}, training=False)}

    return serve


def write_saved_model(model, output, path):
    """`saved_model/` with one `serving_default` signature of the three inputs (open batch)."""
    import tensorflow as tf

    module = tf.Module()
    module.model = model  # tracks the variables
    module.serve = serving_function(model, output, None)
    tf.saved_model.save(module, os.fspath(path), signatures={"serving_default": module.serve.get_concrete_function()})


def tflite_bytes(model, output, mode):
    """A batch-1 flatbuffer with builtin ops only (the converter fails on any other op); `mode` in `TFLITE_MODES`."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    frozen = convert_variables_to_constants_v2(serving_function(model, output, 1).get_concrete_function())
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen], model)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if mode != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "float16":
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def tflite_ops(flatbuffer):
    """({op: count}, [non-builtin ops]) of a flatbuffer."""
    ops = read_ops(flatbuffer)
    return ops, non_builtin_ops(ops)


def onnx_bytes(model, output, properties):
    """The ONNX file (open batch, opset `OPSET`), its one output named `output`, `properties` in metadata_props."""
    import onnx
    import tf2onnx

    function = serving_function(model, output, None)
    proto, _ = tf2onnx.convert.from_function(function, input_signature=input_specs(model, None), opset=OPSET)
    old = proto.graph.output[0].name
    for node in proto.graph.node:
        node.output[:] = [output if name == old else name for name in node.output]
    proto.graph.output[0].name = output
    for key, text in properties.items():
        proto.metadata_props.add(key=METADATA_PREFIX + key, value=text)
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


def openvino_files(onnx_data, output):
    """(xml bytes, bin bytes) of the ONNX file read by OpenVINO and saved as its IR (float32 weights)."""
    import openvino as ov

    with tempfile.TemporaryDirectory() as scratch:
        source = os.path.join(scratch, "model.onnx")
        with open(source, "wb") as f:
            f.write(onnx_data)
        ov_model = ov.Core().read_model(source)
        ov_model.outputs[0].get_tensor().set_names({output})
        xml = os.path.join(scratch, "model.xml")
        ov.save_model(ov_model, xml, compress_to_fp16=False)
        with open(xml, "rb") as x, open(os.path.join(scratch, "model.bin"), "rb") as b:
            return x.read(), b.read()


class SavedModelRunner:
    threads = "tf-default"

    def __init__(self, path):
        import tensorflow as tf

        self._call = tf.saved_model.load(os.fspath(path)).signatures["serving_default"]

    def run(self, feed):
        import tensorflow as tf

        return next(iter(self._call(**{k: tf.constant(v) for k, v in feed.items()}).values())).numpy()


class TFLiteRunner:
    def __init__(self, flatbuffer, num_threads=1):
        from ai_edge_litert.interpreter import Interpreter

        self.threads = num_threads
        self._interpreter = Interpreter(model_content=bytes(flatbuffer), num_threads=num_threads)
        self._interpreter.allocate_tensors()
        details = self._interpreter.get_input_details()
        self._inputs = {next(k for k in INPUTS if k in d["name"]): d["index"] for d in details}
        self._output = self._interpreter.get_output_details()[0]["index"]

    def run(self, feed):
        for name, index in self._inputs.items():
            self._interpreter.set_tensor(index, feed[name])
        self._interpreter.invoke()
        return self._interpreter.get_tensor(self._output).copy()


class ONNXRunner:
    def __init__(self, data, num_threads=1):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = self.threads = num_threads
        self._session = onnxruntime.InferenceSession(bytes(data), options, providers=["CPUExecutionProvider"])
        self.version = onnxruntime.__version__

    def run(self, feed):
        return self._session.run(None, feed)[0]


class OpenVINORunner:
    def __init__(self, xml, weights, num_threads=1):
        import openvino as ov

        core = ov.Core()
        model = core.read_model(model=bytes(xml), weights=ov.Tensor(np.frombuffer(bytes(weights), np.uint8)))
        config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": num_threads}
        self._compiled = core.compile_model(model, "CPU", config)
        self.threads, self.version = num_threads, ov.get_version()

    def run(self, feed):
        return self._compiled(feed)[self._compiled.outputs[0]]
