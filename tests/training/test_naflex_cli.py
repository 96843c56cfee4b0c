"""A NaFlex fine-tune from the command line on a folder of wide, tall and square images (`--init` a timm
naflexvit folder), then `python -m export` of its workdir: every format PASSED, each judged on all three aspect ratios,
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

INIT = support.FIXTURES / "interop_families2" / "timm_naflex_siglip"  # a 4x4 position table and a 5-class head
TOL = 1e-5  # float32 round-off of a 2-block model, as tests/export/test_naflex_tflite.py


def _checkpoint(naflex=None, **options):
    from keras_vit.weights.checkpoint import Checkpoint

    base = keras_vit.get_variant("testing").replace(image_size=32, num_classes=5, pooling="map", class_token=False)
    return Checkpoint(params={}, options={**base.to_dict(), **options}, source="ckpt", naflex=naflex)


def test_a_naflex_checkpoint_makes_a_naflex_run_and_its_budget_is_an_option():
    from training.configs import get_config
    from training.options.resolve import resolve_model, resolve_naflex

    config = get_config("finetune").replace(init="ckpt")
    folder = _checkpoint(naflex={"max_num_patches": 16})

    def resolved(config, ckpt):
        return resolve_naflex(resolve_model(config, ckpt), ckpt)

    assert (resolved(config, folder).naflex, resolved(config, folder).max_num_patches) == (True, 16)
    assert resolved(config.replace(max_num_patches=64), folder).max_num_patches == 64
    assert resolved(config.replace(naflex=False), folder).naflex is False  # its fixed-resolution form
    fixed = _checkpoint()  # a fixed-resolution SigLIP tower: NaFlex on request, 256 patches unless stated
    assert resolved(config, fixed).naflex is False
    assert resolved(config.replace(naflex=True), fixed).max_num_patches == 256


def test_a_model_without_a_naflex_form_and_a_stray_budget_are_one_line_each():
    from training.configs import get_config
    from training.options.resolve import resolve_model, resolve_naflex

    config = get_config("finetune").replace(init="ckpt")
    token = _checkpoint(pooling="token", class_token=True)
    with pytest.raises(ValueError, match=r"naflex=True needs a SigLIP-style model.*class_token=True.*naflex=false"):
        resolve_naflex(resolve_model(config.replace(naflex=True), token), token)
    with pytest.raises(ValueError, match=r"max_num_patches=64 is the patch budget of a NaFlex run.*naflex=true"):
        resolve_naflex(resolve_model(config.replace(max_num_patches=64), token), token)


@pytest.mark.slow  # one fine-tuning run and its export in every format (about 40 s of CPU)
def test_a_naflex_fine_tune_runs_from_the_command_line_and_exports_in_every_format(tmp_path, capfd):
    from export.__main__ import main as export_main
    from export.naflex.app_preprocessing import load
    from export.naflex.files import TFLiteRunner
    from export.naflex.tflite_preprocessing import Runner
    from training.__main__ import main as train_main

    # The fixture's 5 classes, its head loaded (init_head): logits of order 1, so the files' agreement means something.
    classes, sizes = ("a", "b", "c", "d", "e"), ((24, 80), (64, 40), (40, 40))  # wide, tall, square
    photos, workdir = mixed_aspect_folder(tmp_path / "photos", classes, sizes), tmp_path / "run"
    trained = call_cli(
        train_main, "--config", "finetune", "--init", INIT, "--dataset", f"folder:{photos}", "--workdir", workdir,
        "--epochs", "1", "--batch-size", "4", "--set", "holdout_fraction=0.34", "--set", "max_num_patches=12",
        "--set", "plots=false", "--set", "init_head=true", "--set", "randaugment=(2, 10)", capfd=capfd,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    loaded = next(line for line in trained.stdout.splitlines() if line.startswith(f"[training] --init {INIT}: "))
    assert "naflex: patches made in tf.data" in trained.stdout and "head" not in loaded, loaded  # its own head
    recorded = json.loads((workdir / "config.json").read_text())
    assert recorded["naflex"] is True and recorded["max_num_patches"] == 12  # the checkpoint's form, the set budget
    model = keras.saving.load_model(str(workdir / "model.keras"), compile=False)
    assert isinstance(model, keras_vit.NaFlexViT) and model.options["max_num_patches"] == 12
    evaluated = call_cli(train_main, "evaluate", "--workdir", workdir, capfd=capfd)  # the saved model, again
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert evaluated.returncode == 0 and json.loads(evaluated.stdout)["top1"] == metrics["top1"], evaluated.stderr

    exported = call_cli(export_main, workdir, "--quantize", "float32", "--latency-runs", "1", capfd=capfd)
    assert exported.returncode == 0 and "status: PASSED" in exported.stdout, exported.stdout[-3000:]
    out = workdir / "export"
    report = json.loads((out / "report.json").read_text())
    assert {a["format"] for a in report["artifacts"]} == {"saved_model", "tflite", "onnx", "openvino"}
    for a in report["artifacts"]:
        assert a["passed"] and set(a["max_abs_diff_by_aspect"]) == {"wide", "tall", "square"}, a["name"]
    tflite = next(a for a in report["artifacts"] if a["format"] == "tflite")
    assert tflite["non_builtin_ops"] == []
    app = report["preprocessing_tflite"]  # run on the same cut images, its inputs equal the numpy module's bitwise
    assert app["differing_input_values"] == 0 and app["non_builtin_ops"] == [] and len(app["image_sizes"]) == 3
    assert any(line.startswith("  fed by naflex_preprocessing.tflite: max |diff|") for line in tflite["lines"])

    # What an app does: the shipped numpy preprocessing on a photo of any size, then the .tflite file.
    shipped = load(out / "naflex_preprocessing.py")
    pixels = np.random.default_rng(1).integers(0, 256, (37, 91, 3), dtype=np.uint8)
    feed = shipped.inputs(pixels)
    expected = keras_vit.naflex_batch([pixels], patch_size=8, max_num_patches=12)
    assert all(np.array_equal(feed[k], np.asarray(expected[k])) for k in ("patches", "mask", "grid"))
    runner = TFLiteRunner((out / "model_float32.tflite").read_bytes())
    logits = keras.ops.convert_to_numpy(model(feed, training=False))
    assert np.abs(logits).max() > 0.1 and scaled_diff(runner.run(feed), logits) <= TOL
    # What a phone app does: naflex_preprocessing.tflite on the photo, then the model's .tflite on what it made.
    app_feed = Runner((out / "naflex_preprocessing.tflite").read_bytes()).inputs(pixels)
    assert all(np.array_equal(app_feed[k], feed[k]) and app_feed[k].dtype == feed[k].dtype for k in feed)
    assert scaled_diff(runner.run(app_feed), logits) <= TOL
