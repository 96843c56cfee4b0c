"""The benchmark suite: FLOP arithmetic, per-round ratios and targets, and a one-round smoke run."""

import json
import os
import subprocess
import sys
import time

import pytest

from benchmarks import coordinator, flops, report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_forward_flops_match_a_hand_count_of_vit_ti16():
    # Ti/16 at 224: 196 patches + class token, D 192, MLP 768, 12 blocks, 1000 classes.
    t, d, m = 197, 192, 768
    per_block = 2 * t * d * (3 * d) + 2 * (2 * t * t * d) + 2 * t * d * d + 2 * (2 * t * d * m)
    expected = 2 * 196 * (16 * 16 * 3) * d + 12 * per_block + 2 * d * 1000
    assert flops.vit_forward_flops(224, 16, 192, 12, 768, 1000) == expected
    assert abs(expected / 1e9 - 2.51) < 0.01  # the figure the issue quotes
    assert flops.training_flops(expected) == 3 * expected


def _fake_report(rounds):
    return {
        "spec": {"batch": 32},
        "flops": {"forward_per_image": 2.5e9, "train_per_image": 7.5e9},
        "implementations": {"keras-vit": {"tflite": {"full_int8": {"top1_agreement": 1.0}}}},
        "rounds": rounds,
    }


def test_ratios_are_taken_per_round_and_targets_use_the_best_setting():
    # Round 2 is uniformly twice as slow (another process held a core): per-round ratios are unaffected,
    # a ratio of medians across rounds would not be.
    rounds = [
        {"train/float32": {"keras-vit": 30.0, "keras-hub": 20.0, "timm": 24.0}, "train/float32+xla": {"keras-vit": 36.0, "keras-hub": 22.0},
         "latency/b1": {"keras-vit": 10.0, "keras-hub": 20.0}, "peak/float32": {"keras-vit": 200.0},
         "tflite/float32": {"keras-vit": 14.0, "keras-hub": 15.0}, "tflite/full_int8": {"keras-vit": 6.0, "keras-hub": 40.0}},
        {"train/float32": {"keras-vit": 15.0, "keras-hub": 10.0, "timm": 12.0}, "train/float32+xla": {"keras-vit": 18.0, "keras-hub": 11.0},
         "latency/b1": {"keras-vit": 20.0, "keras-hub": 40.0}, "peak/float32": {"keras-vit": 100.0},
         "tflite/float32": {"keras-vit": 28.0, "keras-hub": 30.0}, "tflite/full_int8": {"keras-vit": 12.0, "keras-hub": 80.0}},
    ]  # fmt: skip
    rep = _fake_report(rounds)
    coordinator.summarise(rep)
    assert rep["ratios"]["train/float32"]["keras-vit/keras-hub"]["rounds"] == [1.5, 1.5]
    target = rep["targets"]["1_train_f32_vs_keras_hub"]
    assert target["measured"] == pytest.approx(36 / 22) and target["met"] is True
    assert rep["targets"]["1_train_f32_vs_timm"]["measured"] == pytest.approx(36 / 24)
    assert rep["targets"]["3_latency_b1_vs_keras_hub"]["measured"] == pytest.approx(0.5)
    assert rep["targets"]["5_tflite_full_int8_vs_own_f32"]["measured"] == pytest.approx(6 / 14)
    # The ceiling is the run's best matmul probe (200, not round 2's 100): 2.5 GFLOP at 200 GFLOP/s = 12.5 ms.
    assert rep["peak_gflops"]["float32"] == 200.0
    assert rep["targets"]["4_tflite_f32_vs_matmul_bound"]["rounds"] == pytest.approx([14 / 12.5, 28 / 12.5])
    # MFU of keras-vit's float32 training: img/s x 7.5 GFLOP / 200 GFLOP/s in each round, then the median.
    assert rep["mfu"]["train/float32"]["keras-vit"] == pytest.approx((30 + 15) / 2 * 7.5 / 200)


def test_cli_rejects_unknown_implementations():
    with pytest.raises(SystemExit):
        from benchmarks.__main__ import parse_args

        parse_args(["--impls", "keras-vit,flax"])


@pytest.mark.slow
def test_one_round_smoke_run_writes_a_sane_report(tmp_path):
    out = tmp_path / "bench"
    command = [
        sys.executable, "-m", "benchmarks", "--variant", "testing", "--image-size", "32", "--num-classes", "10",
        "--batch", "4", "--rounds", "1", "--impls", "keras-vit", "--train-steps", "1", "--infer-reps", "2",
        "--latency-reps", "2", "--tflite-reps", "2", "--calibration-size", "4", "--agreement-size", "8",
        "--no-bf16", "--out", str(out),
    ]  # fmt: skip
    start = time.time()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert not rep.get("errors"), rep.get("errors")
    assert rep["wall_seconds"] <= time.time() - start + 1
    assert rep["implementations"]["keras-vit"]["available"]
    sizes = rep["implementations"]["keras-vit"]
    assert sizes["keras_file_bytes"] > 4 * sizes["parameters"] > 0  # float32 weights plus the config
    med = rep["median"]
    for key in ("train/float32", "train/float32+xla", "infer/b4", "infer/b4+xla", "latency/b1", "peak/float32"):
        assert 0 < med[key]["keras-vit"] < 1e6, key
    for mode in ("float32", "dynamic_int8", "full_int8", "int8_matmul"):
        assert 0 < med[f"tflite/{mode}"]["keras-vit"] < 1000
        info = rep["implementations"]["keras-vit"]["tflite"][mode]
        assert os.path.getsize(info["file"]) == info["bytes"] > 0
        assert 0 <= info["top1_agreement"] <= 1
    assert rep["implementations"]["keras-vit"]["tflite"]["float32"]["max_abs_logit_diff"] < 1e-4
    assert rep["implementations"]["keras-vit"]["peak_rss_mb_train_float32"] > 100  # TF alone is more than that
    assert 0 < rep["mfu"]["train/float32"]["keras-vit"] < 1
    assert "keras-vit" in report.table(rep)
    assert "targets" in result.stdout
    # The int8-matmul recipe keeps exactly the non-matmul op types in float.
    float_ops = rep["implementations"]["keras-vit"]["tflite"]["int8_matmul"]["float_ops"]
    assert "FULLY_CONNECTED" not in float_ops and "CONV_2D" not in float_ops and "SOFTMAX" in float_ops


def test_backend_check_smoke_run(tmp_path, capsys):
    """The accelerator/backend check on this machine's backend (TensorFlow, CPU), tiny settings, in-process."""
    from benchmarks import backend_check

    out = tmp_path / "check.json"
    args = ["--variant", "testing", "--image-size", "32", "--batch", "8", "--steps", "2", "--warmup", "1",
            "--dtypes", "float32", "--out", str(out)]  # fmt: skip
    assert backend_check.main(args) == 0
    printed = capsys.readouterr().out
    assert "[golden]" in printed and "[train] testing 32px b8 float32" in printed
    report = json.loads(out.read_text())
    assert report["backend"] == "tensorflow"
    # float32 on a CPU: the golden logits (timm, original checkpoint layout) to float precision.
    assert max(report["golden_max_abs_diff"]["default_precision"].values()) < 1e-5
    assert report["train"]["float32"]["images_per_second"] > 0
