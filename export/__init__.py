"""Export keras-vit models to SavedModel, TFLite (LiteRT), ONNX and OpenVINO, every file verified against the Keras
model; `python -m export` is a thin CLI over these functions (docs/export.md shows them in use)."""

# Importing keras_vit first runs its TPU guard (before anything here imports TensorFlow). The public names are
# imported on first use (keras_vit/_lazy.py), so `python -m export --help` answers before Keras loads.
from keras_vit import _lazy

__all__, __getattr__, __dir__ = _lazy.lazy_names(
    __name__,
    {
        "ExportError": ".errors",
        "VerificationError": ".errors",
        "non_builtin_ops": ".tflite.flatbuffer",
        "read_ops": ".tflite.flatbuffer",
        "find_vulkan_driver": ".tflite.gpu:find_driver",
        "read_metadata": ".tflite.metadata_reader",
        "ExportOptions": ".options",
        "ExportSource": ".options",
        "FORMATS": ".sources",
        "export_model": ".job",
        "export_path": ".sources",
        "export_workdir": ".sources",
        "load_source": ".sources",
        "format_predictions": ".predict",
        "predict": ".predict:predict",  # the function, not its module
        "similar": ".predict",
        "to_model_space": ".description",
        "format_table": ".job",
        "load_runner": ".formats",
        "write_saved_model": ".saved_model",
        "QUANTIZATION_MODES": ".tflite.converter",
        "convert_tflite": ".tflite.converter:convert",
    },
)

# Bound now: importing the module `export.predict` (as the exporter's own modules may) would otherwise bind the
# module, not its function, under this name.
predict = __getattr__("predict")
