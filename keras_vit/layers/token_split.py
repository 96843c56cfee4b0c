"""Splits an encoder's token sequence into its patch tokens (a sequence or an NHWC map) and its prefix tokens."""

import keras
from keras import ops

OUTPUT_FORMS = ("tokens", "NHWC")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenSplit(keras.layers.Layer):
    """(batch, prefix + patches, width) in; the patch tokens out, and with `return_prefix` the prefix tokens too.

    Args:
        num_prefix_tokens: tokens before the patch tokens (the class token, and register or distillation tokens).
        output: "tokens" gives the patch tokens as (batch, patches, width); "NHWC" as (batch, gh, gw, width),
            patches in row-major order as the patch embedding emits them.
        grid_size: (gh, gw), the patch grid; needed for "NHWC" unless `patch_stride` is set.
        patch_stride: (sh, sw) pixels per patch; set, `call(tokens, images)` reads the grid from the images' height
            and width (a model built with `dynamic_image_size=True`).
        return_prefix: also return the prefix tokens, (batch, num_prefix_tokens, width): `call` then returns the
            pair (patches, prefix).
    """

    def __init__(
        self, num_prefix_tokens=1, output="tokens", grid_size=None, patch_stride=None, return_prefix=False, **kwargs
    ):
        super().__init__(**kwargs)
        if output not in OUTPUT_FORMS:
            raise ValueError(f"output must be one of {OUTPUT_FORMS}. Received: output={output!r}")
        if not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
            raise ValueError(f"num_prefix_tokens must be an integer >= 0. Received: {num_prefix_tokens!r}")
        if output == "NHWC" and grid_size is None and patch_stride is None:
            raise ValueError("output='NHWC' needs grid_size=(gh, gw), or patch_stride with the images passed to call.")
        self.num_prefix_tokens = num_prefix_tokens
        self.output_form = output
        self.grid_size = None if grid_size is None else tuple(int(g) for g in grid_size)
        self.patch_stride = None if patch_stride is None else tuple(int(s) for s in patch_stride)
        self.return_prefix = bool(return_prefix)

    def call(self, tokens, images=None):
        p = self.num_prefix_tokens
        patches = tokens[:, p:]
        if self.output_form == "NHWC":
            gh, gw = self._grid(images)
            patches = ops.reshape(patches, (-1, gh, gw, tokens.shape[-1]))
        if self.return_prefix:
            return patches, tokens[:, :p]
        return patches

    def _grid(self, images):
        if self.patch_stride is None or images is None:
            return self.grid_size
        shape = ops.shape(images)
        return shape[1] // self.patch_stride[0], shape[2] // self.patch_stride[1]

    def compute_output_shape(self, input_shape):
        # Declared rather than traced: with a grid read from the images, a symbolic trace sees no sizes.
        b, n, d = input_shape
        p = self.num_prefix_tokens
        if self.output_form == "NHWC":
            grid = (None, None) if self.patch_stride is not None else self.grid_size
            patches = (b, *grid, d)
        else:
            patches = (b, None if n is None else n - p, d)
        return (patches, (b, p, d)) if self.return_prefix else patches

    def get_config(self):
        config = super().get_config()
        config.update(
            num_prefix_tokens=self.num_prefix_tokens,
            output=self.output_form,
            grid_size=None if self.grid_size is None else list(self.grid_size),
            patch_stride=None if self.patch_stride is None else list(self.patch_stride),
            return_prefix=self.return_prefix,
        )
        return config
