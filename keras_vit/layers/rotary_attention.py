"""Self-attention with the next generation's options: rotary queries and keys, per-projection biases, an inner norm."""

import math

import keras
from keras import ops

from keras_vit.layers import attention_kernel
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.deferred_init import build_deferred
from keras_vit.layers.rms_norm import make_norm
from keras_vit.layers.rotary_embedding import LAYOUTS, rotate

PARTS = ("query", "key", "value", "out")


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
        width = input_shape[-1]
        if width % self.num_heads:
            raise ValueError(
                f"The token width must be divisible by num_heads. Received: width={width}, num_heads={self.num_heads}"
            )
        self.head_dim = width // self.num_heads
        heads = (self.num_heads, self.head_dim)
        for index, name in enumerate(("query", "key", "value")):
            layer = keras.layers.EinsumDense(
                "btd,dhk->bthk", output_shape=(None, *heads), bias_axes="hk" if name in self.biases else None,
                name=name, **self._inits(index, width),
            )  # fmt: skip
            build_deferred(layer, (None, None, width))
            setattr(self, name, layer)
        self.out = keras.layers.EinsumDense(
            "bthk,hkd->btd", output_shape=(None, width), bias_axes="d" if "out" in self.biases else None, name="out",
            **self._inits(3, width),
        )  # fmt: skip
        build_deferred(self.out, (None, None, *heads))
        if self.norm is not None:
            self.norm.build((None, None, width))

    def call(self, tokens, training=None, return_attention_scores=False, context=None, rope=None, key_mask=None):
        query, key, value = self.project(tokens, context, rope=rope)
        return self.attend(query, key, value, training, return_attention_scores, key_mask=key_mask)

    def project(self, tokens, context=None, rope=None):
        query, key, value = super().project(tokens, context)
        if rope is not None:
            query = rotate(query, rope, self.rope_layout)
            key = rotate(key, rope, self.rope_layout)
        return query, key, value

    def attend(self, query, key, value, training=None, return_attention_scores=False, recompute=False, key_mask=None):
        dropout = self.dropout if training and self.dropout_rate else None
        bias = None if key_mask is None else attention_kernel.key_bias(key_mask, query.dtype)
        if return_attention_scores or dropout is not None or not attention_kernel.use_fused(query):
            recompute = recompute and dropout is None and not return_attention_scores
            attended, weights = attention_kernel.explicit(query, key, value, 1.0, dropout, training, recompute, bias)
        else:
            attended, weights = attention_kernel.fused(query, key, value, 1.0, bias=bias), None
        if self.norm is not None:
            shape = ops.shape(attended)
            flat = self.norm(ops.reshape(attended, (shape[0], shape[1], self.num_heads * self.head_dim)))
            attended = ops.reshape(flat, (shape[0], shape[1], self.num_heads, self.head_dim))
        output = self.out(attended)
        return (output, weights) if return_attention_scores else output

    def _scaled_query(self, tokens):
        layer = self.query
        if layer.bias is not None:
            return super()._scaled_query(tokens)
        scale = 1.0 / math.sqrt(self.head_dim)
        if layer.quantization_mode is not None or getattr(layer, "lora_enabled", False):
            return layer(tokens) * scale
        return ops.einsum("btd,dhk->bthk", tokens, ops.cast(layer.kernel, layer.compute_dtype) * scale)

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
