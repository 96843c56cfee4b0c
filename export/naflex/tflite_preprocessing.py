"""`naflex_preprocessing.tflite`: a builtin-ops TFLite graph that turns one uint8 RGB image of any size into a NaFlex
model's batch-1 inputs (patches, mask, grid) with `keras_vit.naflex_inputs.naflex_image`'s arithmetic, in integers."""

import numpy as np

from keras_vit.naflex_inputs import STYLES

from ..errors import ExportError
from ..tflite.flatbuffer import non_builtin_ops, read_ops

NAME = "naflex_preprocessing.tflite"
OUTPUTS = ("patches", "mask", "grid")
# target_size bisects the scale on [1e-6, 100] until the interval is under 1e-5: always 24 halvings, so its answer
# is the last of the 2**24 + 1 evenly spaced points that fits. The points in millionths: 1 + j (10**8 - 1) / 2**24.
_STEPS = 24
_MICRO = 10**6
_FRACTION_BITS = 23  # the weights' quotients are taken to 23 bits, then shifted to the pass's precision (<= 22)


def _tf():
    import tensorflow as tf

    return tf


def _floor_div(num, den):
    """floor(num / den) of int64 tensors (den > 0, |quotient| < 2**31), exactly: a float32 estimate corrected twice
    by its int64 remainder (TFLite has no int64 division)."""
    tf = _tf()

    def quotient(a):
        return tf.cast(tf.floor(tf.cast(a, tf.float32) / tf.cast(den, tf.float32)), tf.int64)

    q = quotient(num)
    q += quotient(num - q * den)  # the first estimate is off by at most |quotient| * 2**-22
    rest = num - q * den
    return q - tf.cast(rest < 0, tf.int64) + tf.cast(rest >= den, tf.int64)


def _point_index(k, n, patch_size):
    """The index j of the last bisection point at or below the scale k * P / n (k, n int64 tensors)."""
    num = (k * patch_size * _MICRO - n) * 2**_STEPS
    return _floor_div(num, n * (100 * _MICRO - 1))


def target_grid(height, width, patch_size, max_num_patches):
    """(rows, columns) int32 of `keras_vit.naflex_inputs.target_size(height, width) // patch_size`, for int32 scalar
    tensors, in integer arithmetic: the scales where a side gains a patch are k P / height and k P / width; the
    largest of those that fits bounds the bisection, whose last point there gives each side its patch count."""
    tf = _tf()
    n = max_num_patches
    k32 = tf.range(1, n + 1, dtype=tf.int32)
    k = tf.cast(k32, tf.int64)
    h64, w64 = tf.cast(height, tf.int64), tf.cast(width, tf.int64)
    rows_steps, cols_steps = _point_index(k, h64, patch_size), _point_index(k, w64, patch_size)
    # At scale k P / height the image has k rows and ceil(k width / height) columns; likewise for the columns.
    fits_rows = (width * k32 + height - 1) // height <= n // k32  # k * columns <= n, without overflowing int32
    fits_cols = (height * k32 + width - 1) // width <= n // k32
    none = tf.constant(-1, tf.int64)
    last = tf.maximum(
        tf.reduce_max(tf.where(fits_rows, rows_steps, none)), tf.reduce_max(tf.where(fits_cols, cols_steps, none))
    )
    last = tf.minimum(last, 2**_STEPS - 1)  # the bisection never reaches its upper end, 100

    def count(steps):  # the smallest k whose breakpoint is at or above the chosen point: ceil(side * scale / P)
        return 1 + tf.reduce_sum(tf.cast(steps < last, tf.int32))

    return count(rows_steps), count(cols_steps)


def _kernel_numerators(t, big_t, method):
    """The kernel at x = t / T (t = |2 T x| >= 0, int64) times T (triangle) or 2 T**3 (Keys cubic, a = -0.5): the
    weights of `keras_vit.resample.resample_weights` up to their row's common factor, as exact integers."""
    tf = _tf()
    zero = tf.zeros_like(t)
    if method == "bilinear":
        return tf.maximum(zero, big_t - t)
    t2, big2 = t * t, big_t * big_t  # products, not powers: TFLite has no int64 POW
    near = 3 * t2 * t - 5 * t2 * big_t + 2 * big2 * big_t
    far = -t2 * t + 5 * t2 * big_t - 8 * t * big2 + 4 * big2 * big_t
    return tf.where(t < big_t, near, tf.where(t < 2 * big_t, far, zero))


