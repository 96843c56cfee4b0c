"""RandAugment with big_vision's semantics (`randaug(num_layers, magnitude)`), per image with stateless seeds inside
the tf.data map; its ops, levels and two deliberate differences: docs/training.md#randaugment."""

import math

import tensorflow as tf

MAX_LEVEL = 10.0
FILL_VALUE = 128.0
TRANSLATE_PIXELS = 100.0  # at MAX_LEVEL, big_vision's translate_const for RandAugment
CUTOUT_HALF_SIZE = 40.0  # at MAX_LEVEL, big_vision's cutout_const for RandAugment
OPS = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "Posterize",
    "Solarize",
    "Color",
    "Contrast",
    "Brightness",
    "Sharpness",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Cutout",
    "SolarizeAdd",
)


def quantize(image):
    """float 0..255 -> float of integral values 0..255 (uint8 storage without leaving float32)."""
    return tf.clip_by_value(tf.round(image), 0.0, 255.0)


def op_argument(name, level, pixel_scale=1.0):
    """The strength of op `name` at `level`, before the random sign (the table of the module docstring).

    `pixel_scale` multiplies the two constants in pixels (Translate's 100, Cutout's 40), which big_vision sets for
    224 px images; 1 keeps the reference's absolute values.
    """
    f = float(level) / MAX_LEVEL
    arguments = {
        "Rotate": 30.0 * f,
        "ShearX": 0.3 * f,
        "ShearY": 0.3 * f,
        "TranslateX": TRANSLATE_PIXELS * pixel_scale * f,
        "TranslateY": TRANSLATE_PIXELS * pixel_scale * f,
        "Color": 1.8 * f + 0.1,
        "Contrast": 1.8 * f + 0.1,
        "Brightness": 1.8 * f + 0.1,
        "Sharpness": 1.8 * f + 0.1,
        "Posterize": int(4 * f),
        "Solarize": int(256 * f),
        "SolarizeAdd": int(110 * f),
        "Cutout": int(CUTOUT_HALF_SIZE * pixel_scale * f),
    }
    if name not in OPS:
        raise ValueError(f"Unknown RandAugment op {name!r}. Use one of: {', '.join(OPS)}.")
    return arguments.get(name)


def _blend(degenerate, image, factor):
    """degenerate + factor * (image - degenerate), clipped: 0 gives the degenerate image, 1 the image."""
    return quantize(degenerate + factor * (image - degenerate))


def _grey(image):
    return tf.image.rgb_to_grayscale(image)  # ITU-R 601 luma, as PIL's "L" conversion


def _transform(image, matrix):
    """Projective transform: output pixel (x, y) reads the input at (a0 x + a1 y + a2, b0 x + b1 y + b2)."""
    shape = tf.shape(image)
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None],
        transforms=tf.reshape(tf.cast(tf.stack(matrix), tf.float32), [1, 8]),
        output_shape=shape[:2],
        fill_value=FILL_VALUE,
        interpolation="NEAREST",
        fill_mode="CONSTANT",
    )
    return out[0]


def rotate(image, degrees):
    """Rotation about the image centre; positive angles turn the content clockwise on screen (y points down)."""
    shape = tf.cast(tf.shape(image), tf.float32)
    cy, cx = (shape[0] - 1) / 2, (shape[1] - 1) / 2
    theta = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
    c, s = tf.cos(theta), tf.sin(theta)
    # Inverse map: output (x, y) reads centre + R(-theta) ((x, y) - centre).
    return _transform(image, [c, s, cx - c * cx - s * cy, -s, c, cy + s * cx - c * cy, 0.0, 0.0])


