"""The benchmark suite: FLOP arithmetic, per-round ratios and targets, and a one-round smoke run."""

import json
import os
import subprocess
import sys
import time

import pytest

from benchmarks import coordinator, provenance, report, summary
from keras_vit.models import flops
from tests import support
from tests.support.reports import fake_report

ROOT = str(support.ROOT)


def test_forward_flops_match_a_hand_count_of_vit_ti16():
    # Ti/16 at 224: 196 patches + class token, D 192, MLP 768, 12 blocks, 1000 classes.
    t, d, m = 197, 192, 768
    per_block = 2 * t * d * (3 * d) + 2 * (2 * t * t * d) + 2 * t * d * d + 2 * (2 * t * d * m)
    expected = 2 * 196 * (16 * 16 * 3) * d + 12 * per_block + 2 * d * 1000
    assert flops.vit_forward_flops(224, 16, 192, 12, 768, 1000) == expected
    assert abs(expected / 1e9 - 2.51) < 0.01  # the figure the issue quotes
    assert flops.training_flops(expected) == 3 * expected


def test_ratios_are_taken_per_round_and_targets_use_the_fastest_keras_vit_form():
    # Round 2 is uniformly twice as slow (another process held a core): per-round ratios are unaffected,
    # a ratio of medians across rounds would not be.
    rounds = [
        {"train/float32": {"keras-vit": 30.0, "keras-vit-torch": 26.0, "keras-hub": 20.0, "timm": 24.0},
         "train/float32+xla": {"keras-vit": 36.0, "keras-vit-jax": 40.0, "keras-hub": 22.0},
         "train/bfloat16": {"keras-vit": 50.0, "timm": 30.0},
         "latency/b1": {"keras-vit": 10.0, "keras-hub": 20.0},
         "latency/b1+xla": {"keras-vit-jax": 8.0, "keras-hub": 16.0},
         "peak/float32": {"keras-vit": 300.0}, "peak/litert_float32": {"keras-vit": 200.0},
         "pipeline/imagenet": {"keras-vit": 90.0, "timm": 45.0},
         "tflite/float32": {"keras-vit": 14.0, "keras-hub": 15.0},
         "tflite/int8_matmul": {"keras-vit": 6.0, "keras-hub": 40.0}},
        {"train/float32": {"keras-vit": 15.0, "keras-vit-torch": 13.0, "keras-hub": 10.0, "timm": 12.0},
         "train/float32+xla": {"keras-vit": 18.0, "keras-vit-jax": 20.0, "keras-hub": 11.0},
         "train/bfloat16": {"keras-vit": 25.0, "timm": 15.0},
         "latency/b1": {"keras-vit": 20.0, "keras-hub": 40.0},
         "latency/b1+xla": {"keras-vit-jax": 16.0, "keras-hub": 32.0},
         "peak/float32": {"keras-vit": 150.0}, "peak/litert_float32": {"keras-vit": 100.0},
         "pipeline/imagenet": {"keras-vit": 30.0, "timm": 30.0},
         "tflite/float32": {"keras-vit": 28.0, "keras-hub": 30.0},
         "tflite/int8_matmul": {"keras-vit": 12.0, "keras-hub": 80.0}},
    ]  # fmt: skip
    rep = fake_report(rounds)
    summary.summarise(rep)
    assert rep["ratios"]["train/float32"]["keras-vit/keras-hub"] == {"median": 1.5, "min": 1.5, "max": 1.5,
                                                                     "rounds": [1.5, 1.5]}  # fmt: skip
    assert rep["ratios"]["train/float32+xla"]["keras-vit-jax/keras-hub"]["rounds"] == pytest.approx([40 / 22, 20 / 11])
    # The fastest form: JAX in training (40 and 20 img/s), JAX in latency (lower is better).
    assert rep["fastest_keras_vit"]["train/float32"]["form"] == "keras-vit on JAX"
    assert rep["fastest_keras_vit"]["train/float32"]["median"] == 30.0
    assert rep["fastest_keras_vit"]["train/float32"]["all"]["keras-vit on PyTorch"] == 19.5
    assert rep["fastest_keras_vit"]["latency/b1"]["form"] == "keras-vit on JAX"
    # The best form against each baseline's best setting, per round: 40/22 and 20/11; 40/24 and 20/12.
    assert rep["best_ratios"]["train/float32"]["keras-hub"]["rounds"] == pytest.approx([40 / 22, 20 / 11])
    assert rep["targets"]["2_train_f32_vs_timm"]["measured"] == pytest.approx(40 / 24)
    assert rep["targets"]["2_train_f32_vs_timm"]["met"] is True
    # mixed_bfloat16 keras-vit against keras-hub's float32 (its best setting): 50/22 and 25/11.
    assert rep["targets"]["2_train_bf16_vs_keras_hub_f32"]["measured"] == pytest.approx(50 / 22)
    assert rep["best_ratios"]["latency/b1"]["keras-hub"]["median"] == pytest.approx(0.5)
    # Pipeline: per-round ratios 2.0 and 1.0, median 1.5: the median clears the bound, round 2 does not, so the
    # target is not met ("median only").
    pipe = rep["targets"]["4_pipeline_vs_timm_per_core"]
    assert pipe["rounds"] == pytest.approx([2.0, 1.0]) and (pipe["min"], pipe["max"]) == (1.0, 2.0)
    assert pipe["measured"] == 1.5 and pipe["met"] is False and pipe["state"] == "median only"
    assert pipe["rounds_met"] == 1 and report.target_state(pipe) == "median only (1/2 rounds)"
    assert rep["targets"]["2_train_f32_vs_timm"]["state"] == "yes"
    assert rep["targets"]["5_tflite_int8_matmul_vs_own_f32"]["measured"] == pytest.approx(6 / 14)
    # The TFLite ceiling is the run's best LiteRT matmul probe (200, not round 2's 100; not TensorFlow's 300):
    # 2.5 GFLOP at 200 GFLOP/s = 12.5 ms.
    assert rep["peak_gflops"] == {"float32": 300.0, "bfloat16": None, "litert_float32": 200.0}
    assert rep["targets"]["5_tflite_f32_vs_matmul_bound"]["rounds"] == pytest.approx([14 / 12.5, 28 / 12.5])
    assert rep["targets"]["5_tflite_f32_vs_matmul_bound"]["met"] is False
    assert rep["targets"]["5_tflite_f32_vs_matmul_bound"]["state"] == "no"
    # MFU of keras-vit's float32 training: img/s x 7.5 GFLOP / 300 GFLOP/s (TensorFlow's best probe) per round.
    assert rep["mfu"]["train/float32"]["keras-vit"] == pytest.approx((30 + 15) / 2 * 7.5 / 300)


