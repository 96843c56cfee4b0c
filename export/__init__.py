"""Export keras-vit models to SavedModel, TFLite (LiteRT), ONNX and OpenVINO, verified against the Keras model.

```python
import export
report = export.export_workdir("runs/digits")  # -> runs/digits/export/: saved_model, model_*.tflite, model.onnx,
                                               #    model.xml/.bin, report.json
print(export.format_table(report))
export.predict("runs/digits/export/model_int8.tflite", ["seven.png"], top_k=3)
```
Library functions return paths, bytes and dicts; `python -m export` is a thin CLI over them.
"""

# First, before anything imports Keras: the command line's backend switch (it sets KERAS_BACKEND, which Keras reads
# when first imported, and importing keras_vit imports Keras) ...
from export import cli_backend  # noqa: F401

# `python -m export` parses its arguments before importing Keras (keras_vit/_startup.py) and calls _load() after;
# every other import loads everything now.
from keras_vit import _startup, _tpu_runtime


def _load():
    """Imports the exporters (and with them Keras and TensorFlow)."""
    # Before anything imports TensorFlow: with tensorflow-tpu and no TPU, `import tensorflow` would hang
    # (keras_vit/_tpu_runtime.py). Then keras_vit's layers, which `keras.saving.load_model` needs registered.
    _tpu_runtime.disable_libtpu_without_tpu()
    import keras_vit

    keras_vit._load()
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

    globals().update(
        FORMATS=FORMATS,
        QUANTIZATION_MODES=QUANTIZATION_MODES,
        ExportError=ExportError,
        VerificationError=VerificationError,
        convert_tflite=convert_tflite,
        export_model=export_model,
        export_path=export_path,
        export_workdir=export_workdir,
        format_predictions=format_predictions,
        format_table=format_table,
        gpu_delegate_issues=gpu_delegate_issues,
        load_runner=load_runner,
        load_source=load_source,
        non_builtin_ops=non_builtin_ops,
        predict=predict,
        read_metadata=read_metadata,
        read_ops=read_ops,
        to_model_space=to_model_space,
        write_saved_model=write_saved_model,
    )


_tpu_runtime.disable_libtpu_without_tpu()
if not _startup.parses_first():
    _load()


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

__getattr__ = _startup.deferred_getattr(__name__, __all__, _load)
