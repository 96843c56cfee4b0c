"""The project's input contract, in one place: uint8 RGB pixels -> bilinear resize to the model's input size ->
`(x - 127.5) / 127.5`, so that model inputs lie in [-1, 1] as the released checkpoints expect."""

import warnings

import numpy as np

PIXEL_CENTER = 127.5
PIXEL_SCALE = 127.5


def scale_pixels(pixels):
    """Pixel values in 0..255 (uint8 or float, any shape) -> float32 numpy array in [-1, 1]."""
    return (np.asarray(pixels, np.float32) - PIXEL_CENTER) / PIXEL_SCALE


# The model's input range, and a margin for float rounding of (x - 127.5) / 127.5 and of resizing.
MODEL_RANGE = (-1.0, 1.0)
_RANGE_MARGIN = 1e-3


def check_model_range(images, where="the model", stacklevel=1):
    """Warns when model-space images lie outside [-1, 1]; returns the warning text, or None when they fit.

    The model itself does not check: it is traced into graphs (XLA, SavedModel, TFLite) where a value check
    would cost a reduction in every call and a Python warning cannot run. The numpy entry points that feed it
    (export's runners, hence `export.predict`-style calls and the export verification) call this instead.
    `stacklevel` 1 attributes the warning to this function's caller, 2 to the caller's caller, and so on.
    """
    x = np.asarray(images)
    if x.size == 0 or x.dtype.kind != "f":
        return None
    low, high = float(np.nanmin(x)), float(np.nanmax(x))
    if low >= MODEL_RANGE[0] - _RANGE_MARGIN and high <= MODEL_RANGE[1] + _RANGE_MARGIN:
        return None
    hint = (
        " They look like raw pixels in 0..255: scale them with (x - 127.5) / 127.5 "
        "(keras_vit.preprocessing.scale_pixels)."
        if low >= 0 and high > 1.5
        else " Scale them to [-1, 1] as in training: (x - 127.5) / 127.5 for 0..255 pixels, x * 2 - 1 for 0..1."
    )
    message = (
        f"{where} expects images in [-1, 1] but received values in [{low:.4g}, {high:.4g}]; its outputs "
        f"will be meaningless.{hint}"
    )
    warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)
    return message
