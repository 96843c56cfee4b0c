"""Image embedders on device (export/tflite/converter.py: `convert_embedder`): head-less models exported as TFLite
feature vectors that
MediaPipe Tasks' `ImageEmbedder` loads unchanged.

References are independent of export/: the Keras model's own features, numpy for cosines and norms, and MediaPipe
itself as the client. mediapipe is a requirement (requirements.txt): these tests never skip.
"""

import numpy as np
import pytest
from mediapipe import Image, ImageFormat
from mediapipe.tasks.python.core.base_options import BaseOptions
from mediapipe.tasks.python.vision import ImageEmbedder, ImageEmbedderOptions
from PIL import Image as PILImage

import export
from export.__main__ import main as cli
from export.kinds import embedder
from export.tflite import metadata
from export.tflite.converter import convert_embedder

# The fast module's modes. Full-integer int8 of a random network calibrated on noise keeps a cosine of only ~0.89
# (measured), below its budget; int8 is checked on the trained digits model (the slow test below).
FAST_MODES = ("float32", "float16", "dynamic_int8", "int8_matmul")


def cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def mediapipe_embed(path, pixels, l2_normalize=False):
    options = ImageEmbedderOptions(base_options=BaseOptions(model_asset_path=str(path)), l2_normalize=l2_normalize)
    rows = []
    with ImageEmbedder.create_from_options(options) as task:
        for image in pixels:
            result = task.embed(Image(image_format=ImageFormat.SRGB, data=np.ascontiguousarray(image)))
            (vector,) = result.embeddings
            rows.append(np.asarray(vector.embedding, np.float64))
    return np.array(rows)


