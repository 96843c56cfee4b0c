"""A model's own class_names are the labels of its export (TFLite metadata, sidecar, SavedModel assets, report) and
of `python -m export predict`."""

import json

import numpy as np
import pytest

import export
from export import sources
from export.__main__ import main as cli
from export.tflite.metadata_reader import read_metadata
from tests.support import export_fixtures as fx

NAMES = [
    "tench",
    "goldfish",
    "great white shark",
    "café au lait",
    "crane (n02012849)",
    *[f"kind {i}" for i in range(5)],
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A "testing" (32 px) classifier with class names saved alone as a .keras file (no workdir, no labels.txt),
    exported through the CLI to a float32 TFLite model."""
    root = tmp_path_factory.mktemp("named")
    model = fx.random_classifier("testing", head_scale=4.0, class_names=NAMES)
    model.save(root / "pretrained.keras")
    out = root / "out"
    args = [str(root / "pretrained.keras"), "--out", str(out), "--formats", "tflite", "--quantize", "float32"]
    assert cli([*args, "--latency-runs", "1"]) == 0
    return root, model, out


@pytest.mark.slow
def test_tflite_metadata_labels_are_the_models_class_names(exported):
    root, _, out = exported
    flatbuffer = (out / "model_float32.tflite").read_bytes()
    assert read_metadata(flatbuffer)["labels"] == NAMES
    assert json.loads((out / "model_float32.json").read_text())["labels"] == NAMES
    assert json.loads((out / "report.json").read_text())["labels"] == NAMES
    assert not (root / "labels.txt").exists()


@pytest.mark.slow
def test_predict_prints_index_probability_and_name_once(exported, tmp_path, capsys):
    from PIL import Image

    root, model, out = exported
    image = tmp_path / "noise.png"
    pixels = np.random.default_rng(3).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(image)
    # The Keras model's own softmax, computed here, says which classes and probabilities to expect.
    logits = np.asarray(model.predict((pixels[None].astype("float32") - 127.5) / 127.5, verbose=0), np.float64)[0]
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    top = np.argsort(-expected, kind="stable")[:3]
    for artifact in (root / "pretrained.keras", out / "model_float32.tflite"):
        capsys.readouterr()
        assert cli(["predict", str(artifact), str(image), "--top-k", "3"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == str(image) and len(lines) == 4
        for line, c in zip(lines[1:], top):
            index, probability, name = line.split(maxsplit=2)
            assert (int(index), name) == (c, NAMES[c]) and float(probability) == pytest.approx(expected[c], abs=2e-4)
            assert line.count(NAMES[c]) == 1 and "(class" not in line


def test_predict_without_names_prints_no_name_column(tmp_path):
    from PIL import Image

    unnamed = fx.random_classifier("testing", head_scale=4.0)
    unnamed.save(tmp_path / "unnamed.keras")
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / "black.png")
    results = export.predict(tmp_path / "unnamed.keras", [tmp_path / "black.png"], top_k=2)
    lines = export.format_predictions(results).splitlines()
    assert [line.split() for line in lines[1:]] == [
        [str(t["id"]), f"{t['probability']:.4f}"] for t in results[0]["top_k"]
    ]


@pytest.mark.slow
def test_label_sources_in_order(tmp_path):
    """--labels, else the model's class_names, else none ("0", "1", ...): a labels.txt beside the model is not read."""
    old = tmp_path / "old_workdir"
    old.mkdir()
    fx.random_classifier("testing").save(old / "model.keras")
    (old / "labels.txt").write_text("".join(f"old {i}\n" for i in range(10)))
    assert sources.load_source(old).labels is None
    new = tmp_path / "new_workdir"
    new.mkdir()
    fx.random_classifier("testing", class_names=NAMES).save(new / "model.keras")
    (new / "labels.txt").write_text("".join(f"stale {i}\n" for i in range(10)))
    assert sources.load_source(new).labels == NAMES
    (tmp_path / "given.txt").write_text("".join(f"given {i}\n" for i in range(10)))
    assert sources.load_source(new, labels=tmp_path / "given.txt").labels == [f"given {i}" for i in range(10)]


@pytest.mark.parametrize(
    "bad, problem", [("two\nlines", "has a line break"), ("cr\r", "has a line break"), (" ", "is blank")]
)
def test_names_that_cannot_be_one_per_line_are_refused(bad, problem, tmp_path):
    model = fx.random_classifier("testing", class_names=[*NAMES[:9], bad])
    with pytest.raises(export.ExportError, match=rf"Class name 9 .* {problem}.*one name per line.*--labels"):
        export.export_model(model, tmp_path / "out", export.ExportOptions("tflite", "float32", latency_runs=1))
    assert not (tmp_path / "out").exists()
