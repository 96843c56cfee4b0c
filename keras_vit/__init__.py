"""keras-vit: the Vision Transformer of "An Image is Worth 16x16 Words" for Keras 3.

```python
import keras_vit
model = keras_vit.create_model("B/16", image_size=224, num_classes=1000)
keras_vit.load_npz(model, "ViT-B_16.npz")
```
"""

import importlib
import sys

from keras_vit import _startup, _tpu_runtime

# A command line of this project is starting (`python -m keras_vit.inspect`, `python -m training`, ...): its quiet
# defaults (keras_vit/_startup.py) must be in place before Keras imports TensorFlow below. Imports never do this.
if _startup.command_line() is not None:
    _startup.configure(sys.argv[1:])
# Before Keras imports TensorFlow: with tensorflow-tpu and no TPU, `import tensorflow` would hang
# (keras_vit/_tpu_runtime.py). `python -m keras_vit.inspect` comes through here first too.
_tpu_runtime.disable_libtpu_without_tpu()

__version__ = "0.1.0"


def _load():
    """Imports the public API (and with it Keras); registers the layers for `keras.saving.load_model`."""
    global layers, decode_predictions, imagenet_class_names, imagenet_synsets  # noqa: PLW0603 (the lazy API's binding)
    global VARIANTS, VisionTransformer, ViTConfig, create_model, feature_model, get_variant  # noqa: PLW0603
    global CheckpointError, from_pretrained, load_npz, load_weights, save_pretrained  # noqa: PLW0603
    # import_module, not `from keras_vit import layers`, which would ask __getattr__ below first.
    layers = importlib.import_module("keras_vit.layers")
    from keras_vit.labels import decode_predictions, imagenet_class_names, imagenet_synsets
    from keras_vit.models import VARIANTS, VisionTransformer, ViTConfig, create_model, get_variant
    from keras_vit.models.features import feature_model
    from keras_vit.weights import CheckpointError, from_pretrained, load_npz, load_weights, save_pretrained


# `python -m training`, `python -m export` and `python -m keras_vit.weights` parse their arguments before Keras loads
# (keras_vit/_startup.py) and load it after, if at all; every other import loads it all now.
if not _startup.parses_first():
    _load()


__all__ = [
    "VARIANTS",
    "CheckpointError",
    "ViTConfig",
    "VisionTransformer",
    "create_model",
    "decode_predictions",
    "feature_model",
    "from_pretrained",
    "get_variant",
    "imagenet_class_names",
    "imagenet_synsets",
    "layers",
    "load_npz",
    "load_weights",
    "save_pretrained",
]

__getattr__ = _startup.deferred_getattr(__name__, __all__, _load)
