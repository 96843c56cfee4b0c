"""The learnable class token prepended to the patch tokens."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepends one learned token (`cls`, shape (1, 1, D), zero-initialised as in the paper) to every sequence.

    Input `(B, N, D)`; output `(B, N + 1, D)`.
    """

    def __init__(self, initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        self.cls = self.add_weight(name="cls", shape=(1, 1, input_shape[-1]), initializer=self.initializer)

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        cls = ops.broadcast_to(ops.cast(self.cls, tokens.dtype), (batch, 1, tokens.shape[-1]))
        return ops.concatenate([cls, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        b, n, d = input_shape
        return (b, None if n is None else n + 1, d)

    def get_config(self):
        config = super().get_config()
        config.update(initializer=keras.initializers.serialize(self.initializer))
        return config
