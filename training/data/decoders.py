"""Image decoders of the sources: encoded bytes (TFDS), files through Pillow (folders), and JPEG windows."""

import numpy as np
import tensorflow as tf

import keras_vit.images

# libjpeg's accurate integer IDCT: the pixels Pillow (`keras_vit.images`, what predict reads) decodes. TensorFlow's
# default ("INTEGER_FAST") differs from them by up to 4 levels.
JPEG_DCT = "INTEGER_ACCURATE"
# Rows/columns decoded around a JPEG window: chroma upsampling at the window's edges needs its neighbours, and
# without them edge pixels differ by up to 9 levels from the full decode's (MCUs are at most 16 pixels wide).
JPEG_WINDOW_MARGIN = 16


def decode_encoded(raw):
    image = tf.cond(
        tf.io.is_jpeg(raw),
        lambda: tf.io.decode_jpeg(raw, channels=3, dct_method=JPEG_DCT),
        lambda: tf.io.decode_image(raw, channels=3, expand_animations=False),
    )
    image.set_shape([None, None, 3])
    return image


def _jpeg_window(data, box):
    """The window `box` picks of JPEG bytes, decoding only that window and a margin around it (the reference's
    decode-and-crop, with the full decode's pixels)."""
    shape = tf.io.extract_jpeg_shape(data, output_type=tf.int32)
    begin, size = box(shape)
    start = tf.maximum(begin[:2] - JPEG_WINDOW_MARGIN, 0)
    stop = tf.minimum(begin[:2] + size[:2] + JPEG_WINDOW_MARGIN, shape[:2])
    window = tf.io.decode_and_crop_jpeg(data, tf.concat([start, stop - start], 0), channels=3, dct_method=JPEG_DCT)
    return tf.slice(window, tf.concat([begin[:2] - start, [0]], 0), tf.concat([size[:2], [3]], 0))


def slice_window(image, box):
    begin, size = box(tf.shape(image))
    return tf.slice(image, begin, size)


def window_encoded(raw, box):
    """`Source.decode_window` for encoded images (TFDS): JPEGs through `_jpeg_window`, others in full."""
    image = tf.cond(
        tf.io.is_jpeg(raw),
        lambda: _jpeg_window(raw, box),
        lambda: slice_window(tf.io.decode_image(raw, channels=3, expand_animations=False), box),
    )
    image.set_shape([None, None, 3])
    return image


def path_window_decoder(background, pillow_jpegs, max_bytes=None):
    """`Source.decode_window` for image folders (raw: a path).

    The file is read by `keras_vit.images.read_file`, the scan's reader (`_file_reader`): a file replaced since
    the scan by a FIFO, a device or one over `max_bytes` fails in one line, never blocks or fills the memory.
    A JPEG goes through `_jpeg_window` unless the folder scan found that Pillow reads it differently
    (`keras_vit.images.plain_jpeg`: an EXIF orientation, CMYK, ...); those and every other format are decoded by
    `keras_vit.images.decode_image`, as `decode` does, and sliced.
    """
    decode = _bytes_decoder(background)
    read = _file_reader(max_bytes)
    table = None
    if pillow_jpegs:
        keys = tf.constant(sorted(pillow_jpegs))
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, tf.ones_like(keys, tf.bool)),
                                          default_value=False)  # fmt: skip

    def decode_window(path, box):
        data = read(path)
        fast = tf.io.is_jpeg(data)
        if table is not None:
            fast = tf.logical_and(fast, tf.logical_not(table.lookup(path)))
        image = tf.cond(fast, lambda: _jpeg_window(data, box), lambda: slice_window(decode(data, path), box))
        image.set_shape([None, None, 3])
        return image

    return decode_window


def _file_reader(max_bytes=None):
    """path tensor -> the file's bytes (a tf.string scalar), read by `keras_vit.images.read_file`: regular files
    only, at most `max_bytes` (tf.io.read_file would open a FIFO and block, and read any size whole)."""

    def read(path):
        # An object array: numpy's fixed-width bytes type would drop the data's trailing NUL bytes.
        return np.array(keras_vit.images.read_file(_path_text(path), max_bytes), dtype=object)

    def read_tensor(path):
        data = tf.numpy_function(read, [path], tf.string, stateful=False, name="read_file")
        data.set_shape([])
        return data

    return read_tensor


def _item(value):
    """A tf.numpy_function argument as Python: bytes arrive as 0-d arrays in a graph, as bytes/str eagerly."""
    return value.item() if isinstance(value, np.ndarray) else value


def _path_text(path):
    path = _item(path)
    return path.decode("utf-8") if isinstance(path, bytes) else str(path)


def _bytes_decoder(background):
    """(bytes, path) tensors -> uint8 (H, W, 3) by `keras_vit.images.decode_image` (errors name the path)."""

    def read(data, path):
        return keras_vit.images.decode_image(_item(data), background=background, name=_path_text(path))

    def decode(data, path):
        image = tf.numpy_function(read, [data, path], tf.uint8, stateful=False, name="decode_image")
        image.set_shape([None, None, 3])
        return image

    return decode


def path_decoder(background, max_bytes=None):
    """path tensor -> uint8 (H, W, 3), decoded by `keras_vit.images.read_image`: the pixels predict sees.

    tf.io.decode_image would be faster but reads fewer formats (no TIFF; it sniffs the content, so a TIFF
    named .jpg fails mid-epoch), ignores EXIF orientation and drops alpha. Pillow decodes outside the GIL, so
    the parallel map still decodes several files at once; the result depends on the path only, so the stream
    stays a pure function of (seed, step).
    """

    def read(path):
        return keras_vit.images.read_image(_path_text(path), background=background, max_bytes=max_bytes)

    def decode(path):
        image = tf.numpy_function(read, [path], tf.uint8, stateful=False, name="read_image")
        image.set_shape([None, None, 3])
        return image

    return decode
