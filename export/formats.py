"""The one table of the formats export/ writes (`FORMATS`), each a value with the same names (docs/export.md lists
them); `load_runner` opens what any of them wrote."""

import os

from keras_vit import files

from . import saved_model, tflite
from .errors import ExportError
from .interchange import ONNX, OPENVINO
from .io import load_keras_model, model_labels
from .keras_runner import KerasRunner

FORMATS = {format.NAME: format for format in (saved_model, tflite, ONNX, OPENVINO)}


def offered_formats(kind):
    """The names of the formats that write `kind` (each format's `KINDS`), in the table's order."""
    return tuple(name for name, format in FORMATS.items() if kind.NAME in format.KINDS)


def owned_names(kinds):
    """The regular expressions of every name an export of these kinds writes at the top of `out`."""
    return tuple(pattern.format(stem=kind.STEM) for kind in kinds for name in offered_formats(kind)
                 for pattern in FORMATS[name].OWNED)  # fmt: skip


def load_runner(path, num_threads=1):
    """Opens any artifact: a `.keras` file (or a training workdir), a SavedModel directory, or a file of any format
    (`.tflite`, `.onnx` with onnxruntime, OpenVINO's `.xml` with its `.bin`).

    Labels come with the artifact: a `.keras` model's own `class_names`, `assets/labels.txt` inside a SavedModel,
    the `.json` sidecar of a `.tflite` file or, without one, its embedded metadata; ONNX metadata_props, OpenVINO
    rt_info.
    """
    path = os.fspath(path)
    if files.isdir(path):
        if files.isfile(files.join(path, "saved_model.pb")) or not files.isfile(files.join(path, "model.keras")):
            return saved_model.open(path, num_threads)
        path = files.join(path, "model.keras")  # a training workdir: its Keras model
    for format in FORMATS.values():
        if format.SUFFIXES and path.endswith(format.SUFFIXES):
            return format.open(path, num_threads)
    if path.endswith(".keras"):
        model = load_keras_model(path)
        return KerasRunner(model, model_labels(model))
    if not files.exists(path):
        raise ExportError(f"No artifact at {str(path)!r}.")
    suffixes = ", ".join(s for format in FORMATS.values() for s in format.SUFFIXES)
    raise ExportError(
        f"Cannot tell what {str(path)!r} is. Pass a .keras file, a SavedModel directory or a {suffixes} file."
    )