def test_a_target_is_met_only_when_every_round_meets_it():
    every = summary.judge(">=", 1.1, summary.spread([1.2, 1.1, 1.3]))  # a round exactly at the bound meets it
    assert (every["met"], every["state"], every["rounds_met"]) == (True, "yes", 3)
    assert (every["measured"], every["min"], every["max"]) == (1.2, 1.1, 1.3)
    one_short = summary.judge(">=", 1.1, summary.spread([1.2, 1.05, 1.3]))
    assert (one_short["met"], one_short["state"], one_short["rounds_met"]) == (False, "median only", 2)
    assert summary.judge(">=", 1.1, summary.spread([1.0, 1.05, 1.3]))["state"] == "no"
    # Lower is better for latencies: the bound is an upper one.
    latency = summary.judge("<=", 1.0, summary.spread([0.9, 1.01, 0.95]))
    assert (latency["met"], latency["state"]) == (False, "median only")
    assert summary.judge("<=", 1.0, None) == {"target": "<= 1.0", "measured": None, "met": None, "state": "n/a"}
    assert [report.target_state(t) for t in (every, one_short, latency)] == [
        "yes (3/3 rounds)", "median only (2/3 rounds)", "median only (2/3 rounds)"]  # fmt: skip
    # One measurement (the wall time, the trained digits model) has no rounds to count.
    assert report.target_state(summary.judge("<=", 15, summary.spread([9.8]))) == "yes"
    assert report.with_spread(summary.spread([1.15, 0.98, 1.07])) == "1.07 (0.98-1.15)"
    assert report.with_spread(summary.spread([1.07])) == "1.07"
    assert report.with_spread(None) == "-"