def keras_features(model, pixels):
    return model.predict((pixels.astype(np.float32) - 127.5) / 127.5, verbose=0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random head-less ViT (num_classes=0) exported once in FAST_MODES (TFLite only: the ONNX and OpenVINO
    embedders have their own module, tests/export/test_embedder_portable.py)."""
    import keras

    import keras_vit

    keras.utils.set_random_seed(0)
    model = keras_vit.create_model("testing", num_classes=0)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (24, 32, 32, 3), dtype=np.uint8)
    calibration = rng.integers(0, 256, (24, 32, 32, 3), dtype=np.uint8)
    folder = tmp_path_factory.mktemp("embedder")
    model.save(folder / "features.keras")
    report = export.export_model(
        export.ExportSource(model, representative_images=calibration, heldout=(pixels, None),
                            name=str(folder / "features.keras")),
        folder / "export",
        export.ExportOptions(formats="saved_model,tflite", quantize=",".join(FAST_MODES), latency_runs=2),
    )  # fmt: skip
    return model, pixels, folder, report


@pytest.mark.slow
def test_centred_vectors_are_checked_too(tiny):
    """Vectors that share a direction make a cosine near 1 say less than it seems (random networks' did, mean
    neighbour cosine ~0.95, while their attention projections started equal); the float32 file must also keep the
    vectors centred on their mean."""
    model, pixels, folder, _ = tiny
    reference = keras_features(model, pixels)
    centre = reference.mean(0)
    vectors = mediapipe_embed(folder / "export" / "embedder_float32.tflite", pixels)
    assert cosine(vectors - centre, reference - centre).min() >= 0.9999


@pytest.mark.slow
def test_mediapipe_image_embedder_matches_keras(tiny):
    model, pixels, folder, report = tiny
    assert report["passed"] and report["kind"] == "embedder"
    assert [a["name"] for a in report["artifacts"]] == [f"embedder_{m}.tflite" for m in FAST_MODES]
    assert "saved_model not written" in " ".join(report["notes"])
    reference = keras_features(model, pixels)
    for mode in FAST_MODES:
        vectors = mediapipe_embed(folder / "export" / f"embedder_{mode}.tflite", pixels)
        assert vectors.shape == reference.shape
        similarity = cosine(vectors, reference)
        floor = 0.9999 if mode == "float32" else embedder.BUDGETS[mode]["min_cosine"]
        assert similarity.min() >= floor, (mode, similarity.min())
        entry = next(a for a in report["artifacts"] if a["quantization"] == mode)
        assert entry["min_cosine"] == pytest.approx(similarity.min(), abs=1e-4)
        assert entry["gpu"]["verdict"] == "fully accelerated" and entry["gpu"]["within_budget"], entry["gpu"]
    # float32: MediaPipe's vector is the Keras vector, not only its direction.
    float32 = mediapipe_embed(folder / "export" / "embedder_float32.tflite", pixels)
    np.testing.assert_allclose(float32, reference, rtol=1e-4, atol=1e-4)


def litert_vectors(path, x):
    """LiteRT's interpreter on model-space images, one at a time (the files take batch 1), without export/'s runner."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    rows = []
    for image in x:
        interpreter.set_tensor(inp["index"], image[None].astype(inp["dtype"]))
        interpreter.invoke()
        rows.append(np.asarray(interpreter.get_tensor(out["index"])[0], np.float64))
    return np.array(rows)


@pytest.mark.slow
def test_each_file_is_also_judged_with_the_projects_preprocessing(tiny):
    """As a classifier's: an embedder file is judged fed as an app feeds it (the figures reported) and with the
    project's (x - 127.5) / 127.5 (`project_preprocessing`), both held to its budget; the latter is recomputed here
    with LiteRT's own interpreter and numpy."""
    model, pixels, folder, report = tiny
    reference = keras_features(model, pixels)
    x = ((pixels.astype(np.float32) - 127.5) / 127.5).astype(np.float32)
    for entry in report["artifacts"]:
        project, budget = entry["project_preprocessing"], embedder.BUDGETS[entry["quantization"]]
        similarity = cosine(litert_vectors(folder / "export" / entry["name"], x), reference)
        assert project["min_cosine"] == pytest.approx(similarity.min(), abs=1e-4), entry["name"]
        assert project["min_cosine"] >= budget["min_cosine"] and project["images"] == len(pixels)
        assert entry["fed_as"] == "float32 pixels normalised as MediaPipe does: x * (2 / 255) - 1"
    table = export.format_table(report)
    assert table.count("with the project's preprocessing: min cos") == len(FAST_MODES)


@pytest.mark.slow
def test_metadata_states_the_embedder_form(tiny):
    _, _, folder, _ = tiny
    for mode in ("float32", "dynamic_int8"):
        meta = export.read_metadata((folder / "export" / f"embedder_{mode}.tflite").read_bytes())
        assert meta["output"]["name"] == "embedding" and meta["output"]["kind"] == "embedding"
        assert meta["labels"] is None and meta["output"]["labels_file"] is None
        assert meta["input"]["mean"] == [127.5] and meta["input"]["std"] == [127.5]
        assert "not L2-normalised" in meta["description"] and "32-dimensional" in meta["description"]
        assert metadata.QUANTIZATION_WORDS[mode] in meta["description"]


@pytest.mark.slow
def test_l2_normalised_embedder_and_pre_logits(tiny, tmp_path):
    import keras

    import keras_vit

    model, pixels, _, _ = tiny
    path = tmp_path / "unit.tflite"
    path.write_bytes(convert_embedder(model, "float32", l2_normalize=True))
    vectors = mediapipe_embed(path, pixels[:6])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5)
    reference = keras_features(model, pixels[:6])
    np.testing.assert_allclose(vectors, reference / np.linalg.norm(reference, axis=-1, keepdims=True), atol=1e-5)
    assert "L2-normalised (unit length)" in export.read_metadata(path.read_bytes())["description"]
    # A head-less model with a pre_logits layer: its 16 tanh outputs are the vector.
    keras.utils.set_random_seed(1)
    with_pre_logits = keras_vit.create_model("testing", num_classes=0, representation_size=16)
    path.write_bytes(convert_embedder(with_pre_logits, "float32"))
    vectors = mediapipe_embed(path, pixels[:6])
    assert vectors.shape == (6, 16) and np.abs(vectors).max() <= 1.0
    assert cosine(vectors, keras_features(with_pre_logits, pixels[:6])).min() >= 0.9999


