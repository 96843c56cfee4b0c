"""training.augment (RandAugment) and Mixup: strengths at a level measured on test patterns, PIL as the reference
for the photometric ops, ops chosen per image, and the Mixup weight distribution against Beta/Dirichlet."""

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageEnhance, ImageOps
from scipy import stats

from training import augment, data
from training.data import loaders
from training.options.config import TrainConfig

# big_vision/pp/autoaugment.py at level 10 (its _MAX_LEVEL): the strengths the recipes' randaug(2, 10) means.
REFERENCE_AT_10 = {
    "Rotate": 30.0,
    "Shear": 0.3,
    "Translate": 100.0,
    "Enhance": 1.9,
    "Posterize": 4,
    "SolarizeAdd": 110,
    "CutoutSide": 80,
}


def _run(image, name, level, sign=1.0, seed=(0, 0)):
    return augment.apply_op(tf.constant(image, tf.float32), name, level, sign, tf.constant(seed)).numpy()


def _orientation_degrees(mask):
    """Angle of the principal axis of the True pixels, atan2(dy, dx) with y pointing down, in (-90, 90]."""
    y, x = np.nonzero(mask)
    cov = np.cov(np.stack([x - x.mean(), y - y.mean()]))
    vx, vy = np.linalg.eigh(cov)[1][:, -1]
    angle = np.degrees(np.arctan2(vy, vx))
    return (angle + 90) % 180 - 90


@pytest.mark.parametrize("level", [10, 5])
def test_rotate_turns_a_bar_by_30_degrees_at_level_10(level):
    image = np.zeros((129, 129, 3), np.float32)
    image[63:66, 14:115] = 255  # a horizontal bar through the centre
    for sign in (1.0, -1.0):
        out = _run(image, "Rotate", level, sign)
        angle = _orientation_degrees(out[..., 0] > 200)
        assert angle == pytest.approx(sign * REFERENCE_AT_10["Rotate"] * level / 10, abs=1.0)
    # The corners uncovered by the rotation are grey 128.
    assert (_run(image, "Rotate", 10)[0, 0] == 128).all()


@pytest.mark.parametrize("name,axis", [("ShearX", 1), ("ShearY", 0)])
def test_shear_slope_is_0_3_at_level_10(name, axis):
    image = np.zeros((96, 96, 3), np.float32)
    if axis == 1:
        image[:, 60] = 255  # a vertical line: ShearX tilts it
    else:
        image[60, :] = 255
    out = _run(image, name, 10)[..., 0] > 200
    y, x = np.nonzero(out)
    slope = np.polyfit(y, x, 1)[0] if axis == 1 else np.polyfit(x, y, 1)[0]
    assert abs(slope) == pytest.approx(REFERENCE_AT_10["Shear"], abs=0.01)


@pytest.mark.parametrize("name,level", [("TranslateX", 10), ("TranslateY", 10), ("TranslateX", 5)])
def test_translation_in_pixels(name, level):
    image = np.zeros((256, 256, 3), np.float32)
    image[127:130, 127:130] = 255
    for sign in (1.0, -1.0):
        out = _run(image, name, level, sign)
        y, x = np.nonzero(out[..., 0] > 200)
        moved = (128 - x.mean()) if name == "TranslateX" else (128 - y.mean())
        assert abs(moved) == pytest.approx(REFERENCE_AT_10["Translate"] * level / 10, abs=0.5)
        assert np.sign(moved) == sign
        assert (out[..., 0] == 128).sum() == 256 * 10 * level  # the uncovered strip is grey


