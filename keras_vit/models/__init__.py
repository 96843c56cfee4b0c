"""Model configurations and the model builder."""

from keras_vit.models.configs import VARIANTS, ViTConfig, get_variant
from keras_vit.models.vision_transformer import VisionTransformer, create_model

__all__ = ["VARIANTS", "ViTConfig", "VisionTransformer", "create_model", "get_variant"]
