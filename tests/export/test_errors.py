"""Bad input to export/: clear errors, and a failed export leaves the previous artifacts untouched."""

import hashlib

import numpy as np
import pytest

import export
from export.__main__ import main as cli
from export.keras_runner import KerasRunner
from export.tflite.runner import TFLiteRunner
from keras_vit import files
from tests import support
from tests.support import export_fixtures as fx


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random "testing"-variant classifier (32 px) saved as .keras."""
    root = tmp_path_factory.mktemp("tiny")
    model = fx.random_classifier("testing", head_scale=4.0)
    model.save(root / "model.keras")
    return root, model


def tree_digest(folder):
    """{relative path: sha256} of every file under `folder`."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_file_that_is_not_a_model(tmp_path, capsys):
    junk = tmp_path / "junk.keras"
    junk.write_bytes(b"this is not a zip archive")
    with pytest.raises(export.ExportError, match="not a .keras archive"):
        export.export_path(junk)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(export.ExportError, match=r"ending in \.keras"):
        export.export_path(text)
    with pytest.raises(export.ExportError, match="not a training workdir"):
        export.export_path(tmp_path)  # a directory without model.keras
    with pytest.raises(export.ExportError, match="No model file"):
        export.export_path(tmp_path / "missing.keras")
    assert cli([str(junk)]) == 2
    assert "not a .keras archive" in capsys.readouterr().err


def test_a_model_of_other_inputs_is_refused_and_a_naflex_one_names_its_tflite_modes(tmp_path):
    """NaFlex models export (tests/training/test_naflex_cli.py); inputs that are neither images nor NaFlex patches
    are refused in one line, and so is a TFLite mode a NaFlex export does not offer, before anything is written."""
    import keras

    import keras_vit

    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    pair = keras.Model([a, b], keras.layers.Add()([a, b]), name="pair")
    with pytest.raises(export.ExportError, match=r"pair takes a, b, not one batch of images.*NaFlexViT"):
        export.export_model(pair, tmp_path / "out")
    naflex = keras_vit.from_pretrained(str(support.FIXTURES / "interop_families2" / "hf_siglip2_naflex"))
    with pytest.raises(export.ExportError, match=r"--quantize int8 is not offered for a NaFlex model.*dynamic_int8"):
        export.export_model(naflex, tmp_path / "out", export.ExportOptions(quantize="float32,int8"))
    assert not (tmp_path / "out").exists()


def test_a_truncated_keras_file(tiny, tmp_path):
    root, _ = tiny
    data = (root / "model.keras").read_bytes()
    cut = tmp_path / "cut.keras"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(export.ExportError, match="truncated"):
        export.export_path(cut)


def test_unknown_quantization_mode(tiny, tmp_path, capsys):
    root, _ = tiny
    with pytest.raises(export.ExportError, match=r"int4.*float32, float16, dynamic_int8, int8"):
        export.export_path(root / "model.keras", out=tmp_path / "out", quantize="float32,int4")
    with pytest.raises(export.ExportError, match="Unknown format"):
        export.export_path(root / "model.keras", out=tmp_path / "out", formats="coreml")
    assert cli([str(root / "model.keras"), "--out", str(tmp_path / "out"), "--quantize", "int4"]) == 2
    assert "int4" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # rejected before anything was written


@pytest.mark.slow
def test_int8_without_representative_data(tiny, tmp_path):
    root, model = tiny
    with pytest.raises(export.ExportError, match="--representative-data"):
        export.export_path(root / "model.keras", out=tmp_path / "out", quantize="int8")
    with pytest.raises(export.ExportError, match="representative images"):
        export.convert_tflite(model, "int8")
    with pytest.raises(export.ExportError, match=r"int8_matmul needs representative images.*dynamic_int8"):
        export.export_path(root / "model.keras", out=tmp_path / "out", quantize="float32,int8_matmul")
    with pytest.raises(export.ExportError, match="int8_matmul needs representative images"):
        export.convert_tflite(model, "int8_matmul")
    assert not (tmp_path / "out").exists()


def test_bad_representative_data(tiny, tmp_path):
    root, _ = tiny
    floats = tmp_path / "floats.npz"
    np.savez(floats, images=np.zeros((4, 32, 32, 3), np.float32))
    with pytest.raises(export.ExportError, match="must be uint8"):
        export.export_path(root / "model.keras", representative_data=floats, quantize="int8")
    empty = tmp_path / "empty_folder"
    empty.mkdir()
    with pytest.raises(export.ExportError, match="holds no images"):
        export.export_path(root / "model.keras", representative_data=empty, quantize="int8")


def test_predict_on_a_corrupt_image(tiny, tmp_path, capsys):
    root, _ = tiny
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    with pytest.raises(export.ExportError, match="Cannot read the image .*broken.png"):
        export.predict(root / "model.keras", [bad])
    assert cli(["predict", str(root / "model.keras"), str(bad)]) == 2
    assert "broken.png" in capsys.readouterr().err
    with pytest.raises(export.ExportError, match="No image file"):
        export.predict(root / "model.keras", [tmp_path / "absent.png"])