def test_task_list_puts_each_backend_in_its_setting():
    from benchmarks.__main__ import parse_args

    tasks = {key: impls for key, impls, _, _, _ in coordinator.task_list(parse_args([]))}
    assert tasks["train/float32"] == ("keras-vit", "keras-vit-torch", "keras-hub", "timm")
    assert tasks["train/float32+xla"] == ("keras-vit", "keras-hub", "keras-vit-jax")
    assert tasks["pipeline/imagenet"] == ("keras-vit", "timm")
    # Without XLA the TensorFlow workers drop their compiled setting; JAX, which always compiles, stays.
    tasks = {key: impls for key, impls, _, _, _ in coordinator.task_list(parse_args(["--no-xla"]))}
    assert tasks["train/float32+xla"] == ("keras-vit-jax",)


def test_machine_description_reads_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\n"
                       "flags\t\t: fpu sse avx2 fma avx512f avx512_bf16 amx_tile amx_bf16\n\n"
                       "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")  # fmt: skip
    machine = coordinator.describe_machine(str(cpuinfo))
    assert machine["cpu_model"] == "Intel(R) Xeon(R) Platinum 8481C"
    assert machine["isa_flags"] == ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
    assert machine["usable_cpus"] >= 1


def test_inception_crop_box_stays_inside_the_image_and_in_the_recipe_ranges():
    import random

    from benchmarks.pipeline import ASPECT, CROP_AREA, crop_box

    rng = random.Random(0)
    areas = []
    for _ in range(500):
        left, top, right, bottom = crop_box(500, 375, rng)
        w, h = right - left, bottom - top
        assert 0 <= left < right <= 500 and 0 <= top < bottom <= 375
        # Rounding to whole pixels moves the ratio and the area by at most a pixel's worth.
        assert ASPECT[0] - 0.02 <= w / h <= ASPECT[1] + 0.02
        areas.append(w * h / (500 * 375))
    assert CROP_AREA[0] - 0.01 <= min(areas) and max(areas) <= CROP_AREA[1]
    assert min(areas) < 0.15 and max(areas) > 0.8  # the draws cover the range, not one corner of it
    # A strip no allowed crop fits: the central crop at the nearest allowed aspect ratio (4:3 here).
    assert crop_box(400, 10, random.Random(0)) == (193, 0, 206, 10)


