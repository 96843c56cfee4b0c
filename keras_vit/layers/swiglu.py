"""The SwiGLU MLP, Dense_1(silu(gate(x)) * up(x)), with EVA-02's optional norm before the last projection."""

import keras
from keras import ops

from keras_vit.layers.deferred_init import build_deferred
from keras_vit.layers.rms_norm import make_norm


@keras.saving.register_keras_serializable(package="keras_vit")
class SwiGLU(keras.layers.Layer):
    """Gated MLP: `gate` and `up` (D -> M), SiLU on the gate, product, optional `norm` (sub-LN), `Dense_1` (M -> D).

    timm's split `mlp.fc1_g` / `mlp.fc1_x` are `gate` / `up`; its packed `mlp.fc1` [2M, D] holds the gate first;
    transformers' `gate_proj` / `up_proj` / `down_proj` are `gate` / `up` / `Dense_1`.

    Args:
        mlp_dim: hidden width M.
        use_bias: biases on the three projections (AIMv2 has none).
        norm: None, "layer" or "rms": a norm over the hidden width before `Dense_1` (timm's `scale_mlp`).
        norm_epsilon: that norm's epsilon.
        dropout_rate: dropout after the product and after `Dense_1` (training only).
    """

    def __init__(self, mlp_dim, use_bias=True, norm=None, norm_epsilon=1e-6, dropout_rate=0.0, **kwargs):
        super().__init__(**kwargs)
        self.mlp_dim = int(mlp_dim)
        self.use_bias = bool(use_bias)
        self.norm_kind = norm
        self.norm_epsilon = float(norm_epsilon)
        self.dropout_rate = float(dropout_rate)
        policy = self.dtype_policy
        self.gate = keras.layers.Dense(self.mlp_dim, use_bias=self.use_bias, name="gate", **self._inits())
        self.up = keras.layers.Dense(self.mlp_dim, use_bias=self.use_bias, name="up", **self._inits())
        self.norm = None if norm is None else make_norm(norm, self.norm_epsilon, name="norm", dtype=policy)
        self.dense_1 = None
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=policy)

    def _inits(self):
        return dict(kernel_initializer="glorot_uniform", bias_initializer="zeros", dtype=self.dtype_policy)

    def build(self, input_shape):
        build_deferred(self.gate, input_shape)
        build_deferred(self.up, input_shape)
        hidden = (*input_shape[:-1], self.mlp_dim)
        if self.norm is not None:
            self.norm.build(hidden)
        self.dense_1 = keras.layers.Dense(input_shape[-1], use_bias=self.use_bias, name="Dense_1", **self._inits())
        build_deferred(self.dense_1, hidden)

    def call(self, x, training=None):
        hidden = ops.silu(self.gate(x)) * self.up(x)
        hidden = self.dropout(hidden, training=training)
        if self.norm is not None:
            hidden = self.norm(hidden)
        return self.dropout(self.dense_1(hidden), training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            mlp_dim=self.mlp_dim,
            use_bias=self.use_bias,
            norm=self.norm_kind,
            norm_epsilon=self.norm_epsilon,
            dropout_rate=self.dropout_rate,
        )
        return config