@pytest.mark.slow
def test_feature_model_cuts_the_head_off_a_classifier():
    import keras

    import keras_vit

    keras.utils.set_random_seed(2)
    classifier = keras_vit.create_model("testing", num_classes=5)
    headless = embedder.headless_model(classifier)
    assert headless.config.num_classes == 0 and embedder.is_feature_model(headless)
    assert not embedder.is_feature_model(classifier)
    x = np.random.default_rng(3).uniform(-1, 1, (4, 32, 32, 3)).astype(np.float32)
    pooled = keras.Model(classifier.inputs, classifier.get_layer("head").input)
    np.testing.assert_allclose(headless.predict(x, verbose=0), pooled.predict(x, verbose=0), rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_cli_predict_prints_size_and_norm_and_similar_prints_the_cosine(tiny, tmp_path, capsys):
    model, pixels, folder, _ = tiny
    files = []
    for i in range(2):
        files.append(tmp_path / f"{i}.png")
        PILImage.fromarray(pixels[i]).save(files[-1])
    reference = keras_features(model, pixels[:2])
    for artifact in (folder / "export" / "embedder_float32.tflite", folder / "features.keras"):
        assert cli(["predict", str(artifact), str(files[0])]) == 0
        printed = capsys.readouterr().out
        assert f"embedding: 32 values, L2 norm {np.linalg.norm(reference[0]):.4f}" in printed, printed
        assert cli(["similar", str(artifact), str(files[0]), str(files[1])]) == 0
        value = float(capsys.readouterr().out.split()[2])
        assert value == pytest.approx(cosine(reference[0], reference[1]), abs=2e-6)
    with pytest.raises(SystemExit):  # one image: argparse's usage error
        cli(["similar", str(folder / "export" / "embedder_float32.tflite"), str(files[0])])
    import keras_vit

    keras_vit.create_model("testing", num_classes=3).save(tmp_path / "classifier.keras")
    assert cli(["similar", str(tmp_path / "classifier.keras"), str(files[0]), str(files[1])]) == 2
    assert "is a classifier (logits out), not an image embedder" in capsys.readouterr().err


@pytest.mark.slow  # the main job's digits model with its head cut off, in all five modes (~1.5 min)
def test_digits_embedder_in_every_mode(digits_main_job, tmp_path):
    import keras

    import keras_vit  # noqa: F401  (registers the layers)

    workdir = digits_main_job.workdir
    classifier = keras.saving.load_model(workdir / "model.keras", compile=False)
    model = embedder.headless_model(classifier)
    with np.load(workdir / "samples" / "heldout.npz") as held, np.load(workdir / "samples" / "calibration.npz") as c:
        pixels, calibration = held["images"], c["images"]
    source = export.ExportSource(model, representative_images=calibration, heldout=(pixels, None))
    report = export.export_model(source, tmp_path / "out", export.ExportOptions(formats="tflite", latency_runs=3))
    reference = keras_features(model, pixels)
    figures = {}
    for entry in report["artifacts"]:
        mode = entry["quantization"]
        similarity = cosine(mediapipe_embed(tmp_path / "out" / entry["name"], pixels), reference)
        figures[mode] = (similarity.min(), similarity.mean(), entry["gpu"]["figures"]["min_cosine"])
        assert similarity.min() >= (0.9999 if mode == "float32" else embedder.BUDGETS[mode]["min_cosine"]), mode
        assert entry["gpu"]["verdict"] == "fully accelerated" and entry["gpu"]["within_budget"], entry["gpu"]
    assert sorted(figures) == sorted(export.tflite.converter.DEFAULT_MODES)  # the opt-in ai-edge-quantizer modes aside
    assert cosine(reference[:-1], reference[1:]).mean() < 0.5  # trained features tell the digits apart
    print("digits embedder: MediaPipe min / mean cosine with Keras, GPU min cosine:", figures)
