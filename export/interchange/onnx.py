"""ONNX: Keras' own `model.export(format="onnx")`, the output renamed, the description in `metadata_props`, run with
onnxruntime."""

import collections
import os
import tempfile

from keras_vit import files

from .. import commit
from ..errors import ExportError
from . import portable

NAME = "model.onnx"
# Stated, not left to tf2onnx's default (15): opset 17 runs on onnxruntime >= 1.12, OpenVINO and TensorRT 8.5+.
OPSET = 17
METADATA_PREFIX = "keras_vit."


def convert(model, description):
    """The ONNX file (bytes) of `model`: float32 images in [-1, 1] -> its one output, named as `description` (export/
    description.py) names it (`logits`, `embedding`), which is written into metadata_props (`portable.properties`).

    `model` is exported as built: with `dynamic_image_size=True` its height and width stay open, and the
    description's `image_size` (the size it was trained at) is what the file states.
    """
    import onnx

    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, NAME)
        spec = [portable.input_spec(model)]
        model.export(path, format="onnx", verbose=False, input_signature=spec, opset_version=OPSET)
        proto = onnx.load(path)
    new = description.outputs[0].name
    if len(proto.graph.output) != 1:
        raise ExportError(f"Expected the ONNX graph to have one output ({new}); it has {len(proto.graph.output)}.")
    old = proto.graph.output[0].name
    for node in proto.graph.node:  # tf2onnx names the output after TensorFlow's "Identity:0"
        node.output[:] = [new if name == old else name for name in node.output]
        node.input[:] = [new if name == old else name for name in node.input]
    proto.graph.output[0].name = new
    del proto.metadata_props[:]
    for key, text in portable.properties(description).items():
        proto.metadata_props.add(key=METADATA_PREFIX + key, value=text)
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


def inspect(data):
    """{"opset": {domain: version}, "ops": {op_type: count}} read from an ONNX file's bytes with the onnx package."""
    import onnx

    proto = onnx.load_from_string(bytes(data))
    ops = collections.Counter(node.op_type for node in proto.graph.node)
    return {
        "opset": {(o.domain or "ai.onnx"): int(o.version) for o in proto.opset_import},
        "ops": dict(sorted(ops.items())),
    }


def write(model, description, staging, num_threads=1, name=NAME):
    """Converts `model` (`convert`), writes `name` into the staging directory and opens it with onnxruntime; returns
    (name, bytes written, runner)."""
    data = convert(model, description)
    commit.write_staged(staging / name, data)
    return name, len(data), OnnxRunner(data, num_threads=num_threads)


class OnnxRunner(portable.InterchangeRunner):
    """Runs an ONNX file with onnxruntime's CPU provider (`num_threads` intra-op threads, one inter-op)."""

    kind = "onnx"
    what = "The ONNX model"

    def __init__(self, data=None, path=None, num_threads=1):
        import onnxruntime as ort

        where = repr(str(path)) if path is not None else "the ONNX model"
        if data is None:
            path = os.fspath(path)
            if not files.isfile(path):
                raise ExportError(f"No .onnx file at {str(path)!r}.")
            data = files.read_bytes(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = int(num_threads), 1
        options.log_severity_level = 3  # errors only: its warnings would interleave with the report
        try:
            self.session = ort.InferenceSession(bytes(data), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types, one per failure kind
            raise ExportError(
                f"onnxruntime could not load {where}: {portable.first_line(exc)} (is it a complete ONNX file? "
                "Re-export it with `python -m export`)."
            ) from exc
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        if len(inputs) != 1 or len(outputs) != 1:
            raise ExportError(f"Expected one input and one output in {where}; found {len(inputs)} and {len(outputs)}.")
        self.input_name = inputs[0].name
        self.input_shape = [d if isinstance(d, int) else None for d in inputs[0].shape]
        meta = self.session.get_modelmeta().custom_metadata_map
        found = {k[len(METADATA_PREFIX) :]: v for k, v in meta.items() if k.startswith(METADATA_PREFIX)}
        self.contract = portable.read_contract(found, where)
        self.num_threads = int(num_threads)
        self.runtime_version = ort.__version__
        self.data = bytes(data)
        self._setup(where)

    def details(self, x, reference, kind):
        """What the report states beside the figures: runtime, opset, op counts (the same for every `kind`)."""
        return {"runtime_version": self.runtime_version, **inspect(self.data)}

    def run(self, x):
        return self.session.run(None, {self.input_name: x})[0]
