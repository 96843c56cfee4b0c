"""keras-vit: the Vision Transformer of "An Image is Worth 16x16 Words" for Keras 3.

```python
import keras_vit
model = keras_vit.create_model("B/16", image_size=224, num_classes=1000)
keras_vit.load_npz(model, "ViT-B_16.npz")
```
"""

# Before Keras imports TensorFlow: with tensorflow-tpu and no TPU, `import tensorflow` would hang
# (keras_vit/_tpu_runtime.py). `python -m keras_vit.inspect` comes through here first too.
from keras_vit import _cli_mode, _tpu_runtime

_tpu_runtime.disable_libtpu_without_tpu()

if not _cli_mode.weights_cli_running():
    from keras_vit import layers
    from keras_vit.labels import decode_predictions, imagenet_class_names, imagenet_synsets
    from keras_vit.models import VARIANTS, VisionTransformer, ViTConfig, create_model, get_variant
    from keras_vit.weights import CheckpointError, load_npz
else:  # `python -m keras_vit.weights`: the same names, imported on first use (keras_vit/_cli_mode.py says why)

    def __getattr__(name):
        import importlib

        if name == "layers":
            return importlib.import_module("keras_vit.layers")
        if name not in __all__:
            raise AttributeError(f"module 'keras_vit' has no attribute {name!r}")
        homes = {"CheckpointError": "keras_vit.weights", "load_npz": "keras_vit.weights"}
        homes.update(
            dict.fromkeys(("decode_predictions", "imagenet_class_names", "imagenet_synsets"), "keras_vit.labels")
        )
        return getattr(importlib.import_module(homes.get(name, "keras_vit.models")), name)


__version__ = "0.1.0"

__all__ = [
    "VARIANTS",
    "CheckpointError",
    "ViTConfig",
    "VisionTransformer",
    "create_model",
    "decode_predictions",
    "get_variant",
    "imagenet_class_names",
    "imagenet_synsets",
    "layers",
    "load_npz",
]
