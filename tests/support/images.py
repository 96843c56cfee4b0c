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
