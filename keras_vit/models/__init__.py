"""Model configurations and the model builder."""

from keras_vit import _startup
from keras_vit.models.configs import VARIANTS, ViTConfig, get_variant

__all__ = ["VARIANTS", "ViTConfig", "VisionTransformer", "create_model", "get_variant"]


def _load():
    """Imports the model builder (and with it Keras)."""
    from keras_vit.models.vision_transformer import VisionTransformer, create_model

    globals().update(VisionTransformer=VisionTransformer, create_model=create_model)


# The configs need no Keras: a command line that parses first checks variant and option names without it.
if not _startup.parses_first():
    _load()


__getattr__ = _startup.deferred_getattr(__name__, ("VisionTransformer", "create_model"), _load)
