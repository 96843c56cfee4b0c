"""keras-vit: the Vision Transformer of "An Image is Worth 16x16 Words" for Keras 3, e.g.
`keras_vit.create_model("B/16", num_classes=1000)` and `keras_vit.from_pretrained("ViT-B_16")`."""

import importlib

from keras_vit import _extras, _lazy, _tpu_runtime

# Before anything imports TensorFlow: with tensorflow-tpu and no TPU, `import tensorflow` would hang
# (keras_vit/_tpu_runtime.py). Every way into keras-vit (training/, export/, the command lines) comes through here.
_tpu_runtime.disable_libtpu_without_tpu()

__version__ = "0.1.0"

# The public API, imported on first use (keras_vit/_lazy.py): `import keras_vit` itself imports no Keras, so
# `python -m training --help` answers at once.
__all__, _lazy_getattr, __dir__ = _lazy.lazy_names(
    __name__,
    {
        "layers": "keras_vit.layers",
        "decode_predictions": "keras_vit.labels",
        "imagenet_class_names": "keras_vit.labels",
        "imagenet_synsets": "keras_vit.labels",
        "VARIANTS": "keras_vit.models",
        "ViTConfig": "keras_vit.models",
        "get_variant": "keras_vit.models",
        "VisionTransformer": "keras_vit.models",
        "create_model": "keras_vit.models",
        "NaFlexViT": "keras_vit.models.naflex",
        "naflex_batch": "keras_vit.naflex_inputs",
        "feature_model": "keras_vit.models.features",
        "CheckpointError": "keras_vit.weights",
        "load_npz": "keras_vit.weights",
        "from_pretrained": "keras_vit.weights",
        "load_weights": "keras_vit.weights",
        "save_pretrained": "keras_vit.weights",
        "enable_lora": "keras_vit.lora",
        "merge_lora": "keras_vit.lora",
    },
)


def __getattr__(name):
    try:
        return _lazy_getattr(name)
    except ModuleNotFoundError as err:  # Keras' backend not installed (TensorFlow by default): say what to do
        line = _extras.missing_line(err, f"keras_vit.{name}")
        if line is None:
            raise
        raise ModuleNotFoundError(line, name=err.name) from err


def _register_serializables():
    # `keras.saving.load_model` finds keras-vit's classes ("keras_vit>PatchEmbedding", ...) only once their modules
    # have run their `register_keras_serializable` decorators; it never imports them itself.
    importlib.import_module("keras_vit.layers")  # imports nothing else of keras_vit: never circular
    try:
        importlib.import_module("keras_vit.models.vision_transformer")
        importlib.import_module("keras_vit.models.naflex")
    except ImportError:
        # A keras_vit module that imported Keras first, and that the model needs, is half-run (a direct import
        # of keras_vit.models.checks, say); it completes once this returns, and the model class registers when
        # something imports it. The packages import Keras before their modules, so their imports never get here.
        if not _lazy.importing(__name__):
            raise


# So they are registered as soon as both keras_vit and Keras are imported, in either order.
_lazy.when_imported("keras", _register_serializables)
