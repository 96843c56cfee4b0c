"""The exported TFLite models as phone apps use them: embedded metadata, probability outputs, and MediaPipe Tasks'
`ImageClassifier` (the C++ task runtime Android, iOS and web apps run) as the client.

References are independent of export/: LiteRT's interpreter fed by hand, TFLite's own flatbuffer schema, Python's
zipfile, and MediaPipe itself. mediapipe is a requirement (requirements.txt): these tests never skip.
"""

import io
import zipfile

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from mediapipe import Image, ImageFormat
from mediapipe.tasks.python.core.base_options import BaseOptions
from mediapipe.tasks.python.vision import ImageClassifier, ImageClassifierOptions

import export
from export.__main__ import main as cli
from export.tflite import metadata
from tests.support import export_fixtures as fx

LABELS = [f"class {i}" for i in range(10)]


def softmax(logits):
    z = np.asarray(logits, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def litert(flatbuffer, pixels):
    """Runs a model image by image with LiteRT on uint8 pixels at its size: raw pixels into a uint8 input, the
    project's (x - 127.5) / 127.5 into a float input; dequantized outputs."""
    interpreter = Interpreter(model_content=bytes(flatbuffer), num_threads=1)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    rows = []
    for image in pixels:
        feed = image[None] if inp["dtype"] == np.uint8 else (image[None].astype(np.float32) - 127.5) / 127.5
        interpreter.set_tensor(inp["index"], feed)
        interpreter.invoke()
        y = interpreter.get_tensor(out["index"])[0]
        if out["dtype"] != np.float32:
            scale, zero = out["quantization"]
            y = (y.astype(np.float32) - zero) * scale
        rows.append(y)
    return np.array(rows)


def mediapipe_classify(path, pixels):
    """MediaPipe's ImageClassifier on each image: (scores (N, classes) by category index, names by index)."""
    options = ImageClassifierOptions(base_options=BaseOptions(model_asset_path=str(path)), max_results=-1)
    scores, names = [], None
    with ImageClassifier.create_from_options(options) as classifier:
        for image in pixels:
            result = classifier.classify(Image(image_format=ImageFormat.SRGB, data=np.ascontiguousarray(image)))
            (head,) = result.classifications
            row = np.full(len(head.categories), np.nan)
            found = {}
            for category in head.categories:
                row[category.index] = category.score
                found[category.index] = category.category_name
            names = names or [found[i] for i in range(len(found))]
            assert [found[i] for i in range(len(found))] == names
            scores.append(row)
    return np.array(scores), names


def random_pixels(n, size, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def tiny():
    model = fx.random_classifier("testing", head_scale=4.0)
    raw = export.convert_tflite(model, "float32", metadata=False)  # the converter's own flatbuffer
    return model, raw, export.convert_tflite(model, "float32", labels=LABELS)


@pytest.mark.slow
def test_metadata_is_standard_and_leaves_litert_bit_identical(tiny, tmp_path):
    from tensorflow.lite.python import schema_py_generated as schema

    _, raw, _ = tiny
    full = metadata.with_metadata(
        raw, LABELS, (32, 32), np.float32, "probabilities", name="tiny", description="a test", version="7",
        license="Apache-2.0",
    )  # fmt: skip
    # Read with TFLite's schema and zipfile, not export/: a TFLITE_METADATA buffer with the "M001" identifier,
    # and the labels as an appended zip.
    root = schema.Model.GetRootAs(bytearray(full), 0)
    entries = {root.Metadata(i).Name(): root.Metadata(i).Buffer() for i in range(root.MetadataLength())}
    assert b"TFLITE_METADATA" in entries
    assert root.Buffers(entries[b"TFLITE_METADATA"]).DataAsNumpy().tobytes()[4:8] == b"M001"
    with zipfile.ZipFile(io.BytesIO(full)) as zf:
        assert zf.namelist() == ["labels.txt"] and zf.read("labels.txt").decode().splitlines() == LABELS
        assert zf.getinfo("labels.txt").compress_type == zipfile.ZIP_STORED
    info = export.read_metadata(full)
    assert [info[key] for key in ("name", "description", "version", "license")] == ["tiny", "a test", "7", "Apache-2.0"]
    assert info["input"]["mean"] == [127.5] and info["input"]["std"] == [127.5] and info["input"]["size"] == [32, 32]
    assert info["input"]["min"] == [-1.0] and info["input"]["max"] == [1.0] and info["input"]["color_space"] == "RGB"
    assert info["output"]["kind"] == "probabilities"
    assert info["output"]["min"] == [0.0] and info["output"]["max"] == [1.0]
    assert info["labels"] == LABELS and export.read_metadata(raw) is None
    # Writing it again replaces it (one entry, one labels file).
    again = metadata.with_metadata(full, LABELS[::-1], (32, 32), np.float32, "probabilities")
    root = schema.Model.GetRootAs(bytearray(again), 0)
    assert [root.Metadata(i).Name() for i in range(root.MetadataLength())].count(b"TFLITE_METADATA") == 1
    assert export.read_metadata(again)["labels"] == LABELS[::-1]
    assert len(full) - len(raw) < 2048  # the cost: a few hundred bytes of metadata and the labels zip

    pixels = random_pixels(8, 32)
    assert np.array_equal(litert(raw, pixels), litert(full, pixels))  # bit-identical outputs


@pytest.mark.slow
def test_default_conversion_outputs_probabilities_that_mediapipe_reads(tiny, tmp_path):
    model, _, flatbuffer = tiny
    path = tmp_path / "tiny.tflite"
    path.write_bytes(flatbuffer)
    pixels = random_pixels(16, 32, seed=1)
    probabilities = litert(flatbuffer, pixels)
    keras_logits = model.predict((pixels.astype(np.float32) - 127.5) / 127.5, verbose=0)
    np.testing.assert_allclose(probabilities, softmax(keras_logits), atol=1e-5)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    scores, names = mediapipe_classify(path, pixels)
    assert names == LABELS
    np.testing.assert_allclose(scores, probabilities, atol=1e-4)
    # With logits kept, the metadata says so and states no score bounds.
    logits_model = export.convert_tflite(model, "float32", output="logits")
    assert export.read_ops(flatbuffer)["SOFTMAX"] == export.read_ops(logits_model)["SOFTMAX"] + 1  # one appended
    info = export.read_metadata(logits_model)
    assert info["output"]["kind"] == "logits" and info["output"]["max"] is None
    np.testing.assert_allclose(litert(logits_model, pixels), keras_logits, atol=1e-4)


@pytest.mark.slow
def test_predict_reads_labels_and_probabilities_from_metadata(tiny, tmp_path, capsys):
    from PIL import Image as PILImage

    path = tmp_path / "no_sidecar.tflite"
    path.write_bytes(tiny[2])
    assert not path.with_suffix(".json").exists()
    pixels = random_pixels(2, 32, seed=3)
    files = []
    for i, image in enumerate(pixels):
        files.append(tmp_path / f"image{i}.png")
        PILImage.fromarray(image).save(files[-1])
    expected = litert(path.read_bytes(), pixels)
    assert cli(["predict", str(path), *map(str, files), "--top-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for i in range(2):
        best = int(expected[i].argmax())
        # The label from the metadata, the model's own probability (not a softmax of probabilities).
        assert lines[3 * i + 1].split() == [str(best), f"{expected[i, best]:.4f}", *LABELS[best].split()]


@pytest.mark.slow
def test_uint8_io_model_is_verified_on_raw_pixels(tmp_path, monkeypatch):
    # A random model's full-int8 version disagrees with it on noise (the digits model is checked below);
    # this test is about which figures are reported, so the budget is opened.
    from export.kinds import classifier as verify

    monkeypatch.setitem(verify.BUDGETS, "int8", {"max_accuracy_drop": 100.0})
    model = fx.random_classifier("testing", head_scale=4.0)
    pixels = random_pixels(48, 32, seed=4)
    report = export.export_model(
        export.ExportSource(model, representative_images=pixels, heldout=(pixels, None)), tmp_path,
        export.ExportOptions(formats=("tflite",), quantize=("int8",), int8_io="uint8", latency_runs=2,
                             latency_warmup=1),
    )  # fmt: skip
    (entry,) = report["artifacts"]
    assert entry["fed_as"] == "raw uint8 pixels" and entry["output"] == "probabilities"
    flatbuffer = (tmp_path / "model_int8.tflite").read_bytes()
    keras_top1 = model.predict((pixels.astype(np.float32) - 127.5) / 127.5, verbose=0).argmax(-1)
    app_agreement = np.mean(litert(flatbuffer, pixels).argmax(-1) == keras_top1)
    assert entry["top1_agreement"] == pytest.approx(app_agreement)
    assert "project_preprocessing" in entry and entry["metadata"]["input"]["min"] == [0.0]
    assert report["tflite_output"] == "probabilities"


@pytest.mark.slow  # uses the main job's training run; MediaPipe itself takes ~2 s for the six models
def test_mediapipe_classifies_the_main_jobs_models(digits_main_job):
    import keras

    import keras_vit  # noqa: F401  (registers the layers for load_model)

    workdir = digits_main_job.workdir
    labels = (workdir / "labels.txt").read_text().split()
    with np.load(workdir / "samples" / "heldout.npz") as held:
        pixels, truth = held["images"], held["labels"]  # stored at the model's input size
    model = keras.saving.load_model(workdir / "model.keras", compile=False)
    keras_top1 = model.predict((pixels.astype(np.float32) - 127.5) / 127.5, verbose=0).argmax(-1)
    paths = sorted((workdir / "export").glob("*.tflite"))
    # The default modes (int8_int16 and int4_weights are asked for by name; MediaPipe cannot feed int16 inputs).
    assert [p.name for p in paths] == [f"model_{m}.tflite" for m in sorted(export.tflite.converter.DEFAULT_MODES)]
    # The uint8-I/O integer model is not part of the main job; apps on integer-only hardware use it.
    with np.load(workdir / "samples" / "calibration.npz") as calibration:
        uint8_io = export.convert_tflite(model, "int8", calibration["images"], int8_io="uint8", labels=labels)
    paths.append(workdir / "int8_uint8_io_for_mediapipe.tflite")
    paths[-1].write_bytes(uint8_io)

    figures = {}
    for path in paths:
        reference = litert(path.read_bytes(), pixels)
        scores, names = mediapipe_classify(path, pixels)
        assert names == labels, path.name
        agreement = np.mean(scores.argmax(-1) == reference.argmax(-1))
        figures[path.name] = (agreement, np.mean(scores.argmax(-1) == keras_top1), np.mean(scores.argmax(-1) == truth))
        if path.name in ("model_float32.tflite", "model_float16.tflite"):
            assert agreement == 1.0, (path.name, agreement)
        else:
            assert agreement >= 0.99, (path.name, agreement)
        if path.name == "model_float32.tflite":
            np.testing.assert_allclose(scores, reference, atol=1e-4)
            np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-4)  # probabilities, not logits
    print("MediaPipe top-1 agreement with LiteRT / with Keras / accuracy:", figures)


@pytest.mark.slow
def test_runner_takes_the_normalisation_from_the_metadata(tiny, monkeypatch):
    from export.tflite.runner import TFLiteRunner

    _, raw, _ = tiny
    # A model whose metadata says x / 255 (mean 0, std 255) instead of the project's (x - 127.5) / 127.5.
    monkeypatch.setattr(metadata, "PIXEL_CENTER", 0.0)
    monkeypatch.setattr(metadata, "PIXEL_SCALE", 255.0)
    other = metadata.with_metadata(raw, LABELS, (32, 32), np.float32, "probabilities")
    runner = TFLiteRunner(other)
    assert runner.normalization == (0.0, 255.0) and runner.labels == LABELS
    pixels = random_pixels(4, 32, seed=5)
    interpreter = Interpreter(model_content=raw)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    expected = []
    for image in pixels:
        interpreter.set_tensor(inp["index"], image[None].astype(np.float32) / 255.0)
        interpreter.invoke()
        expected.append(interpreter.get_tensor(out["index"])[0])
    np.testing.assert_allclose(runner.outputs_from_images(list(pixels))["probabilities"], np.array(expected), atol=1e-6)
