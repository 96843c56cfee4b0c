"""keras_vit.images, the one image reader: pixels of files built here against hand-computed values, and its use
by training folders, export predict and keras_vit.inspect."""

import io
import warnings

import numpy as np
import pytest
from PIL import Image

from keras_vit import images

# A 16-bit grey row and its 8-bit values, by hand: the high byte, v >> 8 (65535 -> 255, 32896 = 0x8080 -> 128).
WIDE = [0, 255, 256, 1000, 32896, 65535]
WIDE_8BIT = [0, 0, 1, 3, 128, 255]
# RGBA pixels: half-transparent orange, a fully transparent pixel that stores a colour, an opaque one.
RGBA = [(200, 100, 0, 128), (10, 20, 30, 0), (10, 20, 30, 255)]
# (rgb * a + background * (255 - a)) / 255 rounded: e.g. red on white (200 * 128 + 255 * 127) / 255 = 227.39.
ON_WHITE = [(227, 177, 127), (255, 255, 255), (10, 20, 30)]
ON_BLACK = [(100, 50, 0), (0, 0, 0), (10, 20, 30)]
ON_GREY = [(164, 114, 64), (128, 128, 128), (10, 20, 30)]  # (200 * 128 + 128 * 127) / 255 = 164.15


def _encode(image, fmt, **kwargs):
    buffer = io.BytesIO()
    image.save(buffer, fmt, **kwargs)
    return buffer.getvalue()


