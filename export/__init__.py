"""Export keras-vit models to SavedModel and TFLite (LiteRT), verified against the Keras model.

```python
import export
report = export.export_workdir("runs/digits")  # -> runs/digits/export/: saved_model, model_*.tflite, report.json
print(export.format_table(report))
export.predict("runs/digits/export/model_int8.tflite", ["seven.png"], top_k=3)
```
Library functions return paths, bytes and dicts; `python -m export` is a thin CLI over them.
"""

# First, before anything imports Keras: the command line's backend switch (it sets KERAS_BACKEND, which Keras reads
# when first imported, and importing keras_vit imports Keras) ...
from export import cli_backend  # noqa: F401

# ... then, before anything imports TensorFlow: with tensorflow-tpu and no TPU, `import tensorflow` would hang
# (keras_vit/_tpu_runtime.py). Importing keras_vit runs this too, before it imports Keras.
from keras_vit import _tpu_runtime

_tpu_runtime.disable_libtpu_without_tpu()

from export.errors import ExportError, VerificationError
from export.flatbuffer import gpu_delegate_issues, non_builtin_ops, read_ops
from export.metadata import read_metadata
from export.pipeline import FORMATS, export_model, export_path, export_workdir, load_source
from export.predict import format_predictions, predict
from export.preprocessing import to_model_space
from export.report import format_table
from export.runners import load_runner
from export.saved_model import write_saved_model
from export.tflite import QUANTIZATION_MODES
from export.tflite import convert as convert_tflite

__all__ = [
    "FORMATS",
    "QUANTIZATION_MODES",
    "ExportError",
    "VerificationError",
    "convert_tflite",
    "export_model",
    "export_path",
    "export_workdir",
    "format_predictions",
    "format_table",
    "gpu_delegate_issues",
    "load_runner",
    "load_source",
    "non_builtin_ops",
    "predict",
    "read_metadata",
    "read_ops",
    "to_model_space",
    "write_saved_model",
]