def _scaled_quotient(u, total):
    """floor(u * 2**23 / total) for int64 u >= 0, total > 0 (row-wise), by binary long division (no overflow)."""
    tf = _tf()
    q = _floor_div(u, total)
    rest = u - q * total
    for _ in range(_FRACTION_BITS):
        rest *= 2
        bit = tf.cast(rest >= total, tf.int64)
        q, rest = 2 * q + bit, rest - bit * total
    return q


def _precision(u, total, arithmetic):
    """The weights' bits: Pillow's 22, or torchvision's: the most (<= 22) for which the largest weight still rounds
    under 2**15 at one bit more (`keras_vit.resample._fixed_point`), in integers."""
    tf = _tf()
    if arithmetic == "pil":
        return tf.constant(22, tf.int32)
    powers = tf.constant([2 ** (b + 1) for b in range(1, 23)], tf.int64)
    fits = tf.expand_dims(u, -1) * powers < (2**16 - 1) * tf.expand_dims(total, -1)
    return tf.reduce_sum(tf.cast(tf.reduce_all(fits, axis=[0, 1]), tf.int32))


def _power_of_two(bits):
    """2**bits of an int32 scalar tensor (0 <= bits < 31)."""
    tf = _tf()
    return tf.gather(tf.constant([2**b for b in range(31)], tf.int32), bits)


