"""Keras 3 layers of the Vision Transformer; every layer is registered for `.keras` saving."""

# Keras before any layer module: importing Keras registers keras_vit's classes (keras_vit/__init__.py), the model's
# among them, which needs every layer module whole, not one half-run at its own `import keras`.
import keras  # noqa: F401

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.map_head import MAPHead
from keras_vit.layers.mlp import MlpBlock
from keras_vit.layers.naflex_position_embedding import NaFlexPositionEmbedding
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import PositionEmbedding, resize_position_embedding, sincos_2d_table
from keras_vit.layers.register_tokens import RegisterTokens
from keras_vit.layers.resnet import ResidualUnit, ResNetStage, StdConv2D
from keras_vit.layers.rms_norm import RMSNorm
from keras_vit.layers.rotary_attention import RotaryAttention
from keras_vit.layers.rotary_embedding import RotaryEmbedding, rotate
from keras_vit.layers.swiglu import SwiGLU
from keras_vit.layers.token_split import TokenSplit

__all__ = [
    "ClassToken",
    "DropPath",
    "EncoderBlock",
    "LayerNorm",
    "LayerScale",
    "MAPHead",
    "MlpBlock",
    "MultiHeadSelfAttention",
    "NaFlexPositionEmbedding",
    "PatchEmbedding",
    "PositionEmbedding",
    "RMSNorm",
    "RegisterTokens",
    "ResNetStage",
    "ResidualUnit",
    "RotaryAttention",
    "RotaryEmbedding",
    "StdConv2D",
    "SwiGLU",
    "TokenPooling",
    "TokenSplit",
    "resize_position_embedding",
    "rotate",
    "sincos_2d_table",
]
