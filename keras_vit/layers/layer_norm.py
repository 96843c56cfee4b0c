"""LayerNorm written as the ops that full-integer TFLite can quantise."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerNorm(keras.layers.Layer):
    """Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta.

    Same maths and weight names (`gamma`, `beta`) as `keras.layers.LayerNormalization(axis=-1)`, written as
    mean, subtract, multiply, rsqrt: every op has an int8 TFLite kernel. Keras' own layer folds the mean into
    a `-mean * inv` term whose NEG op has none, so the converter wraps each LayerNorm of a full-int8 model in
    a float island (QUANTIZE/DEQUANTIZE). Under a bfloat16/float16 policy the statistics are computed in
    float32, as Keras does.

    Args:
        epsilon: added to the variance (1e-6 in the reference code).
    """

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        if not float(epsilon) > 0:
            raise ValueError(f"epsilon must be > 0. Received: epsilon={epsilon}")
        self.epsilon = float(epsilon)
        self.autocast = False  # as Keras' LayerNormalization: float32 weights and statistics under mixed policies

    def build(self, input_shape):
        width = (input_shape[-1],)
        self.gamma = self.add_weight(name="gamma", shape=width, initializer="ones", autocast=False)
        self.beta = self.add_weight(name="beta", shape=width, initializer="zeros", autocast=False)

    def call(self, x):
        if keras.backend.standardize_dtype(x.dtype) in ("float16", "bfloat16"):
            x = ops.cast(x, "float32")
        centred = x - ops.mean(x, axis=-1, keepdims=True)
        variance = ops.mean(centred * centred, axis=-1, keepdims=True)
        y = centred * ops.rsqrt(variance + self.epsilon)
        y = y * ops.cast(self.gamma, y.dtype) + ops.cast(self.beta, y.dtype)
        return ops.cast(y, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(epsilon=self.epsilon)
        return config
