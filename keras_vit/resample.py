"""Antialiased uint8 image resizing in numpy, rounded as Pillow or torchvision round it (separable, fixed point)."""

import math

import numpy as np

FILTERS = ("bilinear", "bicubic")
ARITHMETICS = ("pil", "torchvision")


def _triangle(x):
    return np.maximum(0.0, 1.0 - np.abs(x))


def _cubic(x, a=-0.5):
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


_KERNELS = {"bilinear": (_triangle, 1.0), "bicubic": (_cubic, 2.0)}


def resample_weights(n_in, n_out, method="bilinear"):
    """[(first input index, float64 weights)] per output sample: the antialiased kernel both libraries use.

    Each output pixel i is centred at (i + 0.5) * n_in / n_out in input coordinates; when shrinking the kernel is
    widened by the scale (antialiasing); taps outside [0, n_in) are dropped and the rest renormalised.
    """
    kernel, support = _KERNELS[method]
    scale = n_in / n_out
    widen = max(scale, 1.0)
    support *= widen
    rows = []
    for i in range(n_out):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        w = kernel((np.arange(lo, hi) - center + 0.5) / widen)
        total = w.sum()
        rows.append((lo, w / total if total != 0 else w))
    return rows


def _fixed_point(rows, arithmetic):
    """The weights as integers and their precision in bits: Pillow's 22 bits, or torchvision's largest int16 scale."""
    if arithmetic == "pil":
        bits = 22  # 32 - 8 - 2 (Pillow's PRECISION_BITS for 8-bit images)
    else:  # the precision grows until the largest weight would overflow int16
        largest = max(float(w.max()) for _, w in rows)
        bits = 0
        while bits < 22 and int(0.5 + largest * (1 << (bits + 1))) < (1 << 15):
            bits += 1
    scaled = [(lo, w * (1 << bits)) for lo, w in rows]
    return [(lo, np.where(s < 0, np.trunc(s - 0.5), np.trunc(s + 0.5)).astype(np.int64)) for lo, s in scaled], bits


def _pass(image, axis, n_out, method, arithmetic):
    rows, bits = _fixed_point(resample_weights(image.shape[axis], n_out, method), arithmetic)
    source = np.moveaxis(image.astype(np.int64), axis, 0)
    out = np.stack([np.tensordot(w, source[lo : lo + len(w)], axes=(0, 0)) for lo, w in rows])
    out = np.clip((out + (1 << (bits - 1))) >> bits, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def resize_uint8(image, height, width, method="bilinear", arithmetic="torchvision"):
    """uint8 (H, W, C) -> uint8 (height, width, C), antialiased, rows resampled first and then columns.

    Args:
        image: uint8 array (H, W, C) or (H, W).
        height, width: the output size.
        method: "bilinear" (triangle kernel) or "bicubic" (Keys a = -0.5).
        arithmetic: "torchvision" (`torchvision.transforms.functional.resize` on a uint8 tensor, antialias=True:
            int16 weights) or "pil" (`PIL.Image.resize`: 22-bit weights). Both round to uint8 between the passes.
    """
    if method not in FILTERS:
        raise ValueError(f"method must be one of {FILTERS}. Received: method={method!r}")
    if arithmetic not in ARITHMETICS:
        raise ValueError(f"arithmetic must be one of {ARITHMETICS}. Received: arithmetic={arithmetic!r}")
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim not in (2, 3) or min(image.shape[:2]) < 1:
        raise ValueError(
            f"resize_uint8 takes a uint8 (H, W, C) image. Received: dtype={image.dtype}, shape={image.shape}"
        )
    if height < 1 or width < 1 or not (math.isfinite(height) and math.isfinite(width)):
        raise ValueError(f"The output size must be positive. Received: height={height}, width={width}")
    if image.shape[1] != width:
        image = _pass(image, 1, int(width), method, arithmetic)
    if image.shape[0] != height:
        image = _pass(image, 0, int(height), method, arithmetic)
    return image
