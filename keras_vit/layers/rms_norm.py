"""RMSNorm: x / sqrt(mean(x^2) + eps) * gamma, no centring and no bias (AIMv2)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class RMSNorm(keras.layers.Layer):
    """Root-mean-square normalisation over the last axis with a learned gain `gamma` (no bias).

    Statistics in float32 under a bfloat16/float16 policy, as `LayerNorm` here.

    Args:
        epsilon: added to the mean square (1e-5 in AIMv2).
    """

    def __init__(self, epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        if not float(epsilon) > 0:
            raise ValueError(f"epsilon must be > 0. Received: epsilon={epsilon}")
        self.epsilon = float(epsilon)
        self.autocast = False

    def build(self, input_shape):
        self.gamma = self.add_weight(name="gamma", shape=(input_shape[-1],), initializer="ones", autocast=False)

    def call(self, x):
        if keras.backend.standardize_dtype(x.dtype) in ("float16", "bfloat16"):
            x = ops.cast(x, "float32")
        y = x * ops.rsqrt(ops.mean(x * x, axis=-1, keepdims=True) + self.epsilon)
        return ops.cast(y * ops.cast(self.gamma, y.dtype), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(epsilon=self.epsilon)
        return config


def make_norm(kind, epsilon, **kwargs):
    """A `LayerNorm` ("layer") or an `RMSNorm` ("rms")."""
    from keras_vit.layers.layer_norm import LayerNorm

    if kind not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}. Received: norm={kind!r}")
    return (LayerNorm if kind == "layer" else RMSNorm)(epsilon, **kwargs)


NORMS = ("layer", "rms")