def pass_taps(n_in, n_out, method, arithmetic):
    """(input indices (n_out, K) int32, fixed-point weights (n_out, K) int32, bits) of one resize pass from n_in to
    n_out samples (int32 scalar tensors): `keras_vit.resample`'s antialiased weights, exactly, in integers."""
    tf = _tf()
    support = 1 if method == "bilinear" else 2
    side = tf.maximum(n_in, n_out)  # the kernel is widened by n_in / n_out when shrinking
    i = tf.expand_dims(tf.range(n_out), 1)
    # Output i is centred at (2i + 1) n_in / (2 n_out); its first tap is floor(centre - support * widen + 1/2).
    first = tf.maximum(0, ((2 * i + 1) * n_in - 2 * support * side + n_out) // (2 * n_out))
    width = (2 * support * side + n_out - 1) // n_out + 2
    k = first + tf.expand_dims(tf.range(width), 0)
    offset = (2 * k + 1) * n_out - (2 * i + 1) * n_in  # 2 (tap - centre) n_out, an integer
    t = tf.cast(tf.maximum(offset, -offset), tf.int64)
    u = _kernel_numerators(t, 2 * tf.cast(side, tf.int64), method)
    u = tf.where(k < n_in, u, tf.zeros_like(u))  # taps past the edge are dropped and the rest renormalised
    total = tf.reduce_sum(u, axis=1, keepdims=True)
    bits = _precision(u, total, arithmetic)
    quotient = tf.cast(_scaled_quotient(tf.maximum(u, -u), total), tf.int32)
    rounded = (quotient // _power_of_two(22 - bits) + 1) // 2
    weights = tf.where(u < 0, -rounded, rounded)  # rounded half away from zero
    return tf.minimum(k, n_in - 1), weights, bits


def _resize_pass(image, axis, n_out, method, arithmetic):
    """One separable pass of uint8 or int32 (H, W, C) `image` along `axis` to `n_out` samples, int32 0..255.
    A loop over the taps (a TFLite WHILE) keeps one (H, n_out, C) sum in memory instead of every tap at once."""
    tf = _tf()
    index, weights, bits = pass_taps(tf.shape(image)[axis], n_out, method, arithmetic)
    shape = tf.tensor_scatter_nd_update(tf.shape(image), [[axis]], tf.reshape(n_out, [1]))

    def add_tap(tap, total):
        w = tf.gather(weights, tap, axis=1)
        w = tf.reshape(w, [1, -1, 1]) if axis == 1 else tf.reshape(w, [-1, 1, 1])
        return tap + 1, total + tf.cast(tf.gather(image, tf.gather(index, tap, axis=1), axis=axis), tf.int32) * w

    start = (tf.constant(0), tf.zeros(shape, tf.int32))
    _, total = tf.while_loop(lambda tap, _: tap < tf.shape(index)[1], add_tap, start)
    one = _power_of_two(bits)
    return tf.clip_by_value((total + one // 2) // one, 0, 255)


def resize(image, height, width, method, arithmetic):
    """uint8 (H, W, C) -> int32 (height, width, C) 0..255: `keras_vit.resample.resize_uint8` (columns first), exact."""
    return _resize_pass(_resize_pass(image, 1, width, method, arithmetic), 0, height, method, arithmetic)


def scale_table(style, mean, std):
    """float32 (256, 3): every uint8 value of every channel scaled as `naflex_image` scales it (its float32 constants
    and order of operations). A lookup, because the converter turns division by a constant into a multiplication by
    its reciprocal, which rounds differently."""
    x = np.arange(256, dtype=np.float32)[:, None]
    mean, std = np.asarray(mean, np.float32), np.asarray(std, np.float32)
    if STYLES[style]["scale_first"]:
        table = (x / np.float32(255.0) - mean) / std
    else:
        table = (x - mean * np.float32(255.0)) / (std * np.float32(255.0))
    return np.ascontiguousarray(np.broadcast_to(table, (256, 3)), np.float32)


def preprocess(image, patch_size, max_num_patches, style="transformers", mean=0.5, std=0.5):
    """A uint8 (1, H, W, 3) image tensor -> {"patches": (1, N, P*P*3) float32, "mask": (1, N) int32, "grid": (1, 2)
    int32}, N = `max_num_patches`: `naflex_image` as TensorFlow ops that TFLite has as builtins."""
    tf = _tf()
    p, n = patch_size, max_num_patches
    options = STYLES[style]
    shape = tf.shape(image)
    rows, cols = target_grid(shape[1], shape[2], p, n)
    pixels = resize(image[0], rows * p, cols * p, options["method"], options["arithmetic"])
    table = tf.constant(scale_table(style, mean, std).reshape(-1))
    scaled = tf.gather(table, pixels * 3 + tf.range(3))
    count = rows * cols
    patches = tf.reshape(tf.transpose(tf.reshape(scaled, [rows, p, cols, p, 3]), [0, 2, 1, 3, 4]), [count, p * p * 3])
    patches = tf.reshape(tf.pad(patches, [[0, n - count], [0, 0]]), [1, n, p * p * 3])
    mask = tf.reshape(tf.cast(tf.range(n) < count, tf.int32), [1, n])
    return {"patches": patches, "mask": mask, "grid": tf.reshape(tf.stack([rows, cols]), [1, 2])}


def flatbuffer(settings):
    """The bytes of naflex_preprocessing.tflite for `settings` (app_preprocessing.settings: patch_size,
    max_num_patches, style, mean, std): input "image" uint8 (1, H, W, 3), H and W open; builtin ops only.

    Raises:
        ExportError: the conversion left ops that are not TFLite builtins.
    """
    tf = _tf()
    keys = ("patch_size", "max_num_patches", "style", "mean", "std")
    p, n, style, mean, std = (settings[k] for k in keys)

    @tf.function(input_signature=[tf.TensorSpec((1, None, None, 3), tf.uint8, name="image")])
    def serve(image):
        return preprocess(image, p, n, style, mean, std)

    module = tf.Module()
    module.serve = serve
    converter = tf.lite.TFLiteConverter.from_concrete_functions([serve.get_concrete_function()], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    data = converter.convert()
    bad = non_builtin_ops(read_ops(data))
    if bad:
        raise ExportError(f"{NAME} contains non-builtin ops {bad}; refusing to write it.")
    return data


class Runner:
    """naflex_preprocessing.tflite run by LiteRT's interpreter, as an app runs it: `inputs(image)` resizes the input
    to the image's (1, H, W, 3) and returns the three model inputs by their signature names."""

    def __init__(self, data, num_threads=1):
        from ai_edge_litert.interpreter import Interpreter

        self._interpreter = Interpreter(model_content=bytes(data), num_threads=num_threads)
        self._runner = self._interpreter.get_signature_runner()

    def inputs(self, image):
        image = np.asarray(image, np.uint8)
        found = self._runner(image=image[None] if image.ndim == 3 else image)
        return {k: np.asarray(found[k]) for k in OUTPUTS}
