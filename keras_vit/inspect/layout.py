"""What the inspection tools need to know about a model: its token layout, read from the layers themselves."""

import dataclasses

import numpy as np

from keras_vit.preprocessing import scale_pixels

_REQUIRED_LAYERS = ("embedding", "posembed_input", "encoderblock_0")


@dataclasses.dataclass(frozen=True)
class TokenLayout:
    """The token layout of a Vision Transformer.

    Attributes:
        num_layers: encoder blocks.
        num_heads: attention heads per block.
        num_prefix_tokens: tokens before the patch tokens (class, distillation and register tokens).
        grid_size: (gh, gw), the patch grid.
        image_size: (H, W) of the input in pixels.
        channels: input channels.
        pixels_per_token: (py, px), the pixels one token covers (patch size, times the ResNet's output stride
            for a hybrid).
    """

    num_layers: int
    num_heads: int
    num_prefix_tokens: int
    grid_size: tuple
    image_size: tuple
    channels: int
    pixels_per_token: tuple

    @property
    def num_tokens(self):
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]


def token_layout(model):
    """Reads the `TokenLayout` of a model built by `keras_vit.create_model` (or loaded from its `.keras` file).

    Raises:
        ValueError: the model is not a keras_vit Vision Transformer.
    """
    names = {layer.name for layer in getattr(model, "layers", [])}
    missing = [name for name in _REQUIRED_LAYERS if name not in names]
    if missing:
        raise ValueError(
            f"Model {getattr(model, 'name', model)!r} is not a keras_vit Vision Transformer: it has no "
            f"{', '.join(repr(m) for m in missing)} layer(s). The inspection tools need a model made by "
            f"keras_vit.create_model (or a .keras file saved from one)."
        )
    num_layers = 0
    while f"encoderblock_{num_layers}" in names:
        num_layers += 1
    posemb = model.get_layer("posembed_input")
    grid = tuple(int(g) for g in posemb.grid_size)
    _, height, width, channels = model.input_shape
    config = getattr(model, "config", None)
    if (height is None or width is None) and getattr(config, "dynamic_image_size", False):
        height, width = config.image_size  # inspected on the grid its position embeddings are stored for
    if height is None or width is None:
        raise ValueError(f"The model's input size must be fixed; received input_shape={model.input_shape}.")
    return TokenLayout(
        num_layers=num_layers,
        num_heads=int(model.get_layer("encoderblock_0").num_heads),
        # Every token before the patch tokens (class, distillation, registers), not only the position table's rows.
        num_prefix_tokens=int(getattr(config, "num_prefix_tokens", posemb.num_prefix_tokens)),
        grid_size=grid,
        image_size=(int(height), int(width)),
        channels=int(channels),
        pixels_per_token=(height // grid[0], width // grid[1]),
    )


def check_images(images, layout):
    """Returns `images` as float32 (B, H, W, C) in [-1, 1], or raises a clear error.

    uint8 images are scaled with the project's preprocessing, (x - 127.5) / 127.5; a single image (H, W, C)
    gets a batch axis. Float images must already be scaled to [-1, 1].
    """
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[None]
    expected = (*layout.image_size, layout.channels)
    if images.ndim != 4 or tuple(images.shape[1:]) != expected:
        raise ValueError(
            f"Images must be shaped (batch, {expected[0]}, {expected[1]}, {expected[2]}) for this model; received "
            f"shape {images.shape}. Resize them to {expected[0]}x{expected[1]} with {expected[2]} channel(s) "
            f"first (bilinear), or build the model for their size."
        )
    if images.shape[0] == 0:
        raise ValueError("Received an empty batch of images; pass at least one image.")
    if images.dtype == np.uint8:
        return scale_pixels(images)
    if not np.issubdtype(images.dtype, np.floating):
        raise ValueError(f"Images must be uint8 or float scaled to [-1, 1]; received dtype {images.dtype}.")
    images = images.astype(np.float32)
    if not np.all(np.isfinite(images)):
        raise ValueError("Images contain NaN or Inf values.")
    low, high = float(images.min()), float(images.max())
    if low < -1.01 or high > 1.01:
        raise ValueError(
            f"Float images must be scaled to [-1, 1] (x = (x - 127.5) / 127.5 for uint8 pixels); received values "
            f"in [{low:.3g}, {high:.3g}]."
        )
    return images
