"""The interchange formats by name: ONNX (export/onnx.py) and OpenVINO (export/openvino.py), each a module with the
same `write(model, labels, image_size, staging, num_threads, embedding, name)`."""

from . import onnx, openvino

WRITERS = {"onnx": onnx, "openvino": openvino}


def write(fmt, model, labels, image_size, staging, num_threads=1, embedding=None, name=None):
    """Converts `model` to `fmt` ("onnx" or "openvino"), writes its file(s) into the staging directory and opens
    them with the format's runtime; returns (name, bytes written, runner). `embedding`: see `portable.contract`;
    `name`: the file's name (default model.onnx / model.xml, the .bin beside it)."""
    module = WRITERS[fmt]
    return module.write(model, labels, image_size, staging, num_threads, embedding, name or module.NAME)
