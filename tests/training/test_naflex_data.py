"""NaFlex batches from a folder of mixed-aspect images: each image keeps its aspect ratio, the batches have one
shape, and a NaFlex model trains on them with `fit`."""

import os

import keras
import numpy as np
from PIL import Image

from keras_vit.models.naflex import NaFlexViT
from keras_vit.naflex_inputs import naflex_image
from training.data import list_image_folder
from training.data.naflex import naflex_dataset

SIZES = {"wide": [(24, 80), (30, 90)], "tall": [(64, 40), (81, 20)], "square": [(40, 40), (33, 33)]}


def _folder(root):
    rng = np.random.default_rng(0)
    for name, sizes in SIZES.items():
        os.makedirs(root / name)
        for i, (h, w) in enumerate(sizes):
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / name / f"{i}.png")
    return list_image_folder(str(root))


def test_each_image_keeps_its_aspect_and_batches_have_one_shape(tmp_path):
    paths, labels, names = _folder(tmp_path)
    ds = naflex_dataset(paths, labels, len(names), batch_size=3, patch_size=8, max_num_patches=16)
    batches = list(ds.as_numpy_iterator())
    assert [b[0]["patches"].shape for b in batches] == [(3, 16, 192), (3, 16, 192)]
    grids = np.concatenate([b[0]["grid"] for b in batches])
    assert len({tuple(g) for g in grids}) >= 3  # wide, tall and square grids side by side, none squashed
    for path, (inputs, _) in zip(paths, (({k: b[0][k][i] for k in b[0]}, None) for b in batches for i in range(3))):
        pixels = np.asarray(Image.open(path).convert("RGB"))
        patches, mask, grid = naflex_image(pixels, 8, 16)
        np.testing.assert_array_equal(inputs["patches"], patches)
        np.testing.assert_array_equal(inputs["grid"], grid)
        np.testing.assert_array_equal(inputs["mask"], mask)


def test_a_naflex_model_fits_on_them(tmp_path):
    paths, labels, names = _folder(tmp_path)
    ds = naflex_dataset(paths, labels, len(names), batch_size=3, patch_size=8, max_num_patches=16, seed=1)
    model = NaFlexViT(
        max_num_patches=16, patch_size=8, position_grid=(4, 4), hidden_size=16, num_layers=1, num_heads=2,
        mlp_dim=32, num_classes=len(names),
    )  # fmt: skip
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
