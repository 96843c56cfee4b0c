"""NaFlex batches from a folder of mixed-aspect images: each image keeps its aspect ratio, the batches have one
shape, and a NaFlex model trains on them with `fit`."""

import os
import types

import keras
import numpy as np
import pytest
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


@pytest.mark.slow
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


def _stream_element(image, **options):
    """The NaFlex training stream's element for `image` at position 5 (`training.data.naflex_prepare_fn`)."""
    import tensorflow as tf

    from training import TrainConfig
    from training.data.naflex import naflex_prepare_fn

    source = types.SimpleNamespace(decode=lambda raw: raw, decode_window=None, num_classes=3)
    config = TrainConfig(dataset="synthetic", naflex=True, max_num_patches=16, seed=3, **options)
    inputs, label = naflex_prepare_fn(source, config, 8)(tf.constant(5, tf.int64), (tf.constant(image), 1))
    return {k: v.numpy() for k, v in inputs.items()}, label.numpy()


def test_a_training_element_is_its_crop_at_its_own_aspect_flipped_then_randaugmented():
    """An Inception crop is patched at the crop's own aspect ratio (not squashed to the run's square), flipped, and
    RandAugment runs on the pixels at the NaFlex size: the element is `naflex_image` of exactly that."""
    import tensorflow as tf

    from training.augment import quantize, randaugment
    from training.data.preprocess import inception_box

    image = np.random.default_rng(2).integers(0, 256, (60, 150, 3), dtype=np.uint8)
    options = dict(augment="inception", crop_area=(0.1, 0.4), flip=True, randaugment=(2, 10))
    inputs, label = _stream_element(image, **options)
    seed = tf.constant([3, 5], tf.int64)
    begin, size = inception_box((0.1, 0.4), tf.random.experimental.stateless_split(seed, 2)[0])(tf.shape(image))
    (top, left), (height, width) = begin.numpy()[:2], size.numpy()[:2]
    crop = image[top : top + height, left : left + width]
    assert crop.shape[:2] != image.shape[:2]  # a crop, not the whole image
    flipped = tf.image.stateless_random_flip_left_right(crop, tf.random.experimental.stateless_split(seed, 2)[1])
    assert not np.array_equal(flipped.numpy(), crop)  # flipped at this position
    resized = naflex_image(flipped.numpy(), 8, 16)  # the grid of the crop's own aspect ratio
    np.testing.assert_array_equal(inputs["grid"], resized[2])
    rows, cols = resized[2]
    pixels = np.round(resized[0][: rows * cols].reshape(rows, cols, 8, 8, 3) * 127.5 + 127.5)  # back to uint8
    pixels = pixels.transpose(0, 2, 1, 3, 4).reshape(rows * 8, cols * 8, 3).astype(np.uint8)
    augmented = randaugment(tf.constant(pixels, tf.float32), 2, 10, tf.random.experimental.stateless_fold_in(seed, 1))
    expected = naflex_image(tf.cast(quantize(augmented), tf.uint8).numpy(), 8, 16)
    np.testing.assert_array_equal(inputs["patches"], expected[0])
    np.testing.assert_array_equal(inputs["mask"], expected[1])
    assert not np.array_equal(inputs["patches"], resized[0])  # RandAugment changed the pixels
    np.testing.assert_array_equal(label, np.eye(3)[1])
    # Without augmentation, the whole image, patched as everywhere else.
    plain, _ = _stream_element(image, augment="resize", flip=False)
    for got, want in zip((plain["patches"], plain["mask"], plain["grid"]), naflex_image(image, 8, 16)):
        np.testing.assert_array_equal(got, want)


def test_a_shift_augmentation_is_refused_for_naflex_in_one_line():
    import pytest

    from training import TrainConfig
    from training.data.pipeline import train_dataset

    config = TrainConfig(dataset="synthetic", naflex=True, max_num_patches=16, augment="translate")
    with pytest.raises(ValueError, match=r"^augment='translate' shifts images .*augment='inception'.* with naflex\.$"):
        train_dataset(None, config)
