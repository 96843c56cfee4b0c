"""Export keras-vit models to SavedModel and TFLite (LiteRT), verified against the Keras model.

```python
import export
report = export.export_workdir("runs/digits")  # -> runs/digits/export/: saved_model, model_*.tflite, report.json
print(export.format_table(report))
export.predict("runs/digits/export/model_int8.tflite", ["seven.png"], top_k=3)
```
Library functions return paths, bytes and dicts; `python -m export` is a thin CLI over them.
"""

import os
import sys

# `python -m export` converts with TensorFlow, so it runs Keras' TensorFlow backend even from a shell that trained
# with KERAS_BACKEND=jax (the .keras file is backend-neutral). Python imports this package before export/__main__.py,
# with sys.argv[0] == "-m" while it locates the module, and Keras reads KERAS_BACKEND when first imported, so the
# switch is made here, for the command line only: `import export` in a JAX session changes nothing (and
# `export_model` then says it needs TensorFlow).
_BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
if sys.argv[:1] == ["-m"] and "keras" not in sys.modules and _BACKEND != "tensorflow":
    print(f"[export] KERAS_BACKEND={os.environ['KERAS_BACKEND']} -> tensorflow: export converts with TensorFlow",
          file=sys.stderr)
    os.environ["KERAS_BACKEND"] = "tensorflow"

from export.errors import ExportError, VerificationError  # noqa: E402
from export.flatbuffer import gpu_delegate_issues, non_builtin_ops, read_ops  # noqa: E402
from export.pipeline import FORMATS, export_model, export_path, export_workdir, load_source  # noqa: E402
from export.predict import format_predictions, predict  # noqa: E402
from export.preprocessing import to_model_space  # noqa: E402
from export.report import format_table  # noqa: E402
from export.runners import load_runner  # noqa: E402
from export.saved_model import write_saved_model  # noqa: E402
from export.tflite import QUANTIZATION_MODES, convert as convert_tflite  # noqa: E402

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
    "read_ops",
    "to_model_space",
    "write_saved_model",
]
