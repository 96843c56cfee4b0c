"""Model configurations and the model builder."""

from keras_vit import _lazy

# The configs need no Keras: a command line checks variant and option names without it.
__all__, __getattr__, __dir__ = _lazy.lazy_names(
    __name__,
    {
        "VARIANTS": "keras_vit.models.configs",
        "ViTConfig": "keras_vit.models.configs",
        "get_variant": "keras_vit.models.configs",
        "VisionTransformer": "keras_vit.models.vision_transformer",
        "create_model": "keras_vit.models.vision_transformer",
        "NaFlexViT": "keras_vit.models.naflex",
    },
)
