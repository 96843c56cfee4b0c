"""The project's input contract, in one place: uint8 RGB pixels -> bilinear resize to the model's input size ->
`(x - 127.5) / 127.5`, so that model inputs lie in [-1, 1] as the released checkpoints expect."""

import numpy as np

PIXEL_CENTER = 127.5
PIXEL_SCALE = 127.5


def scale_pixels(pixels):
    """Pixel values in 0..255 (uint8 or float, any shape) -> float32 numpy array in [-1, 1]."""
    return (np.asarray(pixels, np.float32) - PIXEL_CENTER) / PIXEL_SCALE