def _halves(width=32, height=16):
    """Left half red, right half blue: where the red ends up shows how the picture was turned."""
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[:, : width // 2, 0] = 255
    pixels[:, width // 2 :, 2] = 255
    return Image.fromarray(pixels)


def _exif_jpeg(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation  # the EXIF Orientation tag
    return _encode(_halves(), "JPEG", quality=95, exif=exif.tobytes())


def _palette_gif():
    picture = Image.new("P", (3, 1))
    picture.putpalette([255, 0, 0, 0, 0, 255, 0, 255, 0] + [0] * (256 * 3 - 9))  # red, blue, green
    for x, index in enumerate((0, 1, 2)):
        picture.putpixel((x, 0), index)
    return _encode(picture, "GIF", transparency=1)  # blue is the transparent index


def _assert_near(actual, expected, tolerance):
    difference = np.abs(actual.astype(int) - np.asarray(expected, int)).max()
    assert difference <= tolerance, (actual, expected)


def test_sixteen_bit_png_is_scaled_not_clipped():
    data = _encode(Image.fromarray(np.array([WIDE], np.uint16)), "PNG")
    assert Image.open(io.BytesIO(data)).mode == "I;16"  # a real 16-bit file
    rgb = images.decode_image(data)
    assert rgb.shape == (1, 6, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb[0], np.repeat(np.array(WIDE_8BIT, np.uint8)[:, None], 3, axis=1))
    # What Pillow's convert("RGB") gives (the previous reader): everything above 255 clipped to white.
    assert np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))[0, :, 0].tolist() == [0, 255, 255, 255, 255, 255]
    # A 16-bit TIFF is read by the same rule.
    tiff = _encode(Image.fromarray(np.array([WIDE], np.uint16)), "TIFF")
    np.testing.assert_array_equal(images.decode_image(tiff, channels=1)[0, :, 0], WIDE_8BIT)


def test_transparency_is_composited_on_the_stated_background():
    rgba = _encode(Image.fromarray(np.array([RGBA], np.uint8), "RGBA"), "PNG")
    np.testing.assert_array_equal(images.decode_image(rgba)[0], ON_WHITE)  # white is the default
    np.testing.assert_array_equal(images.decode_image(rgba, background="black")[0], ON_BLACK)
    np.testing.assert_array_equal(images.decode_image(rgba, background=(128, 128, 128))[0], ON_GREY)
    # Grey + alpha: 100 at alpha 51 on white = (100 * 51 + 255 * 204) / 255 = 224.
    la = _encode(Image.fromarray(np.array([[[100, 51]]], np.uint8), "LA"), "PNG")
    np.testing.assert_array_equal(images.decode_image(la)[0, 0], [224, 224, 224])
    for bad in ("pink", (0, 0), (0, 0, 256), (0.5, 0, 0)):
        with pytest.raises(ValueError, match="background must be 'white', 'black' or an \\(R, G, B\\)"):
            images.decode_image(rgba, background=bad)
    assert images.parse_background("0,128,255") == (0, 128, 255) and images.parse_background("Black") == (0, 0, 0)
    with pytest.raises(ValueError, match="--background must be white, black or R,G,B.*'1,2'"):
        images.parse_background("1,2")


def test_palette_grey_and_bilevel_images_become_rgb():
    gif = _palette_gif()
    np.testing.assert_array_equal(images.decode_image(gif)[0], [(255, 0, 0), (255, 255, 255), (0, 255, 0)])
    np.testing.assert_array_equal(
        images.decode_image(gif, background="black")[0], [(255, 0, 0), (0, 0, 0), (0, 255, 0)]
    )
    grey = _encode(Image.fromarray(np.array([[0, 77, 255]], np.uint8), "L"), "PNG")
    np.testing.assert_array_equal(images.decode_image(grey)[0], [(0, 0, 0), (77, 77, 77), (255, 255, 255)])
    np.testing.assert_array_equal(images.decode_image(grey, channels=1)[0, :, 0], [0, 77, 255])  # unchanged
    bilevel = _encode(Image.fromarray(np.array([[0, 255]], np.uint8)).convert("1"), "PNG")
    np.testing.assert_array_equal(images.decode_image(bilevel)[0], [(0, 0, 0), (255, 255, 255)])
    # channels=1 is ITU-R 601-2 luma: pure red -> 0.299 * 255 = 76.2.
    red = _encode(Image.new("RGB", (1, 1), (255, 0, 0)), "PNG")
    assert images.decode_image(red, channels=1).tolist() == [[[76]]]


def test_exif_orientation_is_applied():
    stored = images.decode_image(_encode(_halves(), "JPEG", quality=95))
    assert stored.shape == (16, 32, 3)
    # Orientation 6: turn 90 degrees clockwise to display, so the stored left (red) half becomes the top half.
    turned = images.decode_image(_exif_jpeg(6))
    assert turned.shape == (32, 16, 3)
    _assert_near(turned[4, 8], (255, 0, 0), 8)
    _assert_near(turned[27, 8], (0, 0, 255), 8)
    # Orientation 3: turned 180 degrees, red on the right.
    upside_down = images.decode_image(_exif_jpeg(3))
    assert upside_down.shape == (16, 32, 3)
    _assert_near(upside_down[8, 27], (255, 0, 0), 8)
    _assert_near(upside_down[8, 4], (0, 0, 255), 8)


def test_webp_tiff_and_cmyk_jpeg():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    for fmt, kwargs in (
        ("WEBP", {"lossless": True}),
        ("TIFF", {}),
        ("TIFF", {"compression": "tiff_lzw"}),
        ("BMP", {}),
        ("PPM", {}),
    ):
        np.testing.assert_array_equal(images.decode_image(_encode(Image.fromarray(pixels), fmt, **kwargs)), pixels)
    # CMYK (0, 255, 255, 0) is pure red; JPEG is lossy, hence the tolerance.
    cmyk = np.zeros((16, 16, 4), np.uint8)
    cmyk[..., 1:3] = 255
    _assert_near(images.decode_image(_encode(Image.fromarray(cmyk, "CMYK"), "JPEG", quality=95))[8, 8], (255, 0, 0), 3)
    assert {".webp", ".tif", ".tiff", ".ppm", ".jpg", ".png", ".gif", ".bmp"} <= set(images.image_suffixes())
    assert not {".h5", ".mpg", ".ps"} & set(images.image_suffixes())  # Pillow identifies these but cannot decode


def test_truncated_corrupt_and_unconvertible_files_are_named(tmp_path):
    png = _encode(Image.fromarray(np.zeros((64, 64, 3), np.uint8) + 7), "PNG", compress_level=0)
    (tmp_path / "cut.png").write_bytes(png[: len(png) // 2])
    with pytest.raises(images.ImageReadError, match=r"Cannot read the image '.*cut\.png' \(OSError: .*truncated"):
        images.read_image(tmp_path / "cut.png")
    (tmp_path / "text.jpg").write_bytes(b"not an image at all")
    with pytest.raises(
        images.ImageReadError,
        match=r"text\.jpg.*UnidentifiedImageError: 19 bytes in no format Pillow.*replace or remove it",
    ):
        images.read_image(tmp_path / "text.jpg")
    with pytest.raises(FileNotFoundError, match="No image file at .*absent.png"):
        images.read_image(tmp_path / "absent.png")
    floats = np.array([[0.0, 2.0]], np.float32)
    (tmp_path / "float.tiff").write_bytes(_encode(Image.fromarray(floats, "F"), "TIFF"))
    with pytest.raises(images.ImageReadError, match=r"float image .*float\.tiff.* values in \[0, 2\]"):
        images.read_image(tmp_path / "float.tiff")
    (tmp_path / "unit.tiff").write_bytes(_encode(Image.fromarray(floats / 2, "F"), "TIFF"))
    np.testing.assert_array_equal(images.read_image(tmp_path / "unit.tiff")[0, :, 0], [0, 255])
    bad = images.find_unreadable([tmp_path / n for n in ("cut.png", "unit.tiff", "text.jpg", "absent.png")])
    assert [(str(p.name), reason.split(":")[0]) for p, reason in bad] == [
        ("cut.png", "OSError"),
        ("text.jpg", "UnidentifiedImageError"),
        ("absent.png", "FileNotFoundError"),
    ]


def test_a_file_tensorflow_cannot_decode_is_read(tmp_path):
    import tensorflow as tf

    pixels = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    tiff = _encode(Image.fromarray(pixels), "TIFF")
    with pytest.raises(tf.errors.InvalidArgumentError):  # the premise: TensorFlow has no TIFF decoder
        tf.io.decode_image(tiff, channels=3, expand_animations=False)
    (tmp_path / "really_a_tiff.jpg").write_bytes(tiff)  # misnamed files are common; Pillow reads the content
    np.testing.assert_array_equal(images.read_image(tmp_path / "really_a_tiff.jpg"), pixels)


def test_reads_urls_through_keras_vit_files():
    import uuid

    from keras_vit import files

    url = f"ram://{uuid.uuid4().hex}/a.png"
    files.atomic_write_bytes(url, _encode(Image.fromarray(np.array([RGBA], np.uint8), "RGBA"), "PNG"))
    np.testing.assert_array_equal(images.read_image(url, background="black")[0], ON_BLACK)


# ---------------------------------------------------------------------------------- the reader's users


def _zoo(root):
    """A two-class folder of every kind of file above; returns {relative path: expected uint8 pixels or None}."""
    rng = np.random.default_rng(1)
    expected = {}

    def put(name, data, pixels):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
        expected[name] = pixels

    wide = np.array([WIDE] * 2, np.uint16)
    put(
        "a/wide.png",
        _encode(Image.fromarray(wide), "PNG"),
        np.repeat(np.array([WIDE_8BIT] * 2, np.uint8)[..., None], 3, axis=-1),
    )
    put(
        "a/alpha.png",
        _encode(Image.fromarray(np.array([RGBA], np.uint8), "RGBA"), "PNG"),
        np.array([ON_WHITE], np.uint8),
    )
    put("a/palette.gif", _palette_gif(), np.array([[(255, 0, 0), (255, 255, 255), (0, 255, 0)]], np.uint8))
    put("a/turned.jpg", _exif_jpeg(6), None)  # lossy: checked by shape below
    for name, fmt, kwargs in (
        ("b/lossless.webp", "WEBP", {"lossless": True}),
        ("b/scan.tiff", "TIFF", {}),
        ("b/really_a_tiff.jpg", "TIFF", {}),
        ("b/grey.png", "PNG", {}),
    ):
        pixels = rng.integers(0, 256, (3, 5, 3), dtype=np.uint8)
        if fmt == "PNG":
            pixels = np.repeat(pixels[..., :1], 3, axis=-1)
            put(name, _encode(Image.fromarray(pixels[..., 0], "L"), fmt), pixels)
        else:
            put(name, _encode(Image.fromarray(pixels), fmt, **kwargs), pixels)
    (root / "b" / "notes.txt").write_text("not an image, not listed")
    return expected


@pytest.mark.slow
def test_folder_dataset_reads_every_format_through_the_reader(tmp_path):
    from training import data
    from training.options.config import TrainConfig

    expected = _zoo(tmp_path / "zoo")
    source = data.load_source(f"folder:{tmp_path / 'zoo'}", holdout_fraction=0.5)
    assert source.num_train + source.num_heldout == 8  # .webp and .tiff are listed; notes.txt is not
    paths = [str(p) for p in source.train_arrays[0]] + [p.decode() for p, _ in source.heldout.as_numpy_iterator()]
    for path in paths:
        name = path[len(str(tmp_path / "zoo")) + 1 :]
        decoded = source.decode(path).numpy()  # what the pipeline decodes: the numpy_function of the reader
        np.testing.assert_array_equal(decoded, images.read_image(path))
        if expected[name] is not None:
            np.testing.assert_array_equal(decoded, expected[name])
        else:
            assert decoded.shape == (32, 16, 3)
    # Every element through the training and held-out pipelines: the file TF cannot decode does not crash them.
    config = TrainConfig(image_size=16, batch_size=4, seed=2)
    first = [x.numpy() for x, _ in data.train_dataset(source, config, num_steps=3)]
    assert len(first) == 3 and all(np.isfinite(x).all() and x.shape == (4, 16, 16, 3) for x in first)
    assert sum(len(w) for _, _, w in data.eval_dataset(source, config)) == 4
    # The stream stays a pure function of (seed, step): a resume at step 2 gets step 2's batch bit for bit.
    resumed = [x.numpy() for x, _ in data.train_dataset(source, config, start_step=2, num_steps=1)]
    np.testing.assert_array_equal(resumed[0], first[2])
    # The background option reaches the folder pipeline.
    black = data.load_source(f"folder:{tmp_path / 'zoo'}", holdout_fraction=0.5, image_background="black")
    np.testing.assert_array_equal(
        black.decode(str(tmp_path / "zoo" / "a" / "alpha.png")).numpy(), np.array([ON_BLACK], np.uint8)
    )


def test_folder_scan_names_bad_files_before_training_or_skips_them(tmp_path):
    import training
    from training import data
    from training.options.config import TrainConfig

    _zoo(tmp_path / "zoo")
    png = _encode(Image.fromarray(np.zeros((64, 64, 3), np.uint8)), "PNG", compress_level=0)
    (tmp_path / "zoo" / "b" / "cut.png").write_bytes(png[: len(png) // 2])
    (tmp_path / "zoo" / "a" / "empty.tif").write_bytes(b"")
    config = TrainConfig(
        dataset=f"folder:{tmp_path / 'zoo'}",
        image_size=16,
        batch_size=2,
        epochs=1,
        holdout_fraction=0.5,
        strategy="default",
    )
    with pytest.raises(
        ValueError,
        match=r"(?s)2 unreadable image\(s\).*skip_unreadable_images=True.*"
        r"a/empty\.tif: UnidentifiedImageError.*b/cut\.png: OSError",
    ):
        training.train(config, str(tmp_path / "run"), verbose=0)
    assert not (tmp_path / "run" / "checkpoints").exists()  # stopped before any step
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source = data.load_source(config.dataset, holdout_fraction=0.5, skip_unreadable_images=True)
    message = "\n".join(str(w.message) for w in caught)
    assert "Skipping 2 unreadable image(s) of 10" in message and "cut.png" in message and "empty.tif" in message
    assert source.num_train + source.num_heldout == 8
    with pytest.raises(ValueError, match="background must be"):
        TrainConfig(image_background="transparent")
    with pytest.raises(ValueError, match="skip_unreadable_images expects true or false"):
        TrainConfig(skip_unreadable_images="yes")


def test_export_reads_images_through_the_reader(tmp_path):
    import export.io
    from export.__main__ import main as cli

    expected = _zoo(tmp_path / "zoo")
    for name, pixels in expected.items():
        if pixels is not None:
            np.testing.assert_array_equal(export.io.read_image(tmp_path / "zoo" / name), pixels)
    np.testing.assert_array_equal(
        export.io.read_image(tmp_path / "zoo" / "a" / "alpha.png", "black"), np.array([ON_BLACK], np.uint8)
    )
    # A folder of verification/calibration images lists every Pillow format, in name order.
    arrays, labels = export.io.load_image_set(tmp_path / "zoo" / "b")
    assert labels is None and len(arrays) == 4
    np.testing.assert_array_equal(arrays[1], expected["b/lossless.webp"])
    png = _encode(Image.fromarray(np.zeros((64, 64, 3), np.uint8)), "PNG", compress_level=0)
    (tmp_path / "cut.png").write_bytes(png[: len(png) // 2])
    with pytest.raises(export.io.ExportError, match=r"Cannot read the image .*cut\.png"):
        export.io.read_image(tmp_path / "cut.png")
    with pytest.raises(SystemExit) as exit_info:  # argparse: usage and the reason, exit code 2
        cli(["predict", "model.keras", "a.png", "--background", "pink"])
    assert exit_info.value.code == 2


def test_inspect_reads_images_through_the_reader(tmp_path):
    from types import SimpleNamespace

    from keras_vit.inspect.inputs import load_images

    _zoo(tmp_path / "zoo")
    # load_images reads the layout's channels and input size only.
    alpha = load_images(
        [tmp_path / "zoo" / "a" / "alpha.png"], SimpleNamespace(channels=3, image_size=(1, 3)), background="black"
    )
    np.testing.assert_allclose(alpha[0], (np.array([ON_BLACK]) - 127.5) / 127.5, atol=1e-6)
    wide = load_images([tmp_path / "zoo" / "a" / "wide.png"], SimpleNamespace(channels=1, image_size=(2, 6)))
    np.testing.assert_allclose(wide[0, ..., 0], (np.array([WIDE_8BIT] * 2) - 127.5) / 127.5, atol=1e-6)


def test_predict_cli_composites_on_the_background_it_is_given(tmp_path, capsys):
    import keras

    import export
    from export.__main__ import main as cli

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
    model.save(tmp_path / "model.keras")
    rgba = np.zeros((32, 32, 4), np.uint8)
    rgba[:16] = (200, 100, 0, 128)
    rgba[16:] = (10, 20, 30, 0)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "alpha.png")
    for background, (top, bottom) in (("black", (ON_BLACK[0], ON_BLACK[1])), ("white", (ON_WHITE[0], ON_WHITE[1]))):
        composited = np.zeros((32, 32, 3), np.uint8)
        composited[:16], composited[16:] = top, bottom
        from_file = export.predict(tmp_path / "model.keras", [tmp_path / "alpha.png"], background=background)
        from_array = export.predict(tmp_path / "model.keras", [composited])
        assert from_file[0]["top_k"] == from_array[0]["top_k"]
    assert cli(["predict", str(tmp_path / "model.keras"), str(tmp_path / "alpha.png"), "--background", "0,0,0"]) == 0
    printed = capsys.readouterr().out
    black = export.predict(tmp_path / "model.keras", [tmp_path / "alpha.png"], background="black")
    assert f"{black[0]['top_k'][0]['probability']:.4f}" in printed


def _photo(width, height, seed):
    """Smooth colour fields with fine noise: compresses and decodes like a photograph (chroma varies)."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)).resize((width, height), Image.BICUBIC)
    noise = rng.normal(0, 10, (height, width, 3))
    return Image.fromarray(np.clip(np.asarray(coarse, float) + noise, 0, 255).astype(np.uint8))


def _jpeg_zoo(root):
    """JPEGs the crop-window decoder reads (4:2:0, 4:4:4, progressive, grey, odd sizes) and two only Pillow reads
    right (an EXIF turn, CMYK), plus a PNG; returns {name: kind that keras_vit.images.scan_images should give}."""
    kinds = {}

    def put(name, data, kind):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
        kinds[str(root / name)] = kind

    put("a/s420.jpg", _encode(_photo(203, 131, 0), "JPEG", quality=90), "plain_jpeg")
    put("a/s444.jpg", _encode(_photo(150, 97, 1), "JPEG", quality=95, subsampling=0), "plain_jpeg")
    put("a/progressive.jpg", _encode(_photo(120, 161, 2), "JPEG", quality=85, progressive=True), "plain_jpeg")
    put("a/grey.jpg", _encode(_photo(99, 77, 3).convert("L"), "JPEG", quality=90), "plain_jpeg")
    put("a/turned.jpg", _exif_jpeg(6), "jpeg")
    put("a/cmyk.jpg", _encode(_photo(64, 48, 4).convert("CMYK"), "JPEG", quality=90), "jpeg")
    put("a/photo.png", _encode(_photo(80, 60, 5), "PNG"), "other")
    for i in range(2):  # a second class, so the folder is a dataset
        put(f"b/{i}.jpg", _encode(_photo(64, 64, 10 + i), "JPEG"), "plain_jpeg")
    return kinds


def test_crop_windows_decode_to_the_readers_pixels(tmp_path):
    """The Inception crop decodes only its window of a JPEG (tf.io.decode_and_crop_jpeg), yet every window equals
    the same window of keras_vit.images.read_image's full decode, bit for bit; the JPEGs TensorFlow would read
    differently (EXIF turn, CMYK) and other formats go through the reader."""
    import tensorflow as tf

    from training import data
    from training.data import decoders, preprocess

    kinds = _jpeg_zoo(tmp_path)
    paths = sorted(str(p) for p in tmp_path.rglob("*.*"))
    scanned = dict(zip(paths, images.scan_images(paths)))
    for path, (reason, kind) in scanned.items():
        assert reason is None and kind == kinds[path], path
    source = data.load_source(f"folder:{tmp_path}", holdout_fraction=0.3)
    tfds_window = decoders.window_encoded  # the TFDS source's: encoded bytes instead of paths
    for path in paths:
        full = images.read_image(path)
        for seed in range(6):
            box = preprocess.inception_box((0.05, 1.0), tf.constant([seed, 7], tf.int64))
            begin, size = (t.numpy() for t in box(tf.constant(full.shape)))
            expected = full[begin[0] : begin[0] + size[0], begin[1] : begin[1] + size[1]]
            np.testing.assert_array_equal(source.decode_window(tf.constant(path), box).numpy(), expected)
            if kinds[path] == "plain_jpeg":
                encoded = tf.constant(images.files.read_bytes(path))
                np.testing.assert_array_equal(tfds_window(encoded, box).numpy(), expected)
        # The TFDS decoder reads plain JPEGs (and PNGs) to the reader's pixels too.
        if scanned[path][1] != "jpeg":
            np.testing.assert_array_equal(
                decoders.decode_encoded(tf.constant(images.files.read_bytes(path))).numpy(), full
            )


@pytest.mark.slow
def test_the_training_stream_is_the_same_with_and_without_window_decoding(tmp_path):
    """Decoding crop windows is a speed-up only: the batches equal those of decoding every image in full."""
    import dataclasses

    from training import data
    from training.options.config import TrainConfig

    _jpeg_zoo(tmp_path)
    source = data.load_source(f"folder:{tmp_path}", holdout_fraction=0.3)
    full = dataclasses.replace(source, decode_window=None)
    config = TrainConfig(image_size=24, batch_size=3, seed=5, randaugment=(2, 10), mixup_alpha=0.2)
    fast = list(data.train_dataset(source, config, num_steps=4).as_numpy_iterator())
    slow = list(data.train_dataset(full, config, num_steps=4).as_numpy_iterator())
    for (x_fast, y_fast), (x_slow, y_slow) in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(x_fast, x_slow)
        np.testing.assert_array_equal(y_fast, y_slow)
