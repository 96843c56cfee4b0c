"""The benchmark's ONNX and OpenVINO rows (benchmarks/interchange.py): keras-vit's exported files and timm's
torch.onnx.export under onnxruntime and OpenVINO, on a tiny model. The keras-vit rows need no torch; the timm rows
need the optional extras (benchmarks/requirements.txt) and are skipped, saying so, where torch is absent.

The files are checked against the frameworks' own outputs computed here, with the runtimes' own APIs."""

import os

import numpy as np
import pytest

from benchmarks import coordinator, interchange, readme, report, summary, worker
from keras_vit.models.configs import get_variant

BATCH = 4


def spec():
    config = get_variant("testing").replace(image_size=32, num_classes=10).to_dict()
    keys = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")
    return {"variant": "testing", "image_size": 32, "batch": BATCH, "num_classes": 10, "overrides": {},
            "config": {k: config[k] for k in keys}}  # fmt: skip


def onnxruntime_outputs(path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: np.asarray(x, np.float32)})[0]


def openvino_outputs(path, x):
    import openvino as ov

    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(np.asarray(x, np.float32))[compiled.outputs[0]]


def check_rows(bench, own_outputs, tmp_path, layout):
    """Measures every row of one implementation, as its worker does, and checks its files against `own_outputs`
    (the framework's)."""
    state = {}  # the worker's state between requests
    for runtime in interchange.RUNTIMES:
        for batch in (BATCH, 1):
            result = worker.TASKS["interchange"](bench, state, runtime, batch, reps=2, warmup=0, out_dir=str(tmp_path),
                                                 threads=1)  # fmt: skip
            assert result["threads"] == 1 and result["latency_ms"] > 0
            assert result["images_per_second"] == pytest.approx(batch / result["latency_ms"] * 1e3)
    info = worker.TASKS["interchange_info"](bench, state)
    assert info["threads"] == 1 and set(info["files"]) == set(interchange.RUNTIMES)
    assert all(d <= 1e-4 for d in info["max_rel_diff_vs_own"].values()), info
    x = np.random.default_rng(5).uniform(-1, 1, (3, 32, 32, 3)).astype(np.float32)
    x = x if layout == "NHWC" else x.transpose(0, 3, 1, 2).copy()
    expected = np.asarray(own_outputs(x), np.float64)
    assert np.abs(expected).max() > 1e-3  # a random head: the comparison is not between zeros
    for runtime, run in (("onnxruntime", onnxruntime_outputs), ("openvino", openvino_outputs)):
        got = run(info["files"][runtime], x)
        assert got.shape == (3, 10)
        assert np.abs(got - expected).max() <= 1e-4 * max(1.0, np.abs(expected).max()), runtime
    return info


@pytest.mark.slow
def test_keras_vit_rows_run_without_torch(tmp_path):
    from benchmarks.keras_impl import KerasBench

    bench = KerasBench("keras-vit", spec())
    model = bench.float_model()
    info = check_rows(bench, lambda x: model(x, training=False), tmp_path, "NHWC")
    assert info["files"]["onnxruntime"].endswith("keras-vit.onnx") and info["bytes"]["openvino"] > 0
    assert os.path.isfile(os.path.join(tmp_path, "keras-vit.bin"))


def test_timm_rows_under_the_same_runtimes(tmp_path):
    pytest.importorskip("torch", reason="torch is an optional benchmark extra (benchmarks/requirements.txt): "
                                        "timm's ONNX rows are measured only where it is installed")  # fmt: skip
    import importlib.util

    if importlib.util.find_spec("timm") is None:  # not imported here: TimmBench puts its torchvision shim first
        pytest.skip("timm is an optional benchmark extra (benchmarks/requirements.txt)")
    import torch

    from benchmarks.torch_impl import TimmBench

    bench = TimmBench(spec(), threads=1)

    def own(x):
        with torch.inference_mode():
            return bench._eval(torch.from_numpy(x)).numpy()

    info = check_rows(bench, own, tmp_path, "NCHW")
    assert info["files"]["onnxruntime"].endswith("timm.onnx")


def test_rows_join_the_inference_phase_and_the_tables():
    from benchmarks.__main__ import parse_args

    options = parse_args(["--batch", str(BATCH), "--threads", "2"])
    tasks = [t for t in coordinator.task_list(options) if t[2] == "interchange"]
    assert [t[0] for t in tasks] == ["onnxruntime/b4", "onnxruntime/b1", "openvino/b4", "openvino/b1"]
    assert all(t[1] == ("keras-vit", "timm") and coordinator.phase_of(t[2], t[3]) == "infer" for t in tasks)
    assert [t[4] for t in tasks] == ["img/s", "ms", "img/s", "ms"] and all(t[3]["threads"] == 2 for t in tasks)
    assert not [t for t in coordinator.task_list(parse_args(["--no-onnx"])) if t[2] == "interchange"]
    # Two rounds of made-up figures: the per-round ratio and its spread reach both tables.
    assert coordinator._value("onnxruntime/b1", {"latency_ms": 2.0, "images_per_second": 500.0}) == 2.0
    assert coordinator._value("openvino/b4", {"latency_ms": 2.0, "images_per_second": 500.0}) == 500.0
    rounds = [
        {"onnxruntime/b1": {"keras-vit": 2.0, "timm": 4.0}, "openvino/b4": {"keras-vit": 300.0, "timm": 100.0}},
        {"onnxruntime/b1": {"keras-vit": 3.0, "timm": 4.0}, "openvino/b4": {"keras-vit": 200.0, "timm": 100.0}},
    ]
    rep = {"rounds": rounds, "flops": {"train_per_image": 3.0, "forward_per_image": 1.0}, "spec": {"batch": BATCH},
           "machine": {"threads": 2}, "wall_seconds": 60,
           "implementations": {"keras-vit": {"available": True, "interchange": {
               "threads": 2, "versions": {"onnxruntime": "1.0", "openvino": "2.0"}, "bytes": {"onnxruntime": 1e6},
               "max_rel_diff_vs_own": {"onnxruntime": 1e-7}}}}}  # fmt: skip
    summary.summarise(rep)
    assert rep["ratios"]["onnxruntime/b1"]["keras-vit/timm"]["rounds"] == [0.5, 0.75]
    rows = interchange.rows(rep)
    assert rows == [
        "| ONNX under onnxruntime 1.0, batch-1 latency, ms (lower is better), 2 threads | keras-vit's export 2.5 | "
        "- | - | timm's torch.onnx.export 4.0: ratio 0.62 (0.50-0.75) |",
        "| OpenVINO IR (float32 hint) 2.0, batch-4 inference, img/s, 2 threads | keras-vit's export 250.0 | - | - | "
        "timm's torch.onnx.export 100.0: ratio 2.50 (2.00-3.00) |",
    ]
    lines = interchange.table_lines(rep)
    assert "onnxruntime 1.0, openvino 2.0; 2 threads" in lines[0] and "keras-vit/timm 0.62 (0.50-0.75)" in lines[1]
    rep["settings"] = {"variant": "testing", "image_size": 32, "rounds": 2, "threads": 2}
    rep["machine"].update(loadavg_start=[1.0], loadavg_end=[1.0])
    assert all(row in readme.render(rep).splitlines() for row in rows)
    assert "\n".join(lines) in report.table(rep)
