"""The file formats export/ writes, each a value with the same names (docs/export.md lists them): `NAME`,
`modes(plan)` and `entry(plan, mode, verification, staging, out, options)`. The export job writes them in this
order; the CLI's --formats choices are this table's keys."""

from . import saved_model, tflite
from .interchange import ONNX, OPENVINO

FORMATS = {format.NAME: format for format in (saved_model, tflite, ONNX, OPENVINO)}
