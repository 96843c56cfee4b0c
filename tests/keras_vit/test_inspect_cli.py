"""`python -m keras_vit.inspect`: four PNGs for a variant + .npz, a .keras file, a training workdir; clear errors."""

import os
import runpy
import sys

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.inspect import FIGURES
from keras_vit.inspect.__main__ import main
from keras_vit.inspect.inputs import load_images
from keras_vit.inspect.layout import token_layout


def _assert_four_pngs(directory):
    names = sorted(os.listdir(directory))
    assert names == sorted(f"{name}.png" for name in FIGURES)
    for name in names:
        with Image.open(os.path.join(directory, name)) as picture:
            assert picture.format == "PNG" and min(picture.size) > 100


@pytest.fixture(scope="module")
def testing_keras(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "vit.keras"
    keras_vit.create_model("testing").save(path)
    return path


@pytest.mark.slow
def test_variant_and_npz(tmp_path, fixtures_dir, capsys):
    npz = str(fixtures_dir / "vit_tiny_official.npz")
    assert main(["testing", "--npz", npz, "--out", str(tmp_path / "a")]) == 0
    _assert_four_pngs(tmp_path / "a")
    assert "synthetic" in capsys.readouterr().err  # says it used made-up pictures
    assert main([npz, "--variant", "testing", "--image-size", "48", "--out", str(tmp_path / "b")]) == 0
    _assert_four_pngs(tmp_path / "b")


@pytest.mark.slow
def test_keras_file_with_image_files(tmp_path, testing_keras):
    rng = np.random.default_rng(0)
    grey, rgba = tmp_path / "grey.png", tmp_path / "rgba.jpg.png"
    Image.fromarray(rng.integers(0, 256, (50, 40), dtype=np.uint8), "L").save(grey)
    Image.fromarray(rng.integers(0, 256, (20, 30, 4), dtype=np.uint8), "RGBA").save(rgba)
    assert main([str(testing_keras), str(grey), str(rgba), "--out", str(tmp_path / "out")]) == 0
    _assert_four_pngs(tmp_path / "out")

    images = load_images([grey, rgba], token_layout(keras.saving.load_model(testing_keras)))
    assert images.shape == (2, 32, 32, 3) and images.dtype == np.float32
    assert images.min() >= -1 and images.max() <= 1
    np.testing.assert_array_equal(images[0, ..., 0], images[0, ..., 2])  # grey repeated into RGB


@pytest.mark.slow
def test_digits_workdir(tmp_path, capsys, monkeypatch):
    """A training workdir (model.keras + samples/heldout.npz) of a digits-shaped model: figures go to WORKDIR/plots.

    The model here is untrained (the digits training run writes the real one); what is checked is that the
    workdir contract is read: the held-out digits are used as inputs and the plots land in WORKDIR/plots.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = np.round(digits.images[:6] * 255 / 16).astype(np.uint8)[..., None].repeat(3, axis=-1)
    resized = keras.ops.image.resize(pixels.astype(np.float32), (16, 16), interpolation="bilinear")
    heldout = np.clip(np.round(keras.ops.convert_to_numpy(resized)), 0, 255).astype(np.uint8)
    (tmp_path / "samples").mkdir()
    np.savez(tmp_path / "samples" / "heldout.npz", images=heldout, labels=digits.target[:6].astype(np.int64))
    names = [str(i) for i in range(10)]
    keras_vit.create_model("testing", image_size=16, patch_size=4, num_classes=10, class_names=names).save(
        tmp_path / "model.keras"
    )
    from keras_vit.inspect import plots

    calls, draw = [], plots.save_figures
    monkeypatch.setattr(plots, "save_figures", lambda *a, **k: calls.append(k) or draw(*a, **k))
    assert main([str(tmp_path)]) == 0
    _assert_four_pngs(tmp_path / "plots")
    assert "Using the first 6 held-out images" in capsys.readouterr().err
    # The rollout's captions get the held-out labels; the class names are the model's own.
    assert list(calls[0]["labels"]) == list(digits.target[:6]) and "class_names" not in calls[0]


def _fails(argv, capsys, *fragments):
    assert main(argv) == 2
    err = capsys.readouterr().err
    for fragment in fragments:
        assert fragment in err, err
    return err


@pytest.mark.slow
def test_clear_errors(tmp_path, testing_keras, fixtures_dir, capsys):
    out = ["--out", str(tmp_path / "out")]
    _fails([str(tmp_path / "missing.keras"), *out], capsys, "Model file not found", "missing.keras")
    _fails([str(testing_keras), str(tmp_path / "nope.png"), *out], capsys, "Image file not found")

    broken = tmp_path / "broken.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(broken)
    broken.write_bytes(broken.read_bytes()[:60])
    _fails([str(testing_keras), str(broken), *out], capsys, "broken.png")

    big = tmp_path / "big.png"
    Image.fromarray(np.zeros((48, 48, 3), np.uint8)).save(big)
    _fails([str(testing_keras), str(big), "--no-resize", *out], capsys, "fixed at 32x32")

    four = tmp_path / "four.npz"
    np.savez(four, images=np.zeros((2, 32, 32, 4), np.uint8))
    _fails([str(testing_keras), str(four), *out], capsys, "(2, 32, 32, 4)", "3 channel(s)")

    not_vit = tmp_path / "cnn.keras"
    keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(4, 3), keras.layers.Flatten()]).save(not_vit)
    _fails([str(not_vit), *out], capsys, "not a keras_vit Vision Transformer")

    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(testing_keras.read_bytes()[:1000])
    _fails([str(truncated), *out], capsys, "not a readable .keras archive")

    _fails(["B/16", *out], capsys, "variant name", "--npz")
    _fails([str(fixtures_dir / "vit_tiny_official.npz"), *out], capsys, "--variant")
    _fails([str(fixtures_dir / "vit_tiny_official.npz"), "--variant", "Ti/16", *out], capsys, "does not fit the model")
    assert not (tmp_path / "out").exists()

    with pytest.raises(SystemExit) as exit_info:
        main([str(testing_keras)])  # a .keras file needs --out
    assert exit_info.value.code == 2 and "--out" in capsys.readouterr().err


@pytest.mark.slow
def test_module_entry_point(tmp_path, fixtures_dir, monkeypatch, capsys):
    # `python -m keras_vit.inspect` runs the package's __main__ as "__main__" (run in-process: a fresh
    # interpreter would spend ~10 s importing TensorFlow again).
    npz = str(fixtures_dir / "vit_tiny_official.npz")
    monkeypatch.setattr(sys, "argv", ["keras_vit.inspect", "testing", "--npz", npz, "--out", str(tmp_path)])
    monkeypatch.delitem(sys.modules, "keras_vit.inspect.__main__", raising=False)  # imported above for main()
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("keras_vit.inspect", run_name="__main__", alter_sys=True)
    assert exit_info.value.code == 0
    assert sorted(capsys.readouterr().out.split()) == sorted(str(tmp_path / f"{name}.png") for name in FIGURES)
    _assert_four_pngs(tmp_path)
