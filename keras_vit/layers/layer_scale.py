"""LayerScale: a learned per-channel gain on a residual branch (CaiT, DeiT-III, DINOv2)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerScale(keras.layers.Layer):
    """Multiplies the last axis by a learned vector `scale` (D,), initialised to `init_value` (Touvron et al. 2021).

    timm calls it `ls1.gamma` / `ls2.gamma` (`init_values`), transformers' Dinov2 `layer_scale1.lambda1`.

    Args:
        init_value: the initial gain of every channel (timm: 1e-5 for DINOv2, 1e-6 for DeiT-III's larger models).
    """

    def __init__(self, init_value=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.scale = self.add_weight(
            name="scale", shape=(input_shape[-1],), initializer=keras.initializers.Constant(self.init_value)
        )

    def call(self, x):
        return x * ops.cast(self.scale, x.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(init_value=self.init_value)
        return config
