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

if not _cli_mode.weights_cli_running():  # importing the models registers the layers for keras.saving.load_model
    from keras_vit import layers
    from keras_vit.labels import decode_predictions, imagenet_class_names, imagenet_synsets
    from keras_vit.models import VARIANTS, VisionTransformer, ViTConfig, create_model, get_variant
    from keras_vit.weights import CheckpointError, from_pretrained, load_npz, load_weights, save_pretrained
else:  # `python -m keras_vit.weights`: the same names, imported on first use (keras_vit/_cli_mode.py says why)

    def __getattr__(name):
        return _cli_mode.lazy_attribute("keras_vit", name, __all__, _HOMES, "keras_vit.models")


# Where each public name lives, for the lazy path.
_HOMES = {
    "layers": "keras_vit.layers",
    **dict.fromkeys(("decode_predictions", "imagenet_class_names", "imagenet_synsets"), "keras_vit.labels"),
    **dict.fromkeys(
        ("CheckpointError", "from_pretrained", "load_npz", "load_weights", "save_pretrained"), "keras_vit.weights"
    ),
}
__version__ = "0.1.0"

__all__ = [
    "VARIANTS",
    "CheckpointError",
    "ViTConfig",
    "VisionTransformer",
    "create_model",
    "decode_predictions",
    "from_pretrained",
    "get_variant",
    "imagenet_class_names",
    "imagenet_synsets",
    "layers",
    "load_npz",
    "load_weights",
    "save_pretrained",
]
