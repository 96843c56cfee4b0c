"""naflex_preprocessing.tflite (export/naflex/tflite_preprocessing.py), run by LiteRT's interpreter, gives exactly what
`keras_vit.naflex_image` (numpy) gives for images of odd sizes, in both resize styles, with builtin ops only; its
integer target size and resize weights equal numpy's float64 ones; `python -m export` is tests/training/."""

import numpy as np
import pytest

from keras_vit.naflex_inputs import naflex_image, target_size
from keras_vit.resample import _fixed_point, resample_weights, resize_uint8

# (patch size, budget) per style: the shipped transformers setting, and another patch size for timm's bicubic.
SETTINGS = {"transformers": (16, 256), "timm": (14, 64)}
# 1 x 1, a row, a column, sizes that are no multiple of the patch, a shrink and an enlarge (5 x 7 -> 208 x 304).
SIZES = [(1, 1), (1, 500), (500, 1), (37, 91), (33, 17), (300, 20), (640, 480), (5, 7), (16, 16), (97, 3)]
# Sizes where the largest fitting scale and the bisection's last point disagree on a side (the bisection's answer
# has one patch fewer there): an exact rational answer without the bisection's grid gets these wrong.
GRID_SIZES = [(2683, 3258), (5786, 4179)]


def _mismatches(found, expected):
    """The names of the outputs that are not bitwise equal (dtype, shape and values)."""
    return [
        name
        for name, want in zip(("patches", "mask", "grid"), expected)
        if found[name].dtype != want.dtype or not np.array_equal(found[name][0], want)
    ]


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def converted(request):
    from export.naflex import tflite_preprocessing

    p, n = SETTINGS[request.param]
    settings = dict(patch_size=p, max_num_patches=n, style=request.param, mean=0.5, std=0.5)
    data = tflite_preprocessing.flatbuffer(settings)
    return request.param, p, n, data, tflite_preprocessing.Runner(data)


@pytest.mark.slow
def test_the_tflite_preprocessing_equals_naflex_image_on_odd_sizes(converted):
    style, p, n, _, runner = converted
    rng = np.random.default_rng(0)
    for h, w in SIZES:
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        expected = naflex_image(image, p, n, style)
        found = runner.inputs(image)
        assert not _mismatches(found, expected), (style, h, w, _mismatches(found, expected))
        assert found["patches"].shape == (1, n, p * p * 3) and found["grid"].shape == (1, 2)
        if (h, w) == (640, 480):  # the negative control: patches in (pw, ph, C) order are caught
            swapped = found["patches"].reshape(1, n, p, p, 3).transpose(0, 1, 3, 2, 4).reshape(1, n, -1)
            assert _mismatches({**found, "patches": swapped}, expected) == ["patches"]


@pytest.mark.slow
def test_the_file_has_builtin_ops_only_and_an_open_image_size(converted):
    from ai_edge_litert.interpreter import Interpreter

    from export.tflite.flatbuffer import non_builtin_ops, read_ops

    *_, data, _ = converted
    assert non_builtin_ops(read_ops(data)) == []
    (image,) = Interpreter(model_content=data).get_input_details()
    assert image["dtype"] == np.uint8 and list(image["shape_signature"]) == [1, -1, -1, 3]


