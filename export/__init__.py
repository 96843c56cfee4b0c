"""Export keras-vit models to SavedModel, TFLite (LiteRT), ONNX and OpenVINO, verified against the Keras model.

```python
import export
report = export.export_workdir("runs/digits")  # -> runs/digits/export/: saved_model, model_*.tflite, model.onnx,
                                               #    model.xml/.bin, report.json
print(export.format_table(report))
export.predict("runs/digits/export/model_int8.tflite", ["seven.png"], top_k=3)
export.similar("features_export/embedder_float32.tflite", "a.png", "b.png")  # an image embedder: cosine
```
Library functions return paths, bytes and dicts; `python -m export` is a thin CLI over them.
"""

# First, before anything imports Keras: the command line's backend switch (it sets KERAS_BACKEND, which Keras reads
# when first imported, and importing keras_vit imports Keras) ...
# `python -m export` parses its arguments before importing Keras (keras_vit/_startup.py) and calls _load() after;
# every other import loads everything now.
from keras_vit import _startup, _tpu_runtime

from . import cli_backend  # noqa: F401


def _load():
    """Imports the exporters (and with them Keras and TensorFlow)."""
    # Before anything imports TensorFlow: with tensorflow-tpu and no TPU, `import tensorflow` would hang
    # (keras_vit/_tpu_runtime.py). Then keras_vit's layers, which `keras.saving.load_model` needs registered.
    _tpu_runtime.disable_libtpu_without_tpu()
    import keras_vit

    keras_vit._load()
    from .errors import ExportError, VerificationError
    from .flatbuffer import non_builtin_ops, read_ops
    from .gpu import find_driver as find_vulkan_driver
    from .metadata import read_metadata
    from .options import ExportOptions, ExportSource
    from .pipeline import FORMATS, export_model, export_path, export_workdir, load_source
    from .predict import format_predictions, predict, similar
    from .preprocessing import to_model_space
    from .report import format_table
    from .runners import load_runner
    from .saved_model import write_saved_model
    from .tflite import QUANTIZATION_MODES
    from .tflite import convert as convert_tflite

    globals().update(
        FORMATS=FORMATS,
        QUANTIZATION_MODES=QUANTIZATION_MODES,
        ExportError=ExportError,
        ExportOptions=ExportOptions,
        ExportSource=ExportSource,
        VerificationError=VerificationError,
        convert_tflite=convert_tflite,
        export_model=export_model,
        export_path=export_path,
        export_workdir=export_workdir,
        format_predictions=format_predictions,
        format_table=format_table,
        find_vulkan_driver=find_vulkan_driver,
        load_runner=load_runner,
        load_source=load_source,
        non_builtin_ops=non_builtin_ops,
        predict=predict,
        read_metadata=read_metadata,
        read_ops=read_ops,
        similar=similar,
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
    "ExportOptions",
    "ExportSource",
    "VerificationError",
    "convert_tflite",
    "export_model",
    "export_path",
    "export_workdir",
    "find_vulkan_driver",
    "format_predictions",
    "format_table",
    "load_runner",
    "load_source",
    "non_builtin_ops",
    "predict",
    "read_metadata",
    "read_ops",
    "similar",
    "to_model_space",
    "write_saved_model",
]

__getattr__ = _startup.deferred_getattr(__name__, __all__, _load)
