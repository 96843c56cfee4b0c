"""NaFlex batches for tf.data: images of any sizes and aspect ratios -> padded patch sequences, never squashed."""

import numpy as np
import tensorflow as tf

import keras_vit.images
from keras_vit.naflex_inputs import naflex_image


def naflex_example_fn(patch_size, max_num_patches, style="transformers", background=None):
    """A tf.data map function: (image path, label) -> ({"patches", "mask", "grid"}, label), each image resized
    to its own aspect ratio within the patch budget (`keras_vit.naflex_inputs.naflex_image`)."""
    width = patch_size * patch_size * 3
    read_options = {} if background is None else {"background": background}

    def make(path):
        pixels = keras_vit.images.read_image(path.decode() if isinstance(path, bytes) else str(path), **read_options)
        return naflex_image(pixels, patch_size, max_num_patches, style)

    def example(path, label):
        patches, mask, grid = tf.numpy_function(make, [path], (tf.float32, tf.int32, tf.int32), stateful=False)
        patches.set_shape((max_num_patches, width))
        mask.set_shape((max_num_patches,))
        grid.set_shape((2,))
        return {"patches": patches, "mask": mask, "grid": grid}, label

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
