"""NaFlex batches for tf.data: images of any sizes and aspect ratios -> padded patch sequences, never squashed."""

import numpy as np
import tensorflow as tf

import keras_vit.images
from keras_vit.naflex_inputs import STYLES, naflex_image, target_size
from keras_vit.resample import resize_uint8

from ..augment import quantize
from .decoders import slice_window
from .preprocess import inception_box, randaugment_fn


def naflex_features(image, patch_size, max_num_patches, style="transformers"):
    """A uint8 (H, W, 3) image tensor of any size -> {"patches" (N, P*P*3), "mask" (N,), "grid" (2,)} of static
    shapes (`keras_vit.naflex_inputs.naflex_image`: resized within the budget, its aspect ratio kept)."""

    def make(pixels):
        return naflex_image(pixels, patch_size, max_num_patches, style)

    patches, mask, grid = tf.numpy_function(make, [image], (tf.float32, tf.int32, tf.int32), stateful=False)
    patches.set_shape((max_num_patches, patch_size * patch_size * 3))
    mask.set_shape((max_num_patches,))
    grid.set_shape((2,))
    return {"patches": patches, "mask": mask, "grid": grid}


def naflex_blank(patch_size, max_num_patches):
    """The inputs of a padding example: one zero patch (a 1x1 grid), so its masked attention has a key to attend
    to (an all-padding row would give NaN, which a zero weight does not cancel)."""
    return {
        "patches": tf.zeros((max_num_patches, patch_size * patch_size * 3)),
        "mask": tf.one_hot(0, max_num_patches, dtype=tf.int32),
        "grid": tf.ones((2,), tf.int32),
    }


def naflex_pixels(image, patch_size, max_num_patches, style="transformers"):
    """A uint8 (H, W, 3) image tensor -> uint8 at its NaFlex size (`keras_vit.naflex_inputs.target_size`, resized as
    `style` resizes), from which `naflex_features` only scales and cuts patches."""
    options = STYLES[style]

    def resize(pixels):
        height, width = target_size(pixels.shape[0], pixels.shape[1], patch_size, max_num_patches)
        return resize_uint8(pixels, height, width, options["method"], options["arithmetic"])

    resized = tf.numpy_function(resize, [image], tf.uint8, stateful=False)
    resized.set_shape((None, None, 3))
    return resized


def naflex_prepare_fn(source, config, patch_size):
    """(position, raw element) -> (NaFlex inputs, one-hot label) of a NaFlex run's training stream, seeded by the
    position as a fixed-size run's: with `augment="inception"` an Inception crop kept at its own aspect ratio (no
    squash: the crop is what is resized within the patch budget), `flip`, then RandAugment at the NaFlex size."""
    randaugment_image = randaugment_fn(config) if config.randaugment else None

    def prepare(index, element):
        raw, label = element
        seed = tf.stack([tf.cast(config.seed, tf.int64), index])
        seeds = tf.random.experimental.stateless_split(seed, 2)
        if config.augment == "inception":
            box = inception_box(config.crop_area, seeds[0])
            decode_window = source.decode_window
            image = decode_window(raw, box) if decode_window else slice_window(source.decode(raw), box)
        else:
            image = source.decode(raw)
        if config.flip:
            image = tf.image.stateless_random_flip_left_right(image, seeds[1])
        if randaugment_image:  # at the NaFlex size, from which `naflex_features` then only cuts patches
            image = naflex_pixels(image, patch_size, config.max_num_patches)
            image = tf.cast(quantize(randaugment_image(image, seed)), tf.uint8)
        return naflex_features(image, patch_size, config.max_num_patches), tf.one_hot(label, source.num_classes)

    return prepare


def naflex_example_fn(patch_size, max_num_patches, style="transformers", background=None):
    """A tf.data map function: (image path, label) -> ({"patches", "mask", "grid"}, label), each image resized
    to its own aspect ratio within the patch budget (`keras_vit.naflex_inputs.naflex_image`)."""
    read_options = {} if background is None else {"background": background}

    def read(path):
        return keras_vit.images.read_image(path.decode() if isinstance(path, bytes) else str(path), **read_options)

    def example(path, label):
        pixels = tf.numpy_function(read, [path], tf.uint8, stateful=False)
        return naflex_features(pixels, patch_size, max_num_patches, style), label

    return example


def naflex_dataset(
    paths, labels, num_classes, *, batch_size, patch_size, max_num_patches, style="transformers", seed=None
):
    """Batches ({"patches" (B, N, P*P*3), "mask" (B, N), "grid" (B, 2)}, one-hot labels (B, classes)) of an image
    folder's files (`training.data.list_image_folder`), shuffled with `seed` when given; every batch has the same
    shapes whatever the images' sizes, so a compiled step traces once."""
    labels = np.asarray(labels, np.int64)
    if len(paths) != len(labels) or not len(paths):
        raise ValueError(f"naflex_dataset needs one label per path. Received: {len(paths)} paths, {len(labels)} labels")
    ds = tf.data.Dataset.from_tensor_slices((list(paths), labels))
    if seed is not None:
        ds = ds.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    ds = ds.map(naflex_example_fn(patch_size, max_num_patches, style), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(lambda x, y: (x, tf.one_hot(y, num_classes)))
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
