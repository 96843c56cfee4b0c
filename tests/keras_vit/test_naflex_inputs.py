"""NaFlex preprocessing against the inputs transformers' `Siglip2ImageProcessor` and timm's NaFlex eval pipeline
made from the same pixels (fixtures/interop_families2/), and the resampler against Pillow on odd sizes."""

import os

import numpy as np
import pytest
from PIL import Image

from keras_vit.naflex_inputs import naflex_batch, naflex_image, patchify, target_size
from keras_vit.resample import resample_weights, resize_uint8
from tests import support

FIXTURES = os.path.join(str(support.FIXTURES), "interop_families2")


def io(name):
    return dict(np.load(os.path.join(FIXTURES, name, "io.npz")))


def sources(arrays):
    return [arrays[f"pixels_{i}"] for i in range(3)]


def test_transformers_inputs_are_the_processors():
    hf = io("hf_siglip2_naflex")
    got = naflex_batch(sources(hf), patch_size=8, max_num_patches=16, style="transformers")
    # Grids 4x4, 2x7 and 5x3 from 40x40, 24x80 and 64x40 pixels; the last two leave padding rows.
    np.testing.assert_array_equal(got["grid"], hf["spatial_shapes"])
    np.testing.assert_array_equal(got["mask"], hf["pixel_attention_mask"])
    np.testing.assert_array_equal(got["patches"], hf["pixel_values"])


def test_timm_inputs_are_the_pipelines():
    timm = io("timm_naflex_siglip")
    got = naflex_batch(sources(timm), patch_size=8, max_num_patches=16, style="timm")
    np.testing.assert_array_equal(got["grid"], timm["grid_hw"])
    np.testing.assert_array_equal(got["mask"].astype(bool), timm["patch_valid"])
    np.testing.assert_array_equal(got["patches"], timm["patches"])


def test_the_styles_differ_on_the_same_pixels():
    # A resampler that ignored `style` would pass one of the two tests above only.
    hf = io("hf_siglip2_naflex")
    a = naflex_image(hf["pixels_0"], 8, 16, "transformers")[0]
    b = naflex_image(hf["pixels_0"], 8, 16, "timm")[0]
    assert np.abs(a - b).max() > 0.05


@pytest.mark.parametrize(
    "hw, patch, budget, expected",
    [
        ((40, 40), 8, 16, (32, 32)),
        ((24, 80), 8, 16, (16, 56)),
        ((64, 40), 8, 16, (40, 24)),
        ((1, 1000), 16, 256, (16, 4096)),  # one patch high at least
        ((480, 640), 16, 256, (224, 288)),  # 14 x 18: 14 x 19 or 15 x 18 need scales that cross
        ((333, 517), 14, 729, (308, 462)),  # 22 x 33 = 726; 22 x 34 = 748 is over, 23 x 33 has no scale
    ],
)
def test_target_size(hw, patch, budget, expected):
    assert target_size(*hw, patch, budget) == expected


@pytest.mark.parametrize("hw", [(1, 1000), (7, 5), (333, 517), (1000, 3), (257, 255)])
def test_target_size_keeps_the_aspect_within_the_budget(hw):
    patch, budget = 16, 256
    h, w = target_size(*hw, patch, budget)
    assert h % patch == 0 and w % patch == 0 and (h // patch) * (w // patch) <= budget
    # Each side is the source side times one scale, rounded up to whole patches: the ratio survives within a patch.
    assert abs(h / w - hw[0] / hw[1]) <= (patch / w) * (1 + h / w) or min(h, w) == patch


@pytest.mark.parametrize("method, pil", [("bilinear", Image.BILINEAR), ("bicubic", Image.BICUBIC)])
@pytest.mark.parametrize(
    "shape, size", [((37, 91), (13, 45)), ((5, 7), (16, 24)), ((17, 17), (17, 9)), ((1, 9), (8, 8))]
)
def test_resize_is_pillows(method, pil, shape, size):
    """Pillow's own arithmetic, horizontal pass first: equal wherever Pillow runs the passes in that order (recent
    Pillow releases may run the vertical pass first on some shrinks, one grey level apart on some pixels)."""
    pixels = np.random.default_rng(0).integers(0, 256, (*shape, 3), dtype=np.uint8)
    expected = np.asarray(Image.fromarray(pixels).resize(size[::-1], pil)).astype(int)
    got = resize_uint8(pixels, *size, method=method, arithmetic="pil").astype(int)
    assert np.abs(got - expected).max() <= 1
    assert np.mean(got != expected) < 0.02


def test_weights_sum_to_one_and_widen_when_shrinking():
    for n_in, n_out in ((16, 4), (4, 7), (5, 3), (9, 9)):
        rows = resample_weights(n_in, n_out)
        assert all(abs(w.sum() - 1) < 1e-12 for _, w in rows)
    assert len(resample_weights(16, 4)[1][1]) == 8  # a triangle 4 pixels wide on each side
    lo, w = resample_weights(9, 9)[3]
    assert lo + int(np.argmax(w)) == 3 and w.max() == 1.0  # the same size is the identity


def test_patchify_order():
    image = np.arange(4 * 6 * 3).reshape(4, 6, 3)
    rows = patchify(image, 2)
    assert rows.shape == (6, 12)
    np.testing.assert_array_equal(rows[1], image[0:2, 2:4].reshape(-1))  # row-major patches, (ph, pw, C) inside


def test_bad_images_say_what_to_do():
    with pytest.raises(ValueError, match="uint8"):
        naflex_image(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="style"):
        naflex_image(np.zeros((8, 8, 3), np.uint8), style="big_vision")
