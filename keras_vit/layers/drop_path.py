"""Stochastic depth: drops a residual branch for whole examples during training."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class DropPath(keras.layers.Layer):
    """Zeroes the residual branch of a random subset of examples (rate p) and scales the rest by 1 / (1 - p).

    Identity at inference and when `rate == 0`.
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= float(rate) < 1.0:
            raise ValueError(f"rate must be in [0, 1). Received: rate={rate}")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if self.rate else None
        self.built = True  # no weights: built as made, so model-wide walks (`model.quantize`) accept it

    def call(self, x, training=None):
        if not training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        mask = keras.random.uniform(shape, seed=self.seed_generator, dtype=x.dtype) < keep
        return x * ops.cast(mask, x.dtype) / keep

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config
