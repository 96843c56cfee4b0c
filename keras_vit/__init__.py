"""keras-vit: the Vision Transformer of "An Image is Worth 16x16 Words" for Keras 3.

```python
import keras_vit
model = keras_vit.create_model("B/16", image_size=224, num_classes=1000)
keras_vit.load_npz(model, "ViT-B_16.npz")
```
"""

# Before Keras imports TensorFlow: with tensorflow-tpu and no TPU, `import tensorflow` would hang
# (keras_vit/_tpu_runtime.py). `python -m keras_vit.inspect` comes through here first too.
from keras_vit import _tpu_runtime

_tpu_runtime.disable_libtpu_without_tpu()

from keras_vit import layers
from keras_vit.models import VARIANTS, VisionTransformer, ViTConfig, create_model, get_variant
from keras_vit.weights import CheckpointError, from_pretrained, load_npz, load_weights, save_pretrained

__version__ = "0.1.0"

__all__ = [
    "VARIANTS",
    "CheckpointError",
    "ViTConfig",
    "VisionTransformer",
    "create_model",
    "from_pretrained",
    "get_variant",
    "layers",
    "load_npz",
    "load_weights",
    "save_pretrained",
]