def _rational_size(h, w, p, n):
    """The sides at the largest scale k p / side that fits, in exact rationals, without the bisection's grid."""
    fits = [(k, side) for side, other in ((h, w), (w, h)) for k in range(1, n + 1) if k * -(-other * k // side) <= n]
    k, side = max(fits, key=lambda f: f[0] / f[1])
    return max(1, -(-h * k // side)) * p, max(1, -(-w * k // side)) * p


@pytest.mark.slow
def test_the_integer_target_size_equals_the_bisection():
    import tensorflow as tf

    from export.naflex.tflite_preprocessing import target_grid

    rng = np.random.default_rng(1)
    sizes = [(h, w) for h in range(1, 30) for w in range(1, 30)] + GRID_SIZES + [(6, 24722), (24722, 6)]
    sizes += [tuple(int(v) for v in s) for s in np.exp(rng.uniform(0, np.log(30000), (300, 2))).astype(int) + 1]
    for p, n in ((16, 256), (8, 12), (14, 729)):
        grid = tf.function(lambda h, w, p=p, n=n: target_grid(h, w, p, n))
        for h, w in sizes:
            rows, cols = grid(tf.constant(h), tf.constant(w))
            assert (int(rows) * p, int(cols) * p) == target_size(h, w, p, n), (h, w, p, n)
    # The control: without the grid the answer differs on GRID_SIZES, so the test above can fail.
    assert all(_rational_size(h, w, 16, 256) != target_size(h, w, 16, 256) for h, w in GRID_SIZES)


@pytest.mark.slow
@pytest.mark.parametrize("method, arithmetic", [("bilinear", "torchvision"), ("bicubic", "pil")])
def test_the_integer_weights_equal_the_float64_fixed_point_ones(method, arithmetic):
    import tensorflow as tf

    from export.naflex.tflite_preprocessing import pass_taps

    rng = np.random.default_rng(2)
    pairs = [(a, b) for a in (1, 2, 3, 7, 16, 31) for b in (1, 2, 5, 16, 48)]
    pairs += [tuple(int(v) for v in rng.integers(1, 3000, 2)) for _ in range(20)]
    for n_in, n_out in pairs:
        rows, bits = _fixed_point(resample_weights(n_in, n_out, method), arithmetic)
        expected = np.zeros((n_out, n_in), np.int64)
        for i, (lo, w) in enumerate(rows):
            expected[i, lo : lo + len(w)] = w
        index, weights, found_bits = (
            t.numpy() for t in pass_taps(tf.constant(n_in), tf.constant(n_out), method, arithmetic)
        )
        found = np.zeros((n_out, n_in), np.int64)
        for i in range(n_out):
            np.add.at(found[i], index[i], weights[i])
        assert found_bits == bits and np.array_equal(found, expected), (n_in, n_out)


def test_a_float32_resize_is_not_bit_exact():
    """The control for the integer resize: TensorFlow's own float32 antialiased bilinear resize, rounded to uint8,
    misses resize_uint8 on many pixels, so equality above is not something any resize would give."""
    import tensorflow as tf

    image = np.random.default_rng(3).integers(0, 256, (37, 91, 3), dtype=np.uint8)
    expected = resize_uint8(image, 160, 400, "bilinear", "torchvision")
    floated = tf.image.resize(image.astype(np.float32), (160, 400), "bilinear", antialias=True).numpy()
    assert (np.clip(np.round(floated), 0, 255).astype(np.uint8) != expected).sum() > 100


def test_the_one_known_bicubic_difference_is_numpys_float64_rounding():
    """The one weight of `benchmarks.naflex_preprocessing --exactness 2000` that differs (timm's bicubic, 3330 ->
    3587 samples, output 3568, tap 3312): the exact ratio, 3300399.5000002 in 2**-22 units, rounds up; numpy's
    float64 evaluation of the same kernel lands at 3300399.4999996 and rounds down."""
    from fractions import Fraction

    import tensorflow as tf

    from export.naflex.tflite_preprocessing import pass_taps

    n_in, n_out, i, k = 3330, 3587, 3568, 3312
    lo, w = resample_weights(n_in, n_out, "bicubic")[i]
    assert 0.4999 < w[k - lo] * 2**22 - 3300399 < 0.5
    side = 2 * max(n_in, n_out)
    offsets = [abs((2 * j + 1) * n_out - (2 * i + 1) * n_in) for j in range(n_in)]
    near = [3 * t**3 - 5 * t * t * side + 2 * side**3 if t < side else 0 for t in offsets]
    far = [-(t**3) + 5 * t * t * side - 8 * t * side**2 + 4 * side**3 if side <= t < 2 * side else 0 for t in offsets]
    exact = Fraction((near[k] + far[k]) * 2**22, sum(near) + sum(far))
    assert Fraction(1, 2) < exact - 3300399 < Fraction(1, 2) + Fraction(1, 10**6)
    index, weights, _ = pass_taps(tf.constant(n_in), tf.constant(n_out), "bicubic", "pil")
    (column,) = np.nonzero(index.numpy()[i] == k)[0]
    assert weights.numpy()[i, column] == 3300400 and _fixed_point([(lo, w)], "pil")[0][0][1][k - lo] == 3300399