def test_readme_table_is_rewritten_between_the_markers_only(tmp_path):
    from benchmarks import readme

    # Three rounds. keras-vit's best form per round: JAX 33, TensorFlow 30, JAX 36 (medians: JAX 33, TensorFlow
    # 30); per-round ratios to keras-hub 33/20, 30/25, 36/18 = 1.65, 1.20, 2.00; to timm 33/30, 30/25, 36/40 =
    # 1.10, 1.20, 0.90: the median 1.10 meets the >= 1.1 target, round 3 does not.
    rounds = [{"train/float32": {"keras-vit": 30.0, "keras-hub": 20.0, "timm": 30.0},
               "train/float32+xla": {"keras-vit-jax": 33.0}},
              {"train/float32": {"keras-vit": 30.0, "keras-hub": 25.0, "timm": 25.0},
               "train/float32+xla": {"keras-vit-jax": 29.0}},
              {"train/float32": {"keras-vit": 31.0, "keras-hub": 18.0, "timm": 40.0},
               "train/float32+xla": {"keras-vit-jax": 36.0}}]  # fmt: skip
    rep = fake_report(rounds)
    summary.summarise(rep)
    rep.update(settings={"variant": "Ti/16", "image_size": 224, "rounds": 3}, wall_seconds=600.0,
               command="python -m benchmarks --readme docs/performance.md",
               machine={"cpu_model": "Test CPU", "usable_cpus": 2, "threads": 2, "isa_flags": ["avx2"],
                        "loadavg_start": [1.0], "loadavg_end": [2.0]})  # fmt: skip

    def split(step_f32_ms, speedup):  # step_split's figures of one round (the fields the table reads)
        f32 = {"step_ms": step_f32_ms, "matmul_ms": 1.0, "matmul_gflops": 1.0, "rest_ms": 1.0}
        bf16 = {"step_ms": step_f32_ms / speedup, "matmul_ms": 1.0, "matmul_gflops": 1.0, "rest_ms": 1.0}
        return {"float32": f32, "mixed_bfloat16": bf16, "bf16_matmul_speedup": 1.0, "bf16_rest_speedup": 1.0,
                "bf16_speedup": speedup}  # fmt: skip

    rep["step_split"] = [split(900, 1.3), split(800, 0.9), split(700, 1.2)]
    missing = "ModuleNotFoundError: No module named 'torch'"
    rep["implementations"] = {"keras-vit": {"available": True, "versions": {"keras": "3.15.1"}},
                              "timm": {"available": False, "reason": missing}}  # fmt: skip
    path = tmp_path / "performance.md"  # any Markdown file with the markers, not only a README
    path.write_text(f"# Title\n\nbefore\n{readme.START}\nold table\n{readme.END}\nafter\n")
    readme.update(str(path), rep)
    text = path.read_text()
    assert text.startswith("# Title\n\nbefore\n" + readme.START + "\n") and text.endswith(readme.END + "\nafter\n")
    assert "old table" not in text
    row = "| float32 training, img/s | keras-vit on JAX 33.0 | keras-vit on TensorFlow 30.0 | 1.65 (1.20-2.00) |"
    assert row + " 1.10 (0.90-1.20) |" in text
    assert "| 2_train_f32_vs_timm | >= 1.1 | 1.100 (0.900-1.200) | median only (2/3 rounds) |" in text
    assert "Measured by `python -m benchmarks --readme docs/performance.md`" in text and "README.md" not in text
    assert "Test CPU (2 cores usable, 2 threads; ISA avx2)" in text and "10.0 min" in text
    # The step split quoted is the round of the median speed-up (700 ms, 1.2x), with the range over rounds.
    assert (
        "float32 700 ms" in text
        and "the step 1.20x (the median round of 3; the step's speed-up ranged 0.90-1.30x)" in text
    )
    assert "Not measured in this run: timm (ModuleNotFoundError: No module named 'torch')" in text
    readme.update(str(path), rep)  # idempotent: the markers survive a rewrite
    assert path.read_text() == text
    path.write_text("# no markers\n")
    with pytest.raises(ValueError, match="benchmark-table:start"):
        readme.update(str(path), rep)
    assert path.read_text() == "# no markers\n"


def test_default_run_takes_three_rounds_and_trimmed_repetitions():
    from benchmarks.__main__ import parse_args

    args = parse_args([])
    # Three rounds at least, so "met in every round" means something; the table's file is whatever the user names.
    assert args.rounds == 3 and args.readme is None and args.advice is None


