"""Pre-processing and augmentation: the pixel contract (uint8 RGB, bilinear resize, `(x - 127.5) / 127.5`), held-out
resizes, crops, shifts and Mixup; every random op stateless, seeded by the element's position in the stream."""

import numpy as np
import tensorflow as tf

from keras_vit.preprocessing import PIXEL_CENTER, PIXEL_SCALE

from ..augment import quantize, randaugment
from .decoders import slice_window


def scale(image):
    """uint8 (or float 0..255) -> float32 in [-1, 1], the project's contract."""
    return (tf.cast(image, tf.float32) - PIXEL_CENTER) / PIXEL_SCALE


def resize(image, size):
    return tf.image.resize(tf.cast(image, tf.float32), (size, size), method="bilinear")


def resize_small_central_crop(image, small, size):
    """big_vision's `resize_small(small)|central_crop(size)`: the shorter side resized to `small` (area
    interpolation, aspect ratio kept, stored as uint8 again), then the central `size` x `size` crop."""
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    new_shape = tf.cast(tf.round(shape * (float(small) / tf.reduce_min(shape))), tf.int32)
    image = tf.floor(
        tf.clip_by_value(tf.image.resize(tf.cast(image, tf.float32), new_shape, method="area"), 0.0, 255.0)
    )
    top, left = (new_shape[0] - size) // 2, (new_shape[1] - size) // 2
    return tf.slice(image, [top, left, 0], [size, size, 3])


def eval_pixels(image, size, resize_small=None):
    """Held-out pre-processing before scaling: a squash resize to `size` (the paper's), or with `resize_small` set
    big_vision's shorter-side resize and central crop (`TrainConfig.eval_resize_small`); float32 0..255."""
    image = resize_small_central_crop(image, resize_small, size) if resize_small else resize(image, size)
    return tf.ensure_shape(image, [size, size, 3])


def eval_preprocess(image, size, resize_small=None):
    """`eval_pixels` scaled to [-1, 1]."""
    return scale(eval_pixels(image, size, resize_small))


def inception_box(area, seed):
    """shape (H, W, C) -> (begin, size) of an Inception crop: a function of the image's shape and `seed` only, so
    decoding the window alone (`Source.decode_window`) and slicing the decoded image pick the same pixels."""

    def box(shape):
        begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.concat([shape[:2], [3]], 0),  # a grey JPEG's header says 1 channel; it is decoded as 3
            bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
            seed=seed,
            area_range=area,
            aspect_ratio_range=(3 / 4, 4 / 3),
            min_object_covered=0.0,  # any crop; the reference's inception_crop does the same
            use_image_if_no_bounding_boxes=True,
        )
        return begin, crop_size

    return box


def _inception_crop(image, size, area, seed, decode_window=None):
    """Inception crop of `image` resized to `size`; with `decode_window`, `image` is the raw element it decodes."""
    box = inception_box(area, seed)
    window = decode_window(image, box) if decode_window is not None else slice_window(image, box)
    return resize(window, size)


def _translate(image, size, max_shift, seed):
    """Random shift by up to `max_shift` pixels (of the model's input), padding with black (-1 after scaling)."""
    pad = int(np.ceil(max_shift))
    image = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
    offset = tf.random.stateless_uniform([2], seed, -max_shift, max_shift)
    offset = tf.cast(tf.round(offset), tf.int32) + pad
    return tf.slice(image, [offset[0], offset[1], 0], [size, size, 3])


def augment_fn(config, original_size=None):
    """(uint8 image, stateless seed) -> the training image per `config.augment`, float32 0..255 at
    `config.image_size`."""
    size = config.image_size

    def augment(image, seed, decode_window=None):
        """`image`: a uint8 image; or, with `decode_window` (`Source.decode_window`, Inception crops only), the raw
        element, of which only the crop window is decoded."""
        seeds = tf.random.experimental.stateless_split(seed, 2)
        if config.augment == "inception":
            image = _inception_crop(image, size, config.crop_area, seeds[0], decode_window)
        else:
            image = resize(image, size)
        if config.augment == "translate" and config.translate > 0:
            factor = size / original_size if original_size else 1.0
            image = _translate(image, size, config.translate * factor, seeds[0])
        if config.flip and config.augment == "inception":
            image = tf.image.stateless_random_flip_left_right(image, seeds[1])
        return tf.ensure_shape(image, [size, size, 3])  # static shapes for XLA/TPU; still 0..255 for RandAugment

    return augment


def randaugment_fn(config):
    """(image of values 0..255, the element's stateless seed) -> `config.randaugment` applied, float32 of integral
    values 0..255; Translate and Cutout scaled to `config.image_size` with `config.randaugment_scale_pixels`."""
    num_layers, magnitude = config.randaugment
    pixel_scale = config.image_size / 224.0 if config.randaugment_scale_pixels else 1.0

    def augment(image, seed):
        # Per image, on the uint8-valued crop, as big_vision's `...|flip_lr|randaug(2,10)|value_range(-1, 1)`.
        seed = tf.random.experimental.stateless_fold_in(seed, 1)
        return randaugment(quantize(tf.cast(image, tf.float32)), num_layers, magnitude, seed, pixel_scale)

    return augment


def mixup_weights(alpha, num_images, seed):
    """Mixing weights of one batch: a symmetric Dirichlet(alpha) draw (Beta(alpha, alpha) for two images), largest
    first.

    This is big_vision's `mixup(p=alpha, n=num_images)`: `p` is the concentration, not a probability, and every
    batch is mixed. Sorting keeps each image the dominant one of its mix (with a small alpha the draw is nearly
    one-hot, and unsorted it would as often replace the image by its partner). Drawn as normalised Gamma(alpha)
    variables in float64: with alpha = 0.2 a float32 Gamma draw underflows to 0 often enough to matter.
    """
    gammas = tf.random.stateless_gamma([num_images], seed, alpha=tf.constant(alpha, tf.float64), dtype=tf.float64)
    total = tf.reduce_sum(gammas)
    weights = tf.where(total > 0, gammas / tf.maximum(total, 1e-300), tf.one_hot(0, num_images, dtype=tf.float64))
    return tf.cast(tf.sort(weights, direction="DESCENDING"), tf.float32)


def mix_rows(batch, weights):
    """sum_i weights[i] * (the batch rolled by i rows): Mixup of a batch with its rolled copies."""
    return tf.add_n([weights[i] * tf.roll(batch, i, axis=0) for i in range(weights.shape[0])])


def mixup(images, labels, alpha, seed, num_images=2):
    """Mixes a batch with its copies rolled by 1..num_images-1 places, images and labels with the same weights."""
    weights = mixup_weights(alpha, num_images, seed)
    return mix_rows(images, weights), mix_rows(labels, weights)
