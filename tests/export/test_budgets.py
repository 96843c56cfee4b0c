"""The export's budgets (float ones relative to the logit scale, quantised ones also on top-1 agreement with the
Keras model), its argument ranges, and a num_classes=0 feature model asked for a SavedModel."""

import numpy as np
import pytest

import export
import keras_vit
from export.__main__ import main as cli
from export.kinds.classifier import BUDGETS, check_budget, compare
from tests.support import export_fixtures as fx


@pytest.mark.slow
def test_float_budget_scales_with_large_logits(tmp_path):
    """A head with large weights gives logits in the thousands; float32 rounding then moves them by more than
    1e-4 absolute (the old budget), though the TFLite model is as exact, relative to the logits, as a small one."""
    model = fx.random_classifier("testing", head_scale=1000.0)
    images = np.random.default_rng(0).integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)
    options = export.ExportOptions(formats="tflite", quantize="float32", tflite_output="logits", latency_runs=1)
    report = export.export_model(export.ExportSource(model, heldout=(images, None)), tmp_path / "out", options)
    (tflite,) = report["artifacts"]
    assert report["passed"], export.format_table(report)
    # The scale, checked against the model itself, and an absolute error the old 1e-4 budget would fail.
    reference = model.predict(export.to_model_space(images, (32, 32)), verbose=0)
    assert tflite["logit_scale"] == pytest.approx(np.abs(reference).max(), rel=1e-6) and tflite["logit_scale"] > 500
    assert tflite["max_abs_logit_diff"] > 1e-4
    assert tflite["max_rel_logit_diff"] == pytest.approx(tflite["max_abs_logit_diff"] / tflite["logit_scale"])
    assert tflite["max_rel_logit_diff"] < 1e-5


def test_float_budget_is_the_old_absolute_one_for_small_logits():
    reference = np.array([[0.5, -0.25, 0.1]])
    figures = compare(reference + np.array([[2e-4, 0, 0]]), reference)
    assert figures["logit_scale"] == 1.0  # max(1, max |logit|)
    assert check_budget(figures, BUDGETS["float32"]) == ["max rel logit diff = 0.0002 > 0.0001"]
    assert check_budget(compare(reference + np.array([[5e-5, 0, 0]]), reference), BUDGETS["float32"]) == []


def test_probability_budget_uses_the_logit_scale():
    """softmax moves no output by more than half the largest logit change (its Jacobian's infinity norm is
    max 2p(1-p) <= 1/2): checked numerically here, then the budget divides by the same logit scale."""
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 30, (200, 10))
    delta = rng.uniform(-1e-3, 1e-3, logits.shape)
    moved = np.abs(export.kinds.classifier.softmax(logits + delta) - export.kinds.classifier.softmax(logits)).max(-1)
    assert np.all(moved <= 0.5 * np.abs(delta).max(-1) + 1e-12)
    figures = compare(export.kinds.classifier.softmax(logits + delta), logits, output="probabilities")
    assert figures["logit_scale"] == pytest.approx(np.abs(logits).max())
    assert figures["max_rel_probability_diff"] == pytest.approx(
        figures["max_abs_probability_diff"] / np.abs(logits).max()
    )
    assert check_budget(figures, BUDGETS["float32"]) == []