def test_cli_rejects_unknown_implementations():
    with pytest.raises(SystemExit):
        from benchmarks.__main__ import parse_args

        parse_args(["--impls", "keras-vit,flax"])


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.slow
def test_one_round_smoke_run_writes_a_sane_report_and_the_readme_table(tmp_path):
    """Every worker is asked for. keras-vit on TensorFlow and JAX always run; the torch-backend worker and timm need
    torch, keras-hub its package: where those are not installed (CI) the report must say so, and the test checks
    that it does rather than leaving them out."""
    out = tmp_path / "bench"
    readme_path = tmp_path / "README.md"
    readme_path.write_text("intro\n<!-- benchmark-table:start -->\n<!-- benchmark-table:end -->\nrest\n")
    command = [
        sys.executable, "-m", "benchmarks", "--variant", "testing", "--image-size", "32", "--num-classes", "10",
        "--batch", "4", "--rounds", "1", "--train-steps", "1", "--infer-reps", "2",
        "--latency-reps", "2", "--tflite-reps", "2", "--calibration-size", "4", "--agreement-size", "8",
        "--pipeline-batches", "1", "--pipeline-images", "16", "--input-wait-steps", "1",
        "--no-bf16", "--out", str(out), "--readme", str(readme_path), "--advice", str(tmp_path / "advice.json"),
    ]  # fmt: skip
    start, head_before = time.time(), provenance.source_commit()["commit"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert not rep.get("errors"), rep.get("errors")
    assert rep["wall_seconds"] <= time.time() - start + 1
    impls = rep["implementations"]
    torch = _importable("torch")
    expected = {"keras-vit": True, "keras-vit-jax": True, "keras-vit-torch": torch,
                "timm": torch and _importable("timm"), "keras-hub": _importable("keras_hub")}  # fmt: skip
    table = readme_path.read_text()
    for impl, available in expected.items():
        assert impls[impl]["available"] is available, (impl, impls[impl])
        if not available:
            assert "No module named" in impls[impl]["reason"]
            assert f"{impl} (" in table.split("Not measured in this run:")[1]
    sizes = impls["keras-vit"]
    assert sizes["keras_file_bytes"] > 4 * sizes["parameters"] > 0  # float32 weights plus the config
    med = rep["median"]
    for key in (
        "train/float32",
        "train/float32+xla",
        "infer/b4",
        "infer/b4+xla",
        "latency/b1",
        "peak/float32",
        "pipeline/imagenet",
        "pipeline/imagenet_uint8",
    ):
        assert 0 < med[key]["keras-vit"] < 1e6, key
    for key in ("train/float32+xla", "infer/b4+xla", "latency/b1+xla"):
        assert 0 < med[key]["keras-vit-jax"] < 1e6, key
    assert 0 <= med["input_wait/train"]["keras-vit"] < 1
    # The inference phase's ONNX and OpenVINO rows (benchmarks/interchange.py): keras-vit's always, timm's with torch.
    for key in ("onnxruntime/b4", "onnxruntime/b1", "openvino/b4", "openvino/b1"):
        assert 0 < med[key]["keras-vit"] < 1e6, key
        if expected["timm"]:
            assert 0 < med[key]["timm"] < 1e6, key
    for impl in ("keras-vit", "timm") if expected["timm"] else ("keras-vit",):
        assert max(impls[impl]["interchange"]["max_rel_diff_vs_own"].values()) <= 1e-4, impls[impl]["interchange"]
    assert rep["fastest_keras_vit"]["train/float32"]["form"].startswith("keras-vit on ")
    assert rep["machine"]["cpu_model"] and rep["machine"]["usable_cpus"] >= 1
    phases = rep["phase_seconds"]
    assert {"train/float32", "infer", "tflite", "pipeline", "input_wait"} <= set(phases)
    assert all(len(t["rounds"]) == 1 and t["total"] >= t["workers"] + sum(t["rounds"]) for t in phases.values())
    # Each phase names the code it measured: this checkout's HEAD ("unknown" in a copy without git), the one
    # before or after the run should a commit land meanwhile.
    heads = {head_before, provenance.source_commit()["commit"]}
    assert set(rep["commits"]) == set(phases) and all(c["commit"] in heads for c in rep["commits"].values())
    for mode in ("float32", "dynamic_int8", "full_int8", "int8_matmul"):
        assert 0 < med[f"tflite/{mode}"]["keras-vit"] < 1000
        info = impls["keras-vit"]["tflite"][mode]
        assert os.path.getsize(info["file"]) == info["bytes"] > 0
        assert 0 <= info["top1_agreement"] <= 1
    assert impls["keras-vit"]["tflite"]["float32"]["max_abs_logit_diff"] < 1e-4
    assert impls["keras-vit"]["peak_rss_mb_train_float32"] > 100  # TF alone is more than that
    assert 0 < rep["mfu"]["train/float32"]["keras-vit"] < 1
    assert "keras-vit" in report.table(rep)
    assert "targets" in result.stdout
    # The int8-matmul recipe keeps exactly the non-matmul op types in float.
    float_ops = impls["keras-vit"]["tflite"]["int8_matmul"]["float_ops"]
    assert "FULLY_CONNECTED" not in float_ops and "CONV_2D" not in float_ops and "SOFTMAX" in float_ops
    # The README table holds the run's figures, between the markers, the rest of the file untouched.
    assert table.startswith("intro\n<!-- benchmark-table:start -->\n") and table.endswith(
        "<!-- benchmark-table:end -->\nrest\n"
    )
    fastest = rep["fastest_keras_vit"]["train/float32"]
    assert f"| float32 training, img/s | {fastest['form']} {fastest['median']:,.1f} |" in table
    assert rep["machine"]["cpu_model"] in table
    # The trainer's advice file got this run's training figures, per form, under this machine's CPU class.
    from training import advice

    (platform,) = json.loads((tmp_path / "advice.json").read_text())["platforms"].values()
    (run,) = platform["runs"]
    assert run["variant"] == "testing" and run["forward_flops"] == rep["flops"]["forward_per_image"]
    assert run["images_per_second"]["float32"]["TensorFlow"] == med["train/float32"]["keras-vit"]
    assert run["images_per_second"]["float32"]["JAX"] == med["train/float32+xla"]["keras-vit-jax"]
    measured = advice.lookup("cpu", "float32", run["forward_flops"], path=str(tmp_path / "advice.json"))
    assert measured is not None and measured.fastest in ("TensorFlow", "TensorFlow+XLA", "JAX")


@pytest.mark.slow  # two training steps compiled, float32 and bfloat16: 14-76 s measured
def test_step_split_counts_the_steps_matmuls_and_times_them():
    """The matmul list of benchmarks/step_split.py has the FLOPs of the analytic count (3x the forward pass, a
    hand count in test_forward_flops_...), and its timings add up."""
    from benchmarks import step_split

    shapes = step_split.matmul_shapes(32, 224, 16, 192, 12, 3, 768, 1000)
    assert step_split.step_flops(shapes) == 32 * flops.training_flops(
        flops.vit_forward_flops(224, 16, 192, 12, 768, 1000)
    )
    from benchmarks.keras_impl import KerasBench

    bench = KerasBench("keras-vit", {"variant": "testing", "image_size": 32, "batch": 4, "num_classes": 10})
    state = {}
    out = step_split.split("testing", 32, 4, reps=1, bench=bench, state=state)
    for precision in ("float32", "mixed_bfloat16"):
        r = out[precision]
        assert r["matmul_ms"] > 0 and r["step_ms"] > 0
        assert abs(r["step_ms"] - r["matmul_ms"] - r["rest_ms"]) < 1e-6
    assert out["bf16_speedup"] == out["float32"]["step_ms"] / out["mixed_bfloat16"]["step_ms"]
    # The benchmark's later rounds reuse the first one's compiled steps and traced matmuls.
    models, traced = {k: v[0] for k, v in bench._train.items()}, dict(state)
    step_split.split("testing", 32, 4, reps=1, bench=bench, state=state)
    assert set(models) == {("float32", False), ("bfloat16", False)} and set(traced) == {"float32", "bfloat16"}
    assert all(bench._train[k][0] is m for k, m in models.items()) and all(state[k] is traced[k] for k in traced)


@pytest.mark.slow  # golden check and training at two settings: 14-54 s measured
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


def test_litert_matmul_peak_converts_once_per_state():
    from benchmarks import tflite

    state = {}
    first = tflite.matmul_peak(1, size=64, chain=2, reps=1, state=state)
    (kept,) = state.values()
    second = tflite.matmul_peak(1, size=64, chain=2, reps=1, state=state)
    assert list(state.values()) == [kept]  # the later round timed the same interpreter, no new conversion
    assert first["gflops"] > 0 and second["gflops"] > 0 and first["ops"] == second["ops"]


def _dense_model():
    import keras

    inputs = keras.Input((4, 4, 3))
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(inputs)))


