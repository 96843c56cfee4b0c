"""NaFlex inputs in numpy: images of any size -> padded patch rows, their validity mask and patch grids."""

import math

import numpy as np

from keras_vit.resample import resize_uint8

# How each library resizes and scales before patchifying (the rest of the pipeline is the same in both):
# transformers' `Siglip2ImageProcessor` (torchvision backend): bilinear on the uint8 tensor, then
# (x - 255 mean) / (255 std); timm's NaFlex eval transform: Pillow bicubic, `ToTensor` (x / 255), `Normalize`.
STYLES = {
    "transformers": dict(method="bilinear", arithmetic="torchvision", scale_first=False),
    "timm": dict(method="bicubic", arithmetic="pil", scale_first=True),
}


def target_size(height, width, patch_size, max_num_patches, eps=1e-5):
    """(H', W'): the largest size with the aspect ratio kept, both sides multiples of `patch_size` (at least one
    patch), and at most `max_num_patches` patches; the bisection on the scale that transformers'
    `get_image_size_for_max_num_patches` and timm's `get_image_size_for_seq` run, so the sizes are theirs."""

    def scaled(scale, size):
        return int(max(patch_size, math.ceil(size * scale / patch_size) * patch_size))

    low, high = eps / 10, 100.0
    while high - low >= eps:
        mid = (low + high) / 2
        if (scaled(mid, height) // patch_size) * (scaled(mid, width) // patch_size) <= max_num_patches:
            low = mid
        else:
            high = mid
    return scaled(low, height), scaled(low, width)


def patchify(image, patch_size):
    """(H, W, C) -> (H/P * W/P, P * P * C): patches in row-major order, each flattened in (ph, pw, C) order."""
    h, w, c = image.shape
    rows, cols = h // patch_size, w // patch_size
    patches = image[: rows * patch_size, : cols * patch_size].reshape(rows, patch_size, cols, patch_size, c)
    return patches.transpose(0, 2, 1, 3, 4).reshape(rows * cols, patch_size * patch_size * c)


def naflex_image(pixels, patch_size=16, max_num_patches=256, style="transformers", mean=0.5, std=0.5):
    """One uint8 (H, W, 3) image -> (patches (max_num_patches, P*P*3) float32, mask (N,) int32, grid (2,) int32).

    Resized to `target_size`, scaled by `mean`/`std` (per channel or one value, on 0..1 pixels), cut into patches
    and zero-padded to `max_num_patches` rows; `mask` is 1 on the image's rows, `grid` its (rows, columns).
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {sorted(STYLES)}. Received: style={style!r}")
    pixels = np.asarray(pixels)
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[-1] != 3:
        raise ValueError(
            f"NaFlex inputs are made from uint8 (H, W, 3) RGB images. Received: dtype={pixels.dtype}, "
            f"shape={pixels.shape}; read files with keras_vit.images.read_image."
        )
    options = STYLES[style]
    height, width = target_size(pixels.shape[0], pixels.shape[1], patch_size, max_num_patches)
    resized = resize_uint8(pixels, height, width, options["method"], options["arithmetic"])
    mean = np.asarray(mean, np.float32)
    std = np.asarray(std, np.float32)
    if options["scale_first"]:
        scaled = (resized.astype(np.float32) / np.float32(255.0) - mean) / std
    else:
        scaled = (resized.astype(np.float32) - mean * np.float32(255.0)) / (std * np.float32(255.0))
    rows = patchify(scaled.astype(np.float32), patch_size)
    count = rows.shape[0]
    patches = np.zeros((max_num_patches, rows.shape[1]), np.float32)
    patches[:count] = rows
    mask = (np.arange(max_num_patches) < count).astype(np.int32)
    return patches, mask, np.array([height // patch_size, width // patch_size], np.int32)


def naflex_batch(images, patch_size=16, max_num_patches=256, style="transformers", mean=0.5, std=0.5):
    """A list of uint8 (H, W, 3) images of any sizes -> {"patches" (B, N, P*P*3), "mask" (B, N), "grid" (B, 2)},
    the NaFlex model's inputs (`naflex_image` on each; N = `max_num_patches`)."""
    made = [naflex_image(p, patch_size, max_num_patches, style, mean, std) for p in images]
    if not made:
        raise ValueError("naflex_batch needs at least one image. Received: an empty list.")
    return {name: np.stack(parts) for name, parts in zip(("patches", "mask", "grid"), zip(*made))}
