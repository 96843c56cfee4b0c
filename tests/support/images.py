"""Image folders the data tests read: random pixels, one folder per class."""

import os

import numpy as np


def image_folder(root, classes=("cat", "dog"), per_class=4, size=10):
    """`per_class` random `size` px images (PNG and JPEG by turns) in one folder per class under `root`."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in classes:
        os.makedirs(root / name, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.{'png' if i % 2 else 'jpg'}")
    return root


MIXED_SIZES = ((24, 80), (64, 40), (40, 40), (30, 90), (90, 30), (50, 50))  # (height, width): wide, tall, square


def mixed_aspect_folder(root, classes=("cat", "dog"), sizes=MIXED_SIZES):
    """One PNG per (height, width) of `sizes` (wide, tall and square) in one folder per class under `root`; each
    class tints its own channel, so that a few steps can learn it."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, name in enumerate(classes):
        os.makedirs(root / name, exist_ok=True)
        for i, (height, width) in enumerate(sizes):
            pixels = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
            pixels[..., c % 3] = 220
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root
