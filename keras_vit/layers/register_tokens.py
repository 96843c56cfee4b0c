"""Register tokens: extra learned tokens with no position embedding (Darcet et al. 2023)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class RegisterTokens(keras.layers.Layer):
    """Inserts `num_tokens` learned tokens (`tokens`, shape (1, R, D)) after the first `insert_at` tokens.

    Added after the position embedding, so the registers have none of their own ("Vision Transformers Need
    Registers"; timm `reg_token`, transformers `Dinov2WithRegistersModel`). With a class token, `insert_at=1`
    gives timm's and transformers' order: class token, registers, patch tokens.

    Input `(B, N, D)`; output `(B, N + R, D)`.
    """

    def __init__(self, num_tokens, insert_at=1, initializer=None, **kwargs):
        super().__init__(**kwargs)
        if int(num_tokens) <= 0:
            raise ValueError(f"num_tokens must be a positive integer. Received: num_tokens={num_tokens}")
        self.num_tokens = int(num_tokens)
        self.insert_at = int(insert_at)
        # Not zeros: identical registers would get identical gradients and never become different.
        self.initializer = keras.initializers.get(initializer or keras.initializers.RandomNormal(stddev=0.02))

    def build(self, input_shape):
        self.tokens = self.add_weight(
            name="tokens", shape=(1, self.num_tokens, input_shape[-1]), initializer=self.initializer
        )

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        registers = ops.broadcast_to(ops.cast(self.tokens, tokens.dtype), (batch, self.num_tokens, tokens.shape[-1]))
        parts = (
            [tokens[:, : self.insert_at], registers, tokens[:, self.insert_at :]]
            if self.insert_at
            else [
                registers,
                tokens,
            ]
        )
        return ops.concatenate(parts, axis=1)

    def compute_output_shape(self, input_shape):
        b, n, d = input_shape
        return (b, None if n is None else n + self.num_tokens, d)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_tokens=self.num_tokens,
            insert_at=self.insert_at,
            initializer=keras.initializers.serialize(self.initializer),
        )
        return config
