"""The interchange formats by name: ONNX (export/onnx.py) and OpenVINO (export/openvino.py), each a module with the
same `write(model, description, staging, num_threads, name)`."""

from . import onnx, openvino

WRITERS = {"onnx": onnx, "openvino": openvino}


def write(fmt, model, description, staging, num_threads=1, name=None):
    """Converts `model` to `fmt` ("onnx" or "openvino") with `description` (export/description.py) in the file,
    writes its file(s) into the staging directory and opens them with the format's runtime; returns (name, bytes
    written, runner). `name`: the file's name (default model.onnx / model.xml, the .bin beside it)."""
    module = WRITERS[fmt]
    return module.write(model, description, staging, num_threads, name or module.NAME)
