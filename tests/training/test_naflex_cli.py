"""A NaFlex fine-tune from the command line on a folder of wide, tall and square images (`--init` a transformers
siglip2 folder), then `python -m export` of its workdir: every format PASSED, each judged on all three aspect ratios,
and the preprocessing shipped beside the files takes an image of any size to the Keras model's answer."""

import json

import keras
import numpy as np
import pytest

import keras_vit
from tests import support
from tests.support.images import mixed_aspect_folder
from tests.support.numerics import scaled_diff
from tests.support.processes import call_cli

INIT = support.FIXTURES / "interop_families2" / "hf_siglip2_naflex"  # a 16-patch budget, a 4x4 position table
TOL = 1e-5  # float32 round-off of a 2-block model, as tests/export/test_naflex_tflite.py


@pytest.mark.slow  # one fine-tuning run and its export in every format (about 40 s of CPU)
def test_a_naflex_fine_tune_runs_from_the_command_line_and_exports_in_every_format(tmp_path, capfd):
    from export.__main__ import main as export_main
    from export.naflex.files import TFLiteRunner
    from export.naflex.preprocessing import load
    from training.__main__ import main as train_main

    photos, workdir = mixed_aspect_folder(tmp_path / "photos"), tmp_path / "run"
    trained = call_cli(
        train_main, "--config", "finetune", "--init", INIT, "--dataset", f"folder:{photos}", "--workdir", workdir,
        "--epochs", "1", "--batch-size", "4", "--set", "holdout_fraction=0.34", "--set", "max_num_patches=12",
        "--set", "plots=false", capfd=capfd,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "naflex: patches made in tf.data" in trained.stdout and "new 2-class head" in trained.stdout
    recorded = json.loads((workdir / "config.json").read_text())
    assert recorded["naflex"] is True and recorded["max_num_patches"] == 12  # the checkpoint's form, the set budget
    model = keras.saving.load_model(str(workdir / "model.keras"), compile=False)
    assert isinstance(model, keras_vit.NaFlexViT) and model.options["max_num_patches"] == 12

    exported = call_cli(export_main, workdir, "--quantize", "float32", "--latency-runs", "1", capfd=capfd)
    assert exported.returncode == 0 and "status: PASSED" in exported.stdout, exported.stdout[-3000:]
    out = workdir / "export"
    report = json.loads((out / "report.json").read_text())
    assert {a["format"] for a in report["artifacts"]} == {"saved_model", "tflite", "onnx", "openvino"}
    for a in report["artifacts"]:
        assert a["passed"] and set(a["max_abs_diff_by_aspect"]) == {"wide", "tall", "square"}, a["name"]
    tflite = next(a for a in report["artifacts"] if a["format"] == "tflite")
    assert tflite["non_builtin_ops"] == []

    # What an app does: the shipped numpy preprocessing on a photo of any size, then the .tflite file.
    shipped = load(out / "naflex_preprocessing.py")
    pixels = np.random.default_rng(1).integers(0, 256, (37, 91, 3), dtype=np.uint8)
    feed = shipped.inputs(pixels)
    expected = keras_vit.naflex_batch([pixels], patch_size=8, max_num_patches=12)
    assert all(np.array_equal(feed[k], np.asarray(expected[k])) for k in ("patches", "mask", "grid"))
    runner = TFLiteRunner((out / "model_float32.tflite").read_bytes())
    assert scaled_diff(runner.run(feed), model(feed, training=False)) <= TOL
