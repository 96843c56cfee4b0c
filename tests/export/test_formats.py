"""A format is one module and one line in `export.formats.FORMATS` (docs/export.md, "Adding a format").

The test adds a toy format, the Keras file itself (`model.keras`, run by Keras), with nothing but a value that
defines what docs/export.md lists, registered with one line; the options, the export job, the commit's owned names
and `load_runner`/`predict` then take it as they take the four real ones.
"""

import numpy as np
import pytest

import export
from export import commit, formats
from export.keras_runner import KerasRunner
from export.runtime import record
from tests.support import export_fixtures as fx


class KerasFile:
    """The toy format: `model.keras`, reopened by Keras and judged against the reference like any file."""

    NAME = "keras_file"
    KINDS = ("classifier",)
    OWNED = (r"{stem}\.keras",)
    SUFFIXES = (".keras",)

    @staticmethod
    def open(path, num_threads=1):
        import keras

        return KerasRunner(keras.saving.load_model(path, compile=False))

    @staticmethod
    def modes(plan):
        return ("float32",)

    @staticmethod
    def lines(entry, kind):
        return []

    @staticmethod
    def entry(plan, mode, v, staging, out, options):
        name = f"{plan.kind.STEM}.keras"
        plan.model.save(staging / name)
        commit.fault_point(f"writing {name}")
        runner = KerasFile.open(staging / name)
        found = plan.kind.figures(runner.outputs(v.x), v.reference, v.truth)
        budget = plan.kind.BUDGETS[mode]
        size = (staging / name).stat().st_size
        return record(plan, v, options, name, KerasFile.NAME, mode, out, size, found, runner, budget,
                      plan.kind.check_budget(found, budget))  # fmt: skip


@pytest.mark.slow
def test_a_new_format_is_one_module_and_one_registry_line(tmp_path, monkeypatch):
    monkeypatch.setitem(formats.FORMATS, KerasFile.NAME, KerasFile)  # the one registry line
    model = fx.random_classifier("testing", head_scale=4.0)
    options = export.ExportOptions(formats="tflite,keras_file", quantize="float32", latency_runs=1, gpu_check="off")
    for _ in range(2):  # the second export replaces the first: the commit owns the new format's file
        report = export.export_model(model, tmp_path / "out", options)
    assert [a["name"] for a in report["artifacts"]] == ["model_float32.tflite", "model.keras"]
    entry = report["artifacts"][1]
    assert entry["passed"] and entry["format"] == "keras_file" and entry["max_abs_logit_diff"] < 1e-5
    assert sorted(report["files"]) == ["model.keras", "model_float32.json", "model_float32.tflite"]
    runner = export.load_runner(tmp_path / "out" / "model.keras")
    x = export.to_model_space(np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), np.uint8), (32, 32))
    np.testing.assert_allclose(runner.outputs(x)["logits"], np.asarray(model(x)), atol=1e-5)
    assert len(export.predict(tmp_path / "out" / "model.keras", [np.zeros((40, 40, 3), np.uint8)], top_k=2)) == 1
    # A name no format owns is still foreign to the commit.
    with pytest.raises(export.ExportError, match="holds files an export does not write"):
        (tmp_path / "out" / "notes.txt").write_text("mine")
        export.export_model(model, tmp_path / "out", options)