def test_quantised_budget_requires_top1_agreement_not_only_accuracy():
    """A model that fixes as many images as it breaks keeps its accuracy but disagrees with Keras on 10%."""
    n, classes = 200, 5
    labels = np.arange(n) % classes
    keras_logits = np.eye(classes)[labels] * 4.0
    wrong = (labels + 1) % classes
    keras_logits[:20] = np.eye(classes)[wrong[:20]] * 4.0  # Keras wrong on images 0-19
    artifact = np.eye(classes)[labels] * 4.0  # the artifact right there...
    artifact[20:40] = np.eye(classes)[wrong[20:40]] * 4.0  # ...and wrong on 20-39 instead
    figures = compare(artifact, keras_logits, labels)
    assert figures["accuracy_drop_points"] == 0.0 and figures["top1_agreement"] == pytest.approx(0.8)
    for mode in ("float16", "dynamic_int8", "int8", "int8_matmul"):
        failures = check_budget(figures, {k: v for k, v in BUDGETS[mode].items() if "logit" not in k})
        assert failures == [f"top-1 agreement with Keras = 0.8 < {BUDGETS[mode]['min_top1_agreement']:.4g}"], mode
    # One flipped image among few is allowed, as the accuracy budget allows it on unlabelled sets.
    few = compare(np.eye(classes)[[1, 1, 2, 3]], np.eye(classes)[[0, 1, 2, 3]])
    assert check_budget(few, {"min_top1_agreement": 0.97}) == []
    assert check_budget(compare(np.eye(classes)[[1, 0, 2, 3]], np.eye(classes)[[0, 1, 2, 3]]),
                        {"min_top1_agreement": 0.97}) == ["top-1 agreement with Keras = 0.5 < 0.75"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    fx.random_classifier("testing", head_scale=4.0).save(root / "model.keras")
    return root


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("latency_runs", 0, r"latency_runs \(--latency-runs\) must be an integer >= 1. Received: 0"),
        ("num_threads", -2, r"num_threads \(--num-threads\) must be an integer >= 1. Received: -2"),
        ("num_threads", 0, r"num_threads \(--num-threads\) must be an integer >= 1"),
        ("top_k", 0, r"top_k \(--top-k\) must be an integer >= 1"),
        ("latency_warmup", -1, r"latency_warmup must be an integer >= 0"),
        ("max_verify_images", 0, r"max_verify_images must be an integer >= 1"),
        ("latency_runs", 2.5, r"latency_runs .* Received: 2.5"),
        ("latency_runs", True, r"latency_runs .* Received: True"),
    ],
)
def test_argument_ranges(tiny, tmp_path, option, value, message):
    with pytest.raises(export.ExportError, match=message):
        export.export_path(tiny / "model.keras", out=tmp_path / "out", **{option: value})
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_argument_ranges_from_the_command_line(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli([str(tiny / "model.keras"), "--out", str(out), "--latency-runs", "0"]) == 2
    assert "latency_runs (--latency-runs) must be an integer >= 1. Received: 0." in capsys.readouterr().err
    assert cli([str(tiny / "model.keras"), "--out", str(out), "--num-threads", "-1"]) == 2
    assert "--num-threads" in capsys.readouterr().err
    assert not out.exists()
    image = tmp_path / "x.png"
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    for flag in ("--top-k", "--num-threads"):
        assert cli(["predict", str(tiny / "model.keras"), str(image), flag, "0"]) == 2
        assert f"({flag}) must be an integer >= 1. Received: 0." in capsys.readouterr().err


def test_a_feature_model_asked_for_a_saved_model_only_is_refused_with_what_to_do(tmp_path):
    """create_model(..., num_classes=0) outputs pooled features: it exports as TFLite image embedders
    (tests/export/test_embedder.py), never as a classifier with a softmax over the features."""
    model = keras_vit.create_model("testing", num_classes=0)
    assert model.output_shape == (None, 32)  # the hidden size: it would pass for a 32-class classifier
    with pytest.raises(export.ExportError, match=r"outputs pooled features \(num_classes=0.*--formats tflite"):
        export.export_model(model, tmp_path / "out", export.ExportOptions(formats="saved_model"))
    model.save(tmp_path / "features.keras")  # and the same model loaded from a file
    with pytest.raises(export.ExportError, match="outputs pooled features"):
        export.export_path(tmp_path / "features.keras", formats="saved_model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features.keras"]


@pytest.mark.parametrize("n", [3, 7, 12, 24, 49])
def test_one_flipped_image_without_labels_is_within_the_allowance_at_every_count(n):
    """check_budget allows one image of n to disagree when there are no labels; 100 * (1 - 11/12) computed from the
    agreement rounds above 100 / 12 (seen on a 12-image GPU run), so the points come from the count."""
    reference = np.eye(4, dtype="float32")[np.zeros(n, int)] * 5.0
    outputs = reference.copy()
    outputs[0] = np.roll(outputs[0], 1)  # one image's top-1 flipped
    figures = {**compare(outputs, reference), "images": n}
    assert figures["accuracy_drop_points"] == 100.0 / n
    assert not [f for f in check_budget(figures, {"max_accuracy_drop": 1.0}) if "disagreement" in f]
    outputs[1] = np.roll(outputs[1], 1)  # two flipped: over the allowance once 200 / n exceeds the budget
    figures = {**compare(outputs, reference), "images": n}
    assert [f for f in check_budget(figures, {"max_accuracy_drop": 1.0}) if "disagreement" in f]
