"""README's main job end to end, on a fresh directory: train digits, evaluate, export, verify, inspect.

The run itself is the session fixture `digits_main_job` (tests/conftest.py): the quick-start line of README.md
exactly as written, run by .ci/check_main_job.py alone before the tests (which also checks its time and output) or
by the fixture once per session; the training and export acceptance tests check the same run in detail.
"""

import fcntl
import json
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, first_of_the_workers
from tests.support import main_job


def test_readme_main_job_is_train_then_export():
    assert main_job.commands() == ["python -m training", "python -m export runs/digits"]


@pytest.mark.slow
def test_a_worker_waiting_for_the_main_job_fails_with_a_message_instead_of_hanging(tmp_path):
    lock = tmp_path / "main_job.lock"
    with open(lock, "a") as holder:  # another worker, stuck in the job
        fcntl.flock(holder, fcntl.LOCK_EX)
        started = time.monotonic()
        waiting = pytest.raises(pytest.fail.Exception, match="waited 2 s for another test worker")
        with waiting, first_of_the_workers(lock, timeout=2):
            pass
        assert 2 <= time.monotonic() - started < 10
    with first_of_the_workers(lock, timeout=2):  # released: the next worker goes ahead at once
        pass


def test_a_folder_without_the_ci_record_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"KERAS_VIT_MAIN_JOB=.* holds no main_job.json: run `python "
                       r"\.ci/check_main_job\.py"):  # fmt: skip
        main_job.read_record(tmp_path)


@pytest.mark.slow  # the main job (~3 min) unless CI ran it
def test_main_job_trains_evaluates_exports_and_reports(digits_main_job):
    workdir = digits_main_job.workdir
    train_out = digits_main_job.train.result.stdout
    assert "held-out top-1" in train_out and "runs/digits" in train_out
    assert f"in {workdir / 'plots'}" in train_out  # the console says where the plots are
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["top1"] >= 0.97  # the recipe's seed spread: docs/training.md
    printed = digits_main_job.export.result.stdout
    assert "status: PASSED" in printed
    for artifact in (
        "saved_model",
        "model_float32.tflite",
        "model_float16.tflite",
        "model_dynamic_int8.tflite",
        "model_int8.tflite",
        "model_int8_matmul.tflite",
    ):
        assert artifact in printed and (workdir / "export" / artifact).exists()
    report = json.loads((workdir / "export" / "report.json").read_text())
    assert report["passed"] and len(report["artifacts"]) == 8  # SavedModel, five TFLite, ONNX, OpenVINO
    plots = sorted(p.name for p in (workdir / "plots").glob("*.png"))
    assert {
        "training_curves.png",
        "attention_rollout.png",
        "position_embedding_similarity.png",
        "attention_distance.png",
        "embedding_filters.png",
    } <= set(plots)
    assert all((workdir / "plots" / name).stat().st_size > 1000 for name in plots)


@pytest.mark.slow
def test_inspect_cli_on_the_trained_digits_model(digits_main_job, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "keras_vit.inspect", str(digits_main_job.workdir / "model.keras"), "--out",
         str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    pngs = sorted(tmp_path.glob("*.png"))
    assert len(pngs) == 4 and all(p.stat().st_size > 1000 for p in pngs)