def test_the_benchmark_converts_through_the_exporters_converter(monkeypatch):
    """benchmarks/tflite.py times the conversion `python -m export` ships: every mode it times goes through
    export.tflite.converter.convert_frozen (under the exporter's name for the mode), with the model-space
    calibration."""
    import numpy as np

    from benchmarks import tflite
    from export.tflite import converter as export_tflite

    calls = []

    def recording(function, trackable, quantize, calibration=None, int8_io="float32", int8_ops=None):
        calls.append((quantize, trackable, None if calibration is None else calibration.shape, tuple(int8_ops)))
        return f"converted {quantize}".encode()

    monkeypatch.setattr(export_tflite, "convert_frozen", recording)
    model, calibration = _dense_model(), np.zeros((3, 4, 4, 3), np.float32)
    converted = [tflite.convert(model, (4, 4, 3), mode, calibration=calibration) for mode in tflite.MODES]
    assert converted == [b"converted float32", b"converted dynamic_int8", b"converted int8", b"converted int8_matmul"]
    assert [(q, m is model, shape) for q, m, shape, _ in calls] == [
        ("float32", True, None), ("dynamic_int8", True, None), ("int8", True, (3, 4, 4, 3)),
        ("int8_matmul", True, (3, 4, 4, 3)),
    ]  # fmt: skip
    assert calls[-1][3] == export_tflite.INT8_MATMUL_OPS
    tflite.convert(model, (4, 4, 3), "int8_matmul", calibration=calibration, int8_ops=("FULLY_CONNECTED",))
    assert calls[-1][3] == ("FULLY_CONNECTED",)


