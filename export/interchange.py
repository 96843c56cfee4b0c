"""The interchange formats by name: ONNX (export/onnx.py) and OpenVINO (export/openvino.py), each a module with the
same `write(model, description, staging, num_threads, name)`."""

from . import onnx, openvino, portable

WRITERS = {"onnx": onnx, "openvino": openvino}


def write(fmt, model, description, staging, num_threads=1, name=None):
    """Converts `model` to `fmt` ("onnx" or "openvino") with `description` (export/description.py) in the file,
    writes its file(s) into the staging directory and opens them with the format's runtime; returns (name, bytes
    written, runner). `name`: the file's name (default model.onnx / model.xml, the .bin beside it). A description
    that says `l2_normalized` gets a file whose vectors are (`portable.l2_normalized_model`)."""
    module = WRITERS[fmt]
    source = portable.l2_normalized_model(model) if description.l2_normalized else model
    return module.write(source, description, staging, num_threads, name or module.NAME)