def _photo(seed=0, size=40):
    """A smooth colourful image with dark and bright areas (enhancement ops behave differently on each)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (5, 5, 3)).astype(np.uint8)
    return np.asarray(Image.fromarray(small).resize((size, size), Image.BILINEAR)).astype(np.float32)


@pytest.mark.parametrize(
    "name,pil",
    [
        ("Brightness", lambda im, f: ImageEnhance.Brightness(im).enhance(f)),
        ("Color", lambda im, f: ImageEnhance.Color(im).enhance(f)),
        ("Contrast", lambda im, f: ImageEnhance.Contrast(im).enhance(f)),
        ("Sharpness", lambda im, f: ImageEnhance.Sharpness(im).enhance(f)),
    ],
)
@pytest.mark.parametrize("level", [10, 3])
def test_enhance_ops_equal_pil_at_factor_1_8_level_over_10_plus_0_1(name, pil, level):
    image = _photo(level)
    factor = (REFERENCE_AT_10["Enhance"] - 0.1) * level / 10 + 0.1
    expected = np.asarray(pil(Image.fromarray(image.astype(np.uint8)), factor), np.float32)
    out = _run(image, name, level)
    # PIL rounds its intermediate images (grey, blur, mean) to uint8 too; allow one level of rounding, twice.
    assert np.abs(out - expected).max() <= 2.0 + 1e-6, name
    assert np.abs(out - expected).mean() < 0.6, name


def test_brightness_factor_measured_on_a_flat_image():
    out = _run(np.full((8, 8, 3), 100, np.float32), "Brightness", 10)
    assert out[0, 0, 0] / 100 == pytest.approx(REFERENCE_AT_10["Enhance"])


def test_histogram_and_level_ops_equal_pil():
    image = _photo(7)
    pil = Image.fromarray(image.astype(np.uint8))
    np.testing.assert_array_equal(_run(image, "Invert", 10), np.asarray(ImageOps.invert(pil)))
    np.testing.assert_array_equal(
        _run(image, "Posterize", 10), np.asarray(ImageOps.posterize(pil, REFERENCE_AT_10["Posterize"]))
    )
    np.testing.assert_array_equal(_run(image, "Solarize", 5), np.asarray(ImageOps.solarize(pil, 128)))
    np.testing.assert_array_equal(_run(image, "Solarize", 10), image)  # threshold 256: no pixel changes
    assert np.abs(_run(image, "Equalize", 10) - np.asarray(ImageOps.equalize(pil))).max() <= 1
    low_contrast = (image * 0.5 + 40).round()
    expected = np.asarray(ImageOps.autocontrast(Image.fromarray(low_contrast.astype(np.uint8))), np.float32)
    assert np.abs(_run(low_contrast, "AutoContrast", 10) - expected).max() <= 1
    flat = np.full((4, 4, 3), 100, np.float32)
    assert _run(flat, "SolarizeAdd", 10)[0, 0, 0] == 100 + REFERENCE_AT_10["SolarizeAdd"]
    assert _run(flat + 100, "SolarizeAdd", 10)[0, 0, 0] == 200  # only pixels below 128


def test_cutout_is_an_80_pixel_grey_square_at_level_10():
    image = np.zeros((256, 256, 3), np.float32)
    sides = []
    for i in range(12):
        out = _run(image, "Cutout", 10, seed=(3, i))
        y, x = np.nonzero(out[..., 0] == 128)
        assert (out[y.min() : y.max() + 1, x.min() : x.max() + 1] == 128).all()  # one solid rectangle
        sides.append((y.max() - y.min() + 1, x.max() - x.min() + 1))
    assert max(max(s) for s in sides) == REFERENCE_AT_10["CutoutSide"]
    assert len(set(sides)) > 1 or sides[0] == (80, 80)  # clipped at the borders sometimes


@pytest.mark.slow
def test_ops_are_chosen_per_image_in_a_batch():
    """A batch of identical flat images: the outcomes differ by op (Invert 155, Brightness 190, Posterize 96,
    SolarizeAdd 210, identity 100, grey fill 128 ...), so one batch showing several means several ops."""
    images = np.full((64, 24, 24, 3), 100, np.uint8)
    labels = np.zeros(64, np.int64)
    source = loaders._in_memory(images, labels, np.arange(48), np.arange(48, 64), ["a", "b"], original_size=24)
    config = TrainConfig(
        dataset="synthetic", image_size=24, batch_size=16, augment="resize", flip=False, randaugment=(1, 10), seed=1
    )
    x, _ = next(iter(data.train_dataset(source, config, num_steps=1)))
    centres = {round(float(v) * 127.5 + 127.5) for v in x.numpy()[:, 12, 12, 0]}
    assert len(centres) >= 4, centres
    picks = np.stack([augment.choose_ops(2, tf.constant([5, i]))[0].numpy() for i in range(200)])
    assert set(picks.ravel()) == set(range(len(augment.OPS)))  # every op is drawn
    assert (picks[:, 0] != picks[:, 1]).mean() > 0.8  # the two layers are drawn independently


def test_randaugment_is_a_function_of_its_seed():
    image = tf.constant(_photo(1, 32))
    a = augment.randaugment(image, 2, 10, tf.constant([4, 2])).numpy()
    b = augment.randaugment(image, 2, 10, tf.constant([4, 2])).numpy()
    np.testing.assert_array_equal(a, b)
    outs = [augment.randaugment(image, 2, 10, tf.constant([4, i])).numpy() for i in range(6)]
    assert len({o.tobytes() for o in outs}) > 3


# ------------------------------------------------------------------------------------------------------ Mixup


def _weights(alpha, num_images, count, seed=0):
    ds = tf.data.Dataset.range(count).map(
        lambda i: data.mixup_weights(alpha, num_images, tf.stack([tf.constant(seed, tf.int64), i]))
    )
    return np.concatenate([b.numpy() for b in ds.batch(1000)])


@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_mixup_weight_follows_beta_alpha_alpha(alpha):
    lam = _weights(alpha, 2, 4000)[:, 0]  # the image's own (larger) weight; lam = max(a, 1 - a), a ~ Beta
    beta = stats.beta(alpha, alpha)
    # (lam - 1/2)^2 = (a - 1/2)^2: its mean is Beta's variance. E[lam] = E[max(a, 1 - a)].
    second = (lam - 0.5) ** 2
    se2 = second.std() / np.sqrt(len(lam))
    assert abs(second.mean() - beta.var()) < 5 * se2
    mean = beta.expect(lambda a: np.maximum(a, 1 - a))
    assert abs(lam.mean() - mean) < 5 * lam.std() / np.sqrt(len(lam))
    # The whole distribution: P(lam <= x) = F(x) - F(1 - x) on [1/2, 1].
    # (A grid short of 1, not a KS test: float32 rounds the many weights within 6e-8 of 1 to exactly 1.) The
    # Dvoretzky-Kiefer-Wolfowitz bound at a 1e-3 false-alarm rate.
    grid = np.linspace(0.5, 0.999, 200)
    empirical = (lam[None, :] <= grid[:, None]).mean(1)
    assert np.abs(empirical - (beta.cdf(grid) - beta.cdf(1 - grid))).max() < np.sqrt(np.log(2 / 1e-3) / (2 * len(lam)))
    assert lam.min() >= 0.5 and lam.max() <= 1.0


def test_mixup_with_three_images_is_a_sorted_dirichlet():
    ours = _weights(0.5, 3, 3000)
    np.testing.assert_allclose(ours.sum(-1), 1.0, atol=1e-6)
    assert (np.diff(ours, axis=-1) <= 0).all()
    theirs = -np.sort(-np.random.default_rng(0).dirichlet([0.5] * 3, 20000), axis=-1)
    se = ours.std(0) / np.sqrt(len(ours))
    assert (np.abs(ours.mean(0) - theirs.mean(0)) < 5 * se).all()


def test_mixup_in_the_stream_mixes_every_batch():
    """Every batch of the stream is the unmixed batch (the same config without Mixup) mixed with itself rolled by one:
    row i = lam * row_i + (1 - lam) * row_{i-1}, for the images and the labels, with one lam per batch, never 1."""
    # alpha 1: lam ~ U(1/2, 1), so a float32 lam of exactly 1 (an unmixed batch) has probability ~1e-7 per batch;
    # with alpha 0.2 one batch in ~15 rounds to 1 and could not be told from an unmixed one.
    config = TrainConfig(
        dataset="synthetic", image_size=16, batch_size=8, seed=3, augment="resize", flip=False, mixup_alpha=1.0
    )
    source = data.load_source("synthetic", seed=3)
    plain = data.train_dataset(source, config.replace(mixup_alpha=0.0), num_steps=20)
    mixed = data.train_dataset(source, config, num_steps=20)
    weights = []
    for (x0, y0), (x, y) in zip(plain, mixed, strict=True):
        x0, y0, x, y = (t.numpy().astype(np.float64) for t in (x0, y0, x, y))
        assert set(np.unique(y0)) == {0.0, 1.0}  # the unmixed stream is one-hot
        label, partner = y0.argmax(-1), np.roll(y0.argmax(-1), 1)
        differ = label != partner
        assert differ.any()
        lam = y[np.arange(len(y)), label][differ]
        assert np.ptp(lam) < 1e-6 and 0.5 <= lam[0] < 1 - 1e-4, lam  # one weight per batch, and a real mix
        lam = lam[0]
        assert (y.max(-1)[differ] < 1 - 1e-4).all()  # not one-hot: each such row carries two labels
        np.testing.assert_allclose(y, lam * y0 + (1 - lam) * np.roll(y0, 1, axis=0), atol=1e-6)
        np.testing.assert_allclose(x, lam * x0 + (1 - lam) * np.roll(x0, 1, axis=0), atol=1e-5)
        weights.append(lam)
    assert len(set(np.round(weights, 6))) == len(weights)  # a fresh weight every step


def test_pixel_scale_shrinks_translation_and_cutout_for_small_images():
    image = np.zeros((64, 64, 3), np.float32)
    image[31:34, 31:34] = 255
    out = augment.apply_op(tf.constant(image), "TranslateX", 10, 1.0, tf.constant([0, 0]), pixel_scale=32 / 224).numpy()
    _, x = np.nonzero(out[..., 0] > 200)
    assert 32 - x.mean() == pytest.approx(100 * 32 / 224, abs=0.5)
    cut = augment.apply_op(
        tf.constant(np.zeros((64, 64, 3), np.float32)), "Cutout", 10, 1.0, tf.constant([1, 1]), pixel_scale=32 / 224
    ).numpy()
    assert (cut[..., 0] == 128).sum() <= (2 * int(40 * 32 / 224)) ** 2
