"""Multi-head self-attention: projections Keras can quantize and adapt, fused attention kernels where they exist."""

import math

import keras
from keras import ops

from keras_vit.layers import attention_kernel
from keras_vit.layers.deferred_init import build_deferred
from keras_vit.layers.initializers import independent

PROJECTIONS = ("query", "key", "value", "out")


@keras.saving.register_keras_serializable(package="keras_vit")
class HeadsAsMatrix(keras.initializers.Initializer):
    """`initializer` drawn on the (D, H * D_h) matrix a (D, H, D_h) or (H, D_h, D) kernel is, then reshaped.

    Fan-in/fan-out initialisers (Glorot, as the reference initialises Flax's DenseGeneral) must see the matrix:
    Keras' own fan rule would read the leading axes of a 3-D kernel as a convolution's receptive field.
    """

    def __init__(self, initializer, width):
        self.initializer = keras.initializers.get(initializer)
        self.width = int(width)

    def __call__(self, shape, dtype=None):
        matrix = (self.width, math.prod(shape) // self.width)
        if shape[0] != self.width:
            matrix = matrix[::-1]
        return ops.reshape(self.initializer(matrix, dtype=dtype), shape)

    def get_config(self):
        return {"initializer": keras.initializers.serialize(self.initializer), "width": self.width}


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head dot-product self-attention (paper, eq. 5-8 of appendix A).

    The four projections are `keras.layers.EinsumDense` layers named as in the checkpoints (`query`, `key`,
    `value`, `out`), whose kernels have the checkpoints' layout (`query|key|value` kernel (D, H, D_h), bias
    (H, D_h); `out` kernel (H, D_h, D), bias (D,)), so loading stays a copy, and Keras' own `model.quantize`,
    `enable_lora` and float8 training reach them. Tokens stay (B, T, H, D_h) throughout: no head transposes.

    The attention itself (`attention_kernel.attend`) goes through the backend's fused kernel
    (`keras.ops.dot_product_attention`: cuDNN flash attention on JAX GPUs, the Pallas splash kernel on TPUs,
    `scaled_dot_product_attention` on torch CUDA) where one exists and the call allows it, and through the
    explicit softmax(QK^T)V otherwise: on TensorFlow, on CPUs, with attention dropout in training and with
    `return_attention_scores`. `KERAS_VIT_FUSED_ATTENTION` (`auto`, `always`, `never`) overrides the choice.

    Args:
        num_heads: H.
        dropout_rate: dropout on the attention weights (training only).
        kernel_initializer, bias_initializer: initialisers (reference: Xavier uniform on the (D, H * D_h)
            matrix, zeros).

    Call arguments:
        tokens: (B, T, D).
        return_attention_scores: also return the softmax attention weights (B, H, T, T).
        context: (B, S, D) tokens to attend over instead of `tokens` (cross-attention: the queries come from
            `tokens`, keys and values from `context`; `MAPHead` uses it), or None.
        key_mask: (B, S), nonzero where a key is a real token, or None: the other keys (NaFlex padding) get a large
            negative bias added to their scores, so they take no weight.
    """

    biases = PROJECTIONS  # the projections with a bias (`RotaryAttention` chooses)

    def __init__(
        self,
        num_heads,
        dropout_rate=0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(num_heads) <= 0:
            raise ValueError(f"num_heads must be a positive integer. Received: num_heads={num_heads}")
        if not 0.0 <= float(dropout_rate) < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1). Received: dropout_rate={dropout_rate}")
        self.num_heads = int(num_heads)
        self.dropout_rate = float(dropout_rate)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

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

    def _inits(self, index, width):
        """The `index`-th projection's initialisers and dtype: its own draws (initializers.independent)."""
        return dict(
            kernel_initializer=HeadsAsMatrix(independent(self.kernel_initializer, index), width),
            bias_initializer=independent(self.bias_initializer, index),
            dtype=self.dtype_policy,
        )

    # The checkpoint's names for the projections' variables (what the weight loaders assign to).
    query_kernel = property(lambda self: self.query.kernel)
    query_bias = property(lambda self: self.query.bias)
    key_kernel = property(lambda self: self.key.kernel)
    key_bias = property(lambda self: self.key.bias)
    value_kernel = property(lambda self: self.value.kernel)
    value_bias = property(lambda self: self.value.bias)
    out_kernel = property(lambda self: self.out.kernel)
    out_bias = property(lambda self: self.out.bias)

    def call(self, tokens, training=None, return_attention_scores=False, context=None, key_mask=None):
        query, key, value = self.project(tokens, context)
        return self.attend(query, key, value, training, return_attention_scores, key_mask=key_mask)

    def project(self, tokens, context=None):
        """(Q scaled by 1/sqrt(D_h), K, V), each (B, T, H, D_h); keys and values from `context` when given."""
        context = tokens if context is None else context
        return self._scaled_query(tokens), self.key(context), self.value(context)

    def attend(self, query, key, value, training=None, return_attention_scores=False, recompute=False, key_mask=None):
        """The attention product and the `out` projection on projected tokens. `recompute` (explicit route, no
        attention dropout in training): the softmax weights are recomputed from the scores in the backward pass
        instead of kept (`EncoderBlock(remat="elementwise")` asks for it). `key_mask`: as in `call`."""
        dropout = self.dropout if training and self.dropout_rate else None
        bias = None if key_mask is None else attention_kernel.key_bias(key_mask, query.dtype)
        if return_attention_scores or dropout is not None or not attention_kernel.use_fused(query):
            recompute = recompute and dropout is None and not return_attention_scores
            attended, weights = attention_kernel.explicit(query, key, value, 1.0, dropout, training, recompute, bias)
        else:
            attended, weights = attention_kernel.fused(query, key, value, 1.0, bias=bias), None
        output = self.out(self._before_out(attended))
        if return_attention_scores:
            return output, weights
        return output

    def _before_out(self, attended):
        """The attended (B, T, H, D_h) tokens as `out` takes them (a subclass may normalise them first)."""
        return attended

    def _scaled_query(self, tokens):
        """Q / sqrt(D_h). A plain float projection takes the scale into its kernel and bias (D * H * D_h values, and
        no separate multiply in an exported graph, where a full-int8 TFLite file would quantize one more tensor);
        a quantized or LoRA projection runs as Keras made it and its output is scaled."""
        scale = 1.0 / math.sqrt(self.head_dim)
        layer = self.query
        if layer.quantization_mode is not None or getattr(layer, "lora_enabled", False):
            return layer(tokens) * scale
        query = ops.einsum("btd,dhk->bthk", tokens, ops.cast(layer.kernel, layer.compute_dtype) * scale)
        return query if layer.bias is None else query + ops.cast(layer.bias, layer.compute_dtype) * scale

    def load_own_variables(self, store):
        """Files of keras-vit before the projections were layers hold the eight variables here, in this order."""
        if len(store.keys()) == 2 * len(PROJECTIONS):
            for i, name in enumerate(PROJECTIONS):
                layer = getattr(self, name)
                layer.kernel.assign(store[str(2 * i)])
                layer.bias.assign(store[str(2 * i + 1)])
                _skip_next_load(layer)
            return
        super().load_own_variables(store)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            dropout_rate=self.dropout_rate,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config


def _skip_next_load(layer):
    """Keras offers each projection a store of its own next, empty in such a file: take nothing from it, once.

    An instance attribute rather than a subclass: Keras quantizes an `EinsumDense` only when its type is exactly
    `EinsumDense`.
    """

    def load_nothing(store):
        del layer.__dict__["load_own_variables"]

    layer.__dict__["load_own_variables"] = load_nothing
