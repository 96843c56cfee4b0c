"""Self-attention with the next generation's options: rotary queries and keys, per-projection biases, an inner norm."""

import keras
from keras import ops

from keras_vit.layers.attention import PROJECTIONS, MultiHeadSelfAttention
from keras_vit.layers.rms_norm import make_norm
from keras_vit.layers.rotary_embedding import LAYOUTS, rotate

PARTS = PROJECTIONS


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryAttention(MultiHeadSelfAttention):
    """`MultiHeadSelfAttention` whose queries and keys are rotated by a `RotaryEmbedding` table before the attention
    kernel (so the fused route stays), with a choice of which projections have a bias and an optional norm on the
    attended tokens before `out` (EVA-02 CLIP's `attn.norm`).

    Args:
        num_heads, dropout_rate, kernel_initializer, bias_initializer: as `MultiHeadSelfAttention`.
        biases: the projections with a bias, a subset of ("query", "key", "value", "out") (DINOv3 and EVA-02:
            no "key"; AIMv2: none).
        rope_layout: "half" or "interleaved": how `rotate` pairs the channels (the table's variant's layout).
        inner_norm: None, "layer" or "rms": a norm over the attended width before `out`.
        norm_epsilon: that norm's epsilon.

    Call arguments: as `MultiHeadSelfAttention`, plus `rope`: the (1, T, 2 * D_h) table, or None (no rotation).
    """

    def __init__(self, num_heads, biases=PARTS, rope_layout="half", inner_norm=None, norm_epsilon=1e-6, **kwargs):
        super().__init__(num_heads, **kwargs)
        unknown = set(biases) - set(PARTS)
        if unknown:
            raise ValueError(f"biases must be a subset of {PARTS}. Received: biases={tuple(biases)}")
        if rope_layout not in LAYOUTS:
            raise ValueError(f"rope_layout must be one of {LAYOUTS}. Received: rope_layout={rope_layout!r}")
        self.biases = tuple(p for p in PARTS if p in biases)
        self.rope_layout = rope_layout
        self.inner_norm = inner_norm
        self.norm_epsilon = float(norm_epsilon)
        self.norm = None
        if inner_norm is not None:
            self.norm = make_norm(inner_norm, self.norm_epsilon, name="norm", dtype=self.dtype_policy)

    def build(self, input_shape):
        super().build(input_shape)
        if self.norm is not None:
            self.norm.build((None, None, input_shape[-1]))

    def call(self, tokens, training=None, return_attention_scores=False, context=None, rope=None, key_mask=None):
        query, key, value = self.project(tokens, context, rope=rope)
        return self.attend(query, key, value, training, return_attention_scores, key_mask=key_mask)

    def project(self, tokens, context=None, rope=None):
        query, key, value = super().project(tokens, context)
        if rope is not None:
            query = rotate(query, rope, self.rope_layout)
            key = rotate(key, rope, self.rope_layout)
        return query, key, value

    def _before_out(self, attended):
        if self.norm is None:
            return attended
        shape = ops.shape(attended)
        flat = self.norm(ops.reshape(attended, (shape[0], shape[1], self.num_heads * self.head_dim)))
        return ops.reshape(flat, (shape[0], shape[1], self.num_heads, self.head_dim))

    def load_own_variables(self, store):
        keras.layers.Layer.load_own_variables(self, store)

    def get_config(self):
        config = super().get_config()
        config.update(
            biases=list(self.biases),
            rope_layout=self.rope_layout,
            inner_norm=self.inner_norm,
            norm_epsilon=self.norm_epsilon,
        )
        return config