def shear_x(image, level):
    return _transform(image, [1.0, level, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def shear_y(image, level):
    return _transform(image, [1.0, 0.0, 0.0, level, 1.0, 0.0, 0.0, 0.0])


def translate_x(image, pixels):
    """Moves the content `pixels` to the left (negative: to the right)."""
    return _transform(image, [1.0, 0.0, pixels, 0.0, 1.0, 0.0, 0.0, 0.0])


def translate_y(image, pixels):
    """Moves the content `pixels` up (negative: down)."""
    return _transform(image, [1.0, 0.0, 0.0, 0.0, 1.0, pixels, 0.0, 0.0])


def autocontrast(image):
    """Stretches each channel from its [min, max] to [0, 255]; a flat channel is left as it is."""
    lo = tf.reduce_min(image, axis=[0, 1], keepdims=True)
    hi = tf.reduce_max(image, axis=[0, 1], keepdims=True)
    stretched = (image - lo) * (255.0 / tf.maximum(hi - lo, 1.0))
    return quantize(tf.where(hi > lo, stretched, image))


def _equalize_channel(channel):
    values = tf.cast(channel, tf.int32)
    hist = tf.math.bincount(tf.reshape(values, [-1]), minlength=256, maxlength=256)
    # PIL's rule: the step leaves out the count of the brightest occupied level.
    brightest = tf.reduce_max(tf.where(hist > 0, tf.range(256), 0))
    step = (tf.reduce_sum(hist) - hist[brightest]) // 255
    lut = (tf.cumsum(hist) + step // 2) // tf.maximum(step, 1)
    lut = tf.clip_by_value(tf.concat([[0], lut[:-1]], 0), 0, 255)
    return tf.where(step > 0, tf.cast(tf.gather(lut, values), tf.float32), channel)


def equalize(image):
    return tf.stack([_equalize_channel(image[..., c]) for c in range(3)], axis=-1)


def invert(image):
    return 255.0 - image


def posterize(image, bits):
    shift = 2.0 ** tf.cast(tf.clip_by_value(8 - bits, 0, 8), tf.float32)
    return tf.floor(image / shift) * shift


def solarize(image, threshold):
    return tf.where(image < tf.cast(threshold, tf.float32), image, 255.0 - image)


def solarize_add(image, addition, threshold=128):
    return tf.where(image < threshold, tf.clip_by_value(image + tf.cast(addition, tf.float32), 0.0, 255.0), image)


def color(image, factor):
    return _blend(tf.image.grayscale_to_rgb(quantize(_grey(image))), image, factor)


def contrast(image, factor):
    return _blend(tf.reduce_mean(quantize(_grey(image))), image, factor)


def brightness(image, factor):
    return _blend(tf.zeros_like(image), image, factor)


def sharpness(image, factor):
    """Blends with PIL's SMOOTH filter (3x3, centre weight 5, total 13) of the interior; border pixels kept."""
    kernel = tf.tile(tf.reshape(tf.constant([1.0, 1, 1, 1, 5, 1, 1, 1, 1]) / 13.0, [3, 3, 1, 1]), [1, 1, 3, 1])
    smooth = tf.nn.depthwise_conv2d(image[None], kernel, [1, 1, 1, 1], "VALID")[0]
    smooth = tf.pad(quantize(smooth), [[1, 1], [1, 1], [0, 0]])
    shape = tf.shape(image)
    interior = tf.pad(tf.ones(shape[:2] - 2, tf.bool), [[1, 1], [1, 1]])[..., None]
    return _blend(tf.where(interior, smooth, image), image, factor)


def cutout(image, half_size, seed):
    """Fills a square of side 2 * half_size (clipped at the borders) centred at a random pixel with grey."""
    shape = tf.shape(image)
    centre = tf.random.stateless_uniform([2], seed, minval=0, maxval=tf.int32.max, dtype=tf.int32) % shape[:2]
    rows = tf.range(shape[0])[:, None]
    cols = tf.range(shape[1])[None, :]
    inside = (
        (rows >= centre[0] - half_size)
        & (rows < centre[0] + half_size)
        & (cols >= centre[1] - half_size)
        & (cols < centre[1] + half_size)
    )
    return tf.where(inside[..., None], FILL_VALUE, image)


def apply_op(image, name, level, sign=1.0, seed=(0, 0), pixel_scale=1.0):
    """Op `name` at `level` on a float32 (H, W, 3) image of integral 0..255 values; `sign` flips the direction of
    Rotate, ShearX/Y and TranslateX/Y (RandAugment draws it), `seed` places the Cutout square, `pixel_scale` as in
    `op_argument`."""
    argument = op_argument(name, level, pixel_scale)
    signed = sign * argument if argument is not None else None
    functions = {
        "AutoContrast": lambda: autocontrast(image),
        "Equalize": lambda: equalize(image),
        "Invert": lambda: invert(image),
        "Rotate": lambda: rotate(image, signed),
        "Posterize": lambda: posterize(image, argument),
        "Solarize": lambda: solarize(image, argument),
        "Color": lambda: color(image, argument),
        "Contrast": lambda: contrast(image, argument),
        "Brightness": lambda: brightness(image, argument),
        "Sharpness": lambda: sharpness(image, argument),
        "ShearX": lambda: shear_x(image, signed),
        "ShearY": lambda: shear_y(image, signed),
        "TranslateX": lambda: translate_x(image, signed),
        "TranslateY": lambda: translate_y(image, signed),
        "Cutout": lambda: cutout(image, argument, seed),
        "SolarizeAdd": lambda: solarize_add(image, argument),
    }
    return functions[name]()


def choose_ops(num_layers, seed):
    """(op indices into OPS (num_layers,), signs (num_layers,), per-layer seeds (num_layers, 2)) of one image."""
    layer_seeds = tf.random.experimental.stateless_split(seed, num_layers)
    ops, signs = [], []
    for i in range(num_layers):
        op_seed, sign_seed = tf.unstack(tf.random.experimental.stateless_split(layer_seeds[i], 2))
        ops.append(tf.random.stateless_uniform([], op_seed, minval=0, maxval=len(OPS), dtype=tf.int32))
        signs.append(tf.where(tf.random.stateless_uniform([], sign_seed) < 0.5, -1.0, 1.0))
    return tf.stack(ops), tf.stack(signs), layer_seeds


def randaugment(image, num_layers, magnitude, seed, pixel_scale=1.0):
    """big_vision's `randaug(num_layers, magnitude)` on one image.

    Args:
        image: float32 (H, W, 3) of integral values in 0..255 (see `quantize`).
        num_layers: ops applied one after the other (2 in the references).
        magnitude: level of every op on the 0..10 scale above (10 is full strength; more extrapolates).
        seed: a stateless seed (shape (2,)); the same seed gives the same ops and strengths.
        pixel_scale: multiplies Translate's and Cutout's pixel constants (1: big_vision's, set for 224 px).

    Returns:
        The augmented float32 image, integral values in 0..255.
    """
    image = tf.convert_to_tensor(image, tf.float32)
    static_shape = image.shape
    ops, signs, layer_seeds = choose_ops(int(num_layers), seed)
    for i in range(int(num_layers)):
        branches = [
            (
                lambda name=name, i=i, image=image: tf.ensure_shape(
                    apply_op(image, name, magnitude, signs[i], layer_seeds[i], pixel_scale), static_shape
                )
            )
            for name in OPS
        ]
        image = tf.switch_case(ops[i], branches)
    return image
