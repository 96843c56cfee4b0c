"""Reduces the encoded token sequence to one vector per image."""

import keras
from keras import ops

POOLING_MODES = ("token", "gap", "distillation")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """ "token" takes the class token (position 0); "gap" averages the patch tokens (the valid ones, given a mask),
    never the prefix tokens;
    "distillation" takes DeiT's distillation token (position 1, after the class token).

    Args:
        mode: "token", "gap" or "distillation".
        num_prefix_tokens: tokens before the patch tokens (class, distillation and register tokens).
    """

    def __init__(self, mode="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        if mode not in POOLING_MODES:
            raise ValueError(f"pooling must be one of {POOLING_MODES}. Received: pooling={mode!r}")
        if mode == "token" and num_prefix_tokens < 1:
            raise ValueError("Token pooling needs a class token. Use class_token=True or pooling='gap'.")
        if mode == "distillation" and num_prefix_tokens < 2:
            raise ValueError("Distillation pooling needs a class and a distillation token (num_prefix_tokens >= 2).")
        self.mode = mode
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, tokens, valid=None):
        """`valid`: (B, N) nonzero on the real patch tokens (NaFlex padding aside), or None; "gap" averages those."""
        if self.mode == "token":
            # A (B, 1, D) slice and a reshape rather than `tokens[:, 0]`: the same values, but the converted
            # TFLite graph then has no shrink-axis STRIDED_SLICE, an op form the TFLite GPU delegate rejects.
            return ops.reshape(tokens[:, :1], (-1, tokens.shape[-1]))
        if self.mode == "distillation":
            return ops.reshape(tokens[:, 1:2], (-1, tokens.shape[-1]))
        patches = tokens[:, self.num_prefix_tokens :]
        if valid is None:
            return ops.mean(patches, axis=1)
        weights = ops.expand_dims(ops.cast(ops.not_equal(valid, 0), patches.dtype), -1)
        return ops.sum(patches * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(mode=self.mode, num_prefix_tokens=self.num_prefix_tokens)
        return config