def test_the_benchmarks_float32_file_is_the_exporters():
    """The same bytes as the exporter's float32 conversion (logits out, no metadata), and Keras' outputs."""
    import numpy as np

    from benchmarks import tflite
    from export.tflite import converter as export_tflite

    model = _dense_model()
    flatbuffer = tflite.convert(model, (4, 4, 3), "float32")
    assert flatbuffer == export_tflite.convert(model, "float32", output="logits", metadata=False)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(tflite.run(flatbuffer, x), model.predict(x, verbose=0), atol=1e-5)


@pytest.mark.slow  # three TFLite conversions and their calibration: ~25 s
def test_int8_ops_quantises_exactly_the_op_types_asked_for():
    from benchmarks import int8_ops

    rows, threads = int8_ops.measure("testing", 32, ["GELU"], threads=1, reps=2, calibration=2)
    assert threads == 1 and [name for name, _, _ in rows] == ["float32", "int8_matmul", "int8_matmul + GELU"]
    (_, _, f32_float), (_, _, matmul_float), (_, _, gelu_float) = rows
    assert "FULLY_CONNECTED" in f32_float and "GELU" in f32_float
    assert "FULLY_CONNECTED" not in matmul_float and "GELU" in matmul_float and "SOFTMAX" in matmul_float
    assert "GELU" not in gelu_float and "SOFTMAX" in gelu_float
    assert all(ms > 0 for _, ms, _ in rows)


def test_bf16_is_measured_by_default_only_where_it_is_native(tmp_path):
    from benchmarks.__main__ import native_bf16, parse_args

    cpuinfo, gpus = tmp_path / "cpuinfo", tmp_path / "gpus"
    cpuinfo.write_text("model name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma avx512f\n\n")
    measured, why = native_bf16(str(cpuinfo), str(gpus))
    assert measured is False and "no bfloat16 instructions" in why
    gpus.mkdir()
    (gpus / "0000:01:00.0").mkdir()
    assert native_bf16(str(cpuinfo), str(gpus)) == (True, "an NVIDIA GPU")
    cpuinfo.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16\n\n")
    assert native_bf16(str(cpuinfo), str(tmp_path / "none")) == (True, "the CPU has amx_bf16, avx512_bf16")
    # The flags force either way, and say so in the report's settings.
    assert (parse_args(["--bf16"]).bf16, parse_args(["--bf16"]).bf16_reason) == (True, "--bf16")
    assert (parse_args(["--no-bf16"]).bf16, parse_args(["--no-bf16"]).bf16_reason) == (False, "--no-bf16")
    with pytest.raises(SystemExit):
        parse_args(["--bf16", "--no-bf16"])