@pytest.mark.slow
def test_wrong_shaped_or_typed_tensors(tiny):
    _, model = tiny
    tflite = TFLiteRunner(export.convert_tflite(model, "float32"))
    keras_runner = KerasRunner(model)
    for runner in (tflite, keras_runner):
        with pytest.raises(export.ExportError, match=r"\(N, 32, 32, 3\).*\(1, 20, 20, 3\)"):
            runner.outputs(np.zeros((1, 20, 20, 3), np.float32))
        with pytest.raises(export.ExportError, match="float32"):
            runner.outputs(np.zeros((1, 32, 32, 3), np.float64))
        with pytest.raises(export.ExportError, match="shaped"):
            runner.outputs(np.zeros((32, 32, 3), np.float32))
    # The TFLite model ends in a softmax by default: its one output is named so.
    assert list(tflite.outputs(np.zeros((1, 32, 32, 3), np.float32))) == ["probabilities"]
    with pytest.raises(export.ExportError, match=r"uint8 pixels shaped \(N, 32, 32, 3\).*float32"):
        tflite.outputs_from_pixels(np.zeros((1, 32, 32, 3), np.float32))
    with pytest.raises(export.ExportError, match="Unknown TFLite output 'scores'.*logits"):
        export.convert_tflite(model, "float32", output="scores")
    with pytest.raises(export.ExportError, match="has a line break.*one name per line"):
        export.convert_tflite(model, "float32", labels=["a\nb", *map(str, range(9))])
    with pytest.raises(export.ExportError, match="9 labels for a model with 10 outputs"):
        export.convert_tflite(model, "float32", labels=list(map(str, range(9))))
    with pytest.raises(export.ExportError, match="uint8"):
        export.predict(tiny[0] / "model.keras", [np.zeros((8, 8, 3), np.float32)])
    with pytest.raises(export.ExportError, match=r"\(H, W, 3\)"):
        export.predict(tiny[0] / "model.keras", [np.zeros((8, 8), np.uint8)])


@pytest.mark.slow  # three exports with SavedModels: ~25 s on 2 cores
def test_previous_artifacts_survive_a_failed_export(tiny, tmp_path, monkeypatch):
    root, _ = tiny
    out = tmp_path / "out"
    options = dict(out=out, formats="saved_model,tflite", quantize="float32", latency_runs=2, gpu_check="off")
    export.export_path(root / "model.keras", **options)
    before = tree_digest(out)
    assert {"report.json", "model_float32.tflite", "saved_model/saved_model.pb"} <= set(before)

    # 1. A verification failure: an impossible budget for float32.
    monkeypatch.setitem(export.kinds.classifier.BUDGETS, "float32", {"max_abs_logit_diff": -1.0})
    with pytest.raises(export.VerificationError, match="max abs probability diff") as caught:
        export.export_path(root / "model.keras", **options)
    assert "nothing in the output directory was changed" in str(caught.value)
    assert not caught.value.report["passed"]
    assert tree_digest(out) == before
    monkeypatch.undo()

    # 2. A crash in the middle: the SavedModel is already staged when the TFLite conversion blows up.
    def explode(*args, **kwargs):
        raise RuntimeError("simulated crash during conversion")

    monkeypatch.setattr(export.tflite.converter, "convert_described", explode)
    with pytest.raises(RuntimeError, match="simulated crash"):
        export.export_path(root / "model.keras", **options)
    assert tree_digest(out) == before
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no staging left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nor beside it, where it is built now


def test_atomic_write_keeps_the_old_file_when_the_write_fails(tmp_path):
    target = tmp_path / "model.tflite"
    files.atomic_write_bytes(target, b"old model")
    with pytest.raises(TypeError):
        files.atomic_write_bytes(target, "not bytes")
    assert target.read_bytes() == b"old model"
    assert [p.name for p in tmp_path.iterdir()] == ["model.tflite"]


def test_replacing_a_directory_keeps_the_old_one_until_the_new_one_is_in_place(tmp_path, monkeypatch):
    target, staged = tmp_path / "saved_model", tmp_path / "staged"
    target.mkdir()
    (target / "a.txt").write_text("old")
    staged.mkdir()
    (staged / "a.txt").write_text("new")
    real_replace = files.os.replace
    calls = []

    def flaky_replace(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # the move of the new directory into place
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", flaky_replace)
    with pytest.raises(OSError, match="disk full"):
        files.replace_path(staged, target)
    assert (target / "a.txt").read_text() == "old"
    monkeypatch.undo()
    files.replace_path(staged, target)
    assert (target / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved_model"]


def test_predict_on_something_that_is_not_an_artifact(tmp_path):
    image = tmp_path / "x.png"
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    with pytest.raises(export.ExportError, match="not a SavedModel directory"):
        export.predict(tmp_path, [image])
    with pytest.raises(export.ExportError, match="Cannot tell what"):
        export.predict(image, [image])
    with pytest.raises(export.ExportError, match="No .tflite file"):
        export.predict(tmp_path / "absent.tflite", [image])
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a flatbuffer")
    with pytest.raises(export.ExportError, match="LiteRT could not load"):
        export.predict(junk, [image])


@pytest.mark.slow
def test_a_model_saved_with_an_unknown_optimizer_schedule_still_exports(tmp_path):
    """A training run saves its optimizer, whose schedule class lives in training/ (never imported here)."""
    import keras

    @keras.saving.register_keras_serializable(package="export_test")
    class Schedule(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return 1e-3

        def get_config(self):
            return {}

    model = fx.random_classifier("testing", head_scale=4.0)
    model.compile(optimizer=keras.optimizers.AdamW(Schedule()), loss="mse")
    model.save(tmp_path / "model.keras")
    del keras.saving.get_custom_objects()["export_test>Schedule"]  # as in a process that never imported it
    with pytest.raises(Exception, match="Schedule"):
        keras.saving.load_model(tmp_path / "model.keras")
    report = export.export_path(tmp_path / "model.keras", formats="tflite", quantize="float32", latency_runs=2)
    assert report["passed"]
