"""Patch embedding: a Conv2D with kernel = stride = patch size, flattened to tokens."""

import keras
from keras import ops

from keras_vit.layers.deferred_init import add_weight


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbedding(keras.layers.Layer):
    """Splits an image (or a CNN feature map) into P x P patches and projects each to `hidden_size`.

    Equivalent to flattening each patch and applying a shared linear map E (paper, eq. 1); written as a
    VALID convolution with kernel = stride = P, whose kernel has the checkpoint's HWIO layout
    (`embedding/kernel`, `embedding/bias`).

    Args:
        hidden_size: token width D.
        patch_size: P, an int or (ph, pw). Use 1 on a hybrid model's feature map.
        kernel_initializer, bias_initializer: initialisers (Flax defaults: LeCun normal, zeros).
        use_bias: add a bias (`embedding/bias`); CLIP's image towers have none.

    Input `(B, H, W, C)`; output `(B, (H / ph) * (W / pw), D)`. H and W must be multiples of the patch size.
    """

    def __init__(
        self,
        hidden_size,
        patch_size,
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        use_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        patch_size = _pair(patch_size, "patch_size")
        if int(hidden_size) <= 0:
            raise ValueError(f"hidden_size must be a positive integer. Received: hidden_size={hidden_size}")
        self.hidden_size = int(hidden_size)
        self.patch_size = patch_size
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.use_bias = bool(use_bias)

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(
                f"PatchEmbedding expects images shaped (batch, height, width, channels). "
                f"Received input_shape={tuple(input_shape)}"
            )
        _, height, width, channels = input_shape
        ph, pw = self.patch_size
        for size, p, what in ((height, ph, "height"), (width, pw, "width")):
            if size is not None and size % p:
                raise ValueError(
                    f"The patch size must divide the image {what}. Received: image {what}={size}, "
                    f"patch_size={p}. Use an image size that is a multiple of {p} "
                    f"(e.g. {max(p, size // p * p)} or {(size // p + 1) * p})."
                )
        self.kernel = add_weight(
            self,
            name="kernel",
            shape=(ph, pw, channels, self.hidden_size),
            initializer=self.kernel_initializer,
        )
        self.bias = None
        if self.use_bias:
            self.bias = add_weight(self, name="bias", shape=(self.hidden_size,), initializer=self.bias_initializer)

    def call(self, images):
        x = ops.conv(images, self.kernel, strides=self.patch_size, padding="valid")
        if self.bias is not None:
            x = x + self.bias
        _, gh, gw, d = x.shape
        if gh is None or gw is None:  # an image size known only at run time (dynamic_image_size)
            return ops.reshape(x, (ops.shape(x)[0], -1, d))
        return ops.reshape(x, (-1, gh * gw, d))

    def compute_output_shape(self, input_shape):
        b, h, w, _ = input_shape
        if h is None or w is None:
            return (b, None, self.hidden_size)
        return (b, (h // self.patch_size[0]) * (w // self.patch_size[1]), self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size,
            patch_size=list(self.patch_size),
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        if not self.use_bias:  # absent when on, as in models saved before the option existed
            config["use_bias"] = False
        return config


def _pair(value, name):
    """Returns `value` as a tuple of two positive ints; accepts an int or a pair."""
    if isinstance(value, int):
        value = (value, value)
    value = tuple(int(v) for v in value)
    if len(value) != 2 or min(value) <= 0:
        raise ValueError(f"{name} must be a positive int or a pair of them. Received: {name}={value}")
    return value
