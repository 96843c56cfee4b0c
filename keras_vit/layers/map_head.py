"""Multi-head attention pooling (MAP): a learned query attends over the tokens (big_vision, SigLIP)."""

import keras
from keras import ops

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.mlp import MlpBlock


@keras.saving.register_keras_serializable(package="keras_vit")
class MAPHead(keras.layers.Layer):
    """y = MHA(probe, tokens); out = y + MLP(LN(y)): one vector per image from every token.

    big_vision's `MAPHead` (its sub-layer names: `probe`, `MultiHeadDotProductAttention_0`, `LayerNorm_0`,
    `MlpBlock_0`), timm's `AttentionPoolLatent` (`global_pool='map'`) and transformers'
    `SiglipMultiheadAttentionPoolingHead` compute this with one latent query.

    Args:
        num_heads: attention heads.
        mlp_dim: MLP hidden width.
        gelu: the MLP's activation ("tanh", "exact" or "quick").
        layer_norm_epsilon: the LayerNorm's epsilon.

    Input `(B, T, D)`, and optionally `key_mask` (B, T), nonzero on real tokens (NaFlex padding takes no
    weight); output `(B, D)`.
    """

    def __init__(self, num_heads, mlp_dim, gelu="tanh", layer_norm_epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.gelu = gelu
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        policy = self.dtype_policy
        self.attention = MultiHeadSelfAttention(self.num_heads, name="MultiHeadDotProductAttention_0", dtype=policy)
        self.norm = LayerNorm(self.layer_norm_epsilon, name="LayerNorm_0", dtype=policy)
        self.mlp = MlpBlock(self.mlp_dim, gelu=gelu, name="MlpBlock_0", dtype=policy)

    def build(self, input_shape):
        width = input_shape[-1]
        self.probe = self.add_weight(name="probe", shape=(1, 1, width), initializer="glorot_uniform")
        for layer in (self.attention, self.norm, self.mlp):
            layer.build((None, 1, width))

    def call(self, tokens, key_mask=None):
        batch = ops.shape(tokens)[0]
        probe = ops.broadcast_to(ops.cast(self.probe, tokens.dtype), (batch, 1, tokens.shape[-1]))
        x = self.attention(probe, context=tokens, key_mask=key_mask)
        x = x + self.mlp(self.norm(x))
        return ops.reshape(x, (-1, tokens.shape[-1]))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            gelu=self.gelu,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config
