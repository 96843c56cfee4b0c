"""The project's preprocessing contract, in one place: uint8 RGB -> bilinear resize -> (x - 127.5) / 127.5."""

import numpy as np

from keras_vit.preprocessing import PIXEL_CENTER, PIXEL_SCALE, scale_pixels

from .errors import ExportError


def describe(image_size):
    """The preprocessing constants recorded next to every artifact."""
    return {
        "input": "uint8 RGB, channels last",
        "resize": {"method": "bilinear", "size": [int(image_size[0]), int(image_size[1])],
                   "half_pixel_centers": True, "antialias": False},
        "scale": f"x = (x - {PIXEL_CENTER}) / {PIXEL_SCALE}",
        "center": PIXEL_CENTER,
        "divisor": PIXEL_SCALE,
        "range": [-1.0, 1.0],
    }  # fmt: skip


def check_images(images):
    """Checks raw images are uint8 (N, H, W, 3) or a list of uint8 (H, W, 3); returns a list of arrays."""
    if isinstance(images, np.ndarray):
        if images.ndim == 3:
            images = images[None]
        if images.ndim != 4:
            raise ExportError(
                f"Expected uint8 RGB images shaped (N, H, W, 3) or (H, W, 3). Received shape {images.shape}."
            )
        images = list(images)
    out = []
    for i, image in enumerate(images):
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[-1] != 3:
            raise ExportError(f"Image {i} must be shaped (H, W, 3) RGB. Received shape {image.shape}.")
        if image.dtype != np.uint8:
            raise ExportError(
                f"Image {i} must hold raw uint8 pixels (0..255). Received dtype {image.dtype}; "
                "convert with np.clip(x, 0, 255).astype('uint8') if it holds pixel values."
            )
        out.append(image)
    return out


def resize_pixels(images, image_size):
    """Raw uint8 images -> float32 (N, H, W, 3) pixel values (0..255) at `image_size`, resized with
    `tf.image.resize` (bilinear, half-pixel centres, no antialias); images already at that size pass unchanged."""
    import tensorflow as tf

    images = check_images(images)
    height, width = image_size
    batch = []
    for image in images:
        x = tf.constant(image, tf.float32)
        if tuple(image.shape[:2]) != (height, width):
            x = tf.image.resize(x, (height, width), method="bilinear")
        batch.append(x.numpy())
    return np.stack(batch)


def app_pixels(images, image_size):
    """What an app feeds: uint8 pixels at the model's size (images of another size resized here, as the app's own
    resize would; MediaPipe's resize differs from tf.image.resize, see docs/mobile.md)."""
    return np.clip(np.round(resize_pixels(images, image_size)), 0, 255).astype(np.uint8)


def model_space_in_graph(images, image_size):
    """Inside a TensorFlow graph (the SavedModels' `serving_default`): a uint8 batch (N, any H, any W, 3) ->
    float32 model-space images at `image_size`, by the same bilinear `tf.image.resize` and scaling as
    `to_model_space`."""
    import tensorflow as tf

    x = tf.image.resize(tf.cast(images, tf.float32), image_size, method="bilinear")
    return (x - PIXEL_CENTER) / PIXEL_SCALE


def to_model_space(images, image_size):
    """Resizes raw uint8 images to `image_size` and scales them to [-1, 1]: the model's float32 input.

    Uses `tf.image.resize` (bilinear, half-pixel centres, no antialias), the same op the SavedModel's
    serving signature runs, so both paths see identical tensors.
    """
    return scale_pixels(resize_pixels(images, image_size))
