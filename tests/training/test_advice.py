"""The trainer's backend advice: the benchmark's figures per CPU class and per GPU, looked up by model size."""

import json
import math
from types import SimpleNamespace

import pytest
import tensorflow as tf

from keras_vit.models import flops, get_variant
from training import advice
from training.placement.strategy import resolve_jit_compile

TI16 = flops.vit_forward_flops(224, 16, 192, 12, 768, 1000)
B16 = flops.vit_forward_flops(224, 16, 768, 12, 3072, 1000)
L16 = flops.vit_forward_flops(224, 16, 1024, 24, 4096, 1000)
MACHINE = {"cpu_model": "Test CPU", "threads": 2}


def _cpuinfo(tmp_path, flags, key="flags"):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\n{key}\t\t: {' '.join(flags)}\n")
    return str(path)


@pytest.mark.parametrize(
    "flags, isa",
    [
        (["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"], "amx"),
        (["avx2", "avx512f", "avx512_bf16"], "avx512_bf16"),
        (["avx2", "avx512f"], "avx512"),
        (["sse4_2", "avx2", "fma"], "avx2"),
    ],
)
def test_cpu_class_is_the_widest_matmul_isa(tmp_path, flags, isa, monkeypatch):
    monkeypatch.setattr(advice.platform, "machine", lambda: "x86_64")
    assert advice.cpu_class(_cpuinfo(tmp_path, flags)) == f"x86_64 {isa}"


def test_cpu_class_without_known_isa_is_the_architecture(tmp_path, monkeypatch):
    monkeypatch.setattr(advice.platform, "machine", lambda: "aarch64")
    assert advice.cpu_class(_cpuinfo(tmp_path, ["fp", "asimd"], key="Features")) == "aarch64"
    assert advice.cpu_class(str(tmp_path / "missing")) == "aarch64"


def _record(path, variant, size, fwd, f32, bf16=None, cpu="x86_64 avx512_bf16"):
    spec = {"variant": variant, "image_size": size, "batch": 32, "num_classes": 1000}
    medians = {"float32": f32, "bfloat16": bf16 or {}}
    return advice.record(str(path), cpu, MACHINE, spec, fwd, medians, when="2026-12-01")


def test_record_then_lookup_picks_the_nearest_measured_model(tmp_path):
    path = tmp_path / "advice.json"
    tiny = 5e6
    _record(path, "testing", 32, tiny, {"TensorFlow": 900.0, "TensorFlow+XLA": 1500.0, "JAX": 1200.0})
    _record(path, "Ti/16", 224, TI16, {"TensorFlow": 34.0, "TensorFlow+XLA": 28.0, "JAX": 20.0, "PyTorch": 18.0})
    lookup = dict(path=str(path), cpu="x86_64 avx512_bf16")

    near_ti = advice.lookup("cpu", "float32", TI16 * 2, **lookup)  # S/16-like: nearer Ti/16
    assert near_ti.run["variant"] == "Ti/16" and near_ti.fastest == "TensorFlow" and near_ti.xla_faster() is False
    assert "PyTorch" not in near_ti.figures  # the trainer cannot run it: never recommended
    near_tiny = advice.lookup("cpu", "float32", tiny * 3, **lookup)
    assert near_tiny.run["variant"] == "testing" and near_tiny.fastest == "TensorFlow+XLA"
    assert near_tiny.xla_faster() is True

    # Beyond SCALE_RANGE of every measurement, on another CPU class, a GPU, a hybrid or an unmeasured
    # precision: no advice, rather than a guess.
    assert advice.lookup("cpu", "float32", TI16 * 100, **lookup) is None
    assert advice.lookup("cpu", "float32", TI16, path=str(path), cpu="x86_64 avx2") is None
    assert advice.lookup("gpu", "float32", TI16, **lookup) is None
    assert advice.lookup("cpu", "float32", None, **lookup) is None
    assert advice.lookup("cpu", "mixed_bfloat16", TI16, **lookup) is None
    assert advice.lookup("cpu", "float32", TI16, path=str(tmp_path / "none.json"), cpu="x86_64 avx2") is None


def test_record_replaces_the_same_model_and_keeps_others(tmp_path):
    path = tmp_path / "advice.json"
    _record(path, "Ti/16", 224, TI16, {"TensorFlow": 30.0, "TensorFlow+XLA": 31.0})
    _record(path, "Ti/16", 224, TI16, {"TensorFlow": 34.0, "TensorFlow+XLA": 28.0}, bf16={"TensorFlow": 40.0})
    _record(path, "Ti/16", 224, TI16, {"TensorFlow": 10.0}, cpu="x86_64 avx2")
    data = json.loads(path.read_text())
    assert sorted(data["platforms"]) == ["x86_64 avx2", "x86_64 avx512_bf16"]
    (run,) = data["platforms"]["x86_64 avx512_bf16"]["runs"]
    assert run["images_per_second"] == {
        "bfloat16": {"TensorFlow": 40.0},
        "float32": {"TensorFlow": 34.0, "TensorFlow+XLA": 28.0},
    }
    bf16 = advice.lookup("cpu", "mixed_bfloat16", TI16, path=str(path), cpu="x86_64 avx512_bf16")
    assert bf16.figures == {"TensorFlow": 40.0} and bf16.xla_faster() is None
    # One form measured is faster than nothing: the advice names it and what was not measured, never "fastest".
    assert bf16.fastest is None
    line = bf16.line("TensorFlow")
    assert line.startswith("measured training speed: TensorFlow 40.0 img/s (`python -m benchmarks` on Test CPU")
    assert line.endswith("; TensorFlow+XLA, JAX not measured on this CPU class; this run uses it")


def test_advice_line_names_the_switch_only_when_the_run_is_not_the_fastest(tmp_path):
    path = tmp_path / "advice.json"
    _record(path, "Ti/16", 224, TI16, {"TensorFlow": 34.0, "TensorFlow+XLA": 28.0, "JAX": 20.0})
    measured = advice.lookup("cpu", "float32", TI16, path=str(path), cpu="x86_64 avx512_bf16")
    same = measured.line("TensorFlow")
    assert same.startswith(
        "fastest measured training form: TensorFlow (img/s: TensorFlow 34.0, TensorFlow+XLA 28.0, JAX 20.0"
    )
    assert same.endswith("this run uses it") and "ViT-Ti/16 at 224 px, batch 32, float32" in same
    other = measured.line("JAX")
    assert other.endswith(
        "this run uses JAX: for the faster one use KERAS_BACKEND=tensorflow with --set jit_compile=False"
    )


def _record_gpu(path, variant, fwd, jax_img_s, gpu="NVIDIA H200"):
    spec = {"variant": variant, "image_size": 224, "batch": 256, "num_classes": 1000}
    versions = {"jax": "0.11.2", "keras": "3.15.1"}
    medians = {"bfloat16": {"JAX": jax_img_s}}
    return advice.record_gpu(str(path), gpu, spec, fwd, medians, versions, when="2026-12-04", rows={"bfloat16": "kv"})


def test_a_gpu_run_reads_its_gpus_measurement_and_nothing_else(tmp_path):
    path = tmp_path / "advice.json"
    _record(path, "B/16", 224, B16, {"TensorFlow": 3.0, "TensorFlow+XLA": 2.0}, bf16={"JAX": 5.0})
    _record_gpu(path, "B/16", B16, 1000.0)
    _record_gpu(path, "L/16", L16, 300.0)
    data = json.loads(path.read_text())
    assert list(data["gpus"]) == ["NVIDIA H200"] and list(data["platforms"]) == ["x86_64 avx512_bf16"]
    gpu = dict(path=str(path), device_name="NVIDIA H200")

    b16 = advice.lookup("gpu", "mixed_bfloat16", B16 * 1.5, **gpu)
    assert (b16.device, b16.kind, b16.run["variant"], b16.figures) == ("NVIDIA H200", "gpu", "B/16", {"JAX": 1000.0})
    assert b16.run["versions"] == {"jax": "0.11.2", "keras": "3.15.1"} and b16.run["measured"] == "2026-12-04"
    assert advice.lookup("gpu", "mixed_bfloat16", L16 / 1.5, **gpu).figures == {"JAX": 300.0}
    # No TensorFlow figures on a GPU: the measurement cannot decide jit_compile="auto", which keeps its rule.
    assert b16.xla_faster() is None and b16.fastest is None
    value, reason = resolve_jit_compile("auto", tf.distribute.get_strategy(), b16)
    assert value is True and reason.endswith("XLA on (this TensorFlow compiles on the default device)")

    # Another GPU, a GPU without a name, a model beyond SCALE_RANGE of both, an unmeasured precision, a TPU, and a
    # CPU lookup by the GPU's name: no advice, rather than a guess.
    assert advice.lookup("gpu", "mixed_bfloat16", B16, path=str(path), device_name="NVIDIA A100-SXM4-80GB") is None
    assert advice.lookup("gpu", "mixed_bfloat16", B16, path=str(path)) is None
    assert advice.lookup("gpu", "mixed_bfloat16", B16 / (advice.SCALE_RANGE * 1.1), **gpu) is None
    assert advice.lookup("gpu", "mixed_bfloat16", L16 * (advice.SCALE_RANGE * 1.1), **gpu) is None
    assert advice.lookup("gpu", "float32", B16, **gpu) is None
    assert advice.lookup("tpu", "mixed_bfloat16", B16, **gpu) is None
    assert advice.lookup("cpu", "mixed_bfloat16", B16, path=str(path), cpu="NVIDIA H200") is None


def test_the_gpu_advice_line_says_what_was_not_measured_and_how_to_switch(tmp_path):
    path = tmp_path / "advice.json"
    _record_gpu(path, "B/16", B16, 3210.5)
    measured = advice.lookup("gpu", "mixed_bfloat16", B16, path=str(path), device_name="NVIDIA H200")
    facts = (
        "measured training speed: JAX 3,210.5 img/s (`python -m benchmarks.gpu` on NVIDIA H200, 2026-12-04: "
        "ViT-B/16 at 224 px, batch 256, mixed_bfloat16); TensorFlow, TensorFlow+XLA not measured on this GPU"
    )
    for form in ("TensorFlow", "TensorFlow+XLA"):
        switch = f"; this run uses {form}: for the measured one use KERAS_BACKEND=jax"
        assert measured.line(form) == facts + switch
    assert measured.line("JAX") == facts + "; this run uses it"
    assert "fastest" not in measured.line("TensorFlow")


def test_the_placement_names_its_gpu_and_the_trainer_reads_that_gpus_advice(tmp_path, monkeypatch, capsys):
    import jax

    import training
    from training import run_plan
    from training.placement import distribution
    from training.placement.placements import TensorFlowPlacement

    # What TensorFlow and JAX answer on a GPU machine; on this CPU machine there is no GPU to name.
    details = {"device_name": "NVIDIA H200", "compute_capability": (9, 0)}
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["GPU:0"] if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda device: details)
    assert distribution._tensorflow_gpu_name() == "NVIDIA H200"
    monkeypatch.undo()
    assert distribution._jax_gpu_name(SimpleNamespace(platform="gpu", device_kind="NVIDIA H200")) == "NVIDIA H200"
    assert distribution._jax_gpu_name(jax.devices()[0]) is None
    assert distribution.select_placement("default").device_name is None

    path = tmp_path / "advice.json"
    _record_gpu(path, "B/16", B16, 3210.5)
    monkeypatch.setattr(advice, "ADVICE_FILE", str(path))
    config = training.TrainConfig(variant="B/16", image_size=224, precision="mixed_bfloat16", jit_compile="auto")
    placement = TensorFlowPlacement(backend="tensorflow", name="_DefaultDistributionStrategy", reason="test",
                                    num_replicas=1, device_kind="gpu", device_name="NVIDIA H200",
                                    tf_strategy=tf.distribute.get_strategy())  # fmt: skip
    assert "backend tensorflow, 1 gpu device (NVIDIA H200), _DefaultDistributionStrategy" in placement.describe()
    assert placement.metrics()["device_name"] == "NVIDIA H200"  # metrics.json names the GPU
    jit_compile, measured = run_plan._jit_compile(config, placement, SimpleNamespace(num_classes=1000))
    out = capsys.readouterr().out
    assert jit_compile is True and measured.device == "NVIDIA H200"
    assert "[training] advice: measured training speed: JAX 3,210.5 img/s (`python -m benchmarks.gpu` on NVIDIA" in out
    assert out.rstrip().endswith("; this run uses TensorFlow+XLA: for the measured one use KERAS_BACKEND=jax")


def test_auto_jit_follows_the_measurement_on_the_default_strategy(tmp_path):
    path = tmp_path / "advice.json"
    default = tf.distribute.get_strategy()
    _record(path, "Ti/16", 224, TI16, {"TensorFlow": 34.0, "TensorFlow+XLA": 28.0})
    slower_xla = advice.lookup("cpu", "float32", TI16, path=str(path), cpu="x86_64 avx512_bf16")
    value, reason = resolve_jit_compile("auto", default, slower_xla)
    assert (
        value is False
        and "XLA off: measured faster without it on this CPU class (28.0 img/s with XLA, 34.0 without" in reason
    )
    assert resolve_jit_compile(True, default, slower_xla)[0] is True  # an explicit choice still wins

    _record(path, "Ti/16", 224, TI16, {"TensorFlow": 20.0, "TensorFlow+XLA": 28.0})
    faster_xla = advice.lookup("cpu", "float32", TI16, path=str(path), cpu="x86_64 avx512_bf16")
    value, reason = resolve_jit_compile("auto", default, faster_xla)
    assert value is True and "XLA on: not measured slower on this CPU class (28.0 img/s with XLA, 20.0" in reason
    # A near tie (within NOISE_MARGIN) is noise on a shared machine: XLA stays on, as without a measurement.
    _record(path, "Ti/16", 224, TI16, {"TensorFlow": 29.0, "TensorFlow+XLA": 28.0})
    tie = advice.lookup("cpu", "float32", TI16, path=str(path), cpu="x86_64 avx512_bf16")
    assert tie.xla_faster() is True and resolve_jit_compile("auto", default, tie)[0] is True
    # Only one TensorFlow form measured: the measurement cannot decide, and "auto" keeps its rule.
    _record(path, "Ti/16", 224, TI16, {"TensorFlow": 20.0, "JAX": 28.0})
    one_form = advice.lookup("cpu", "float32", TI16, path=str(path), cpu="x86_64 avx512_bf16")
    value, reason = resolve_jit_compile("auto", default, one_form)
    assert value is True and reason.endswith("XLA on (this TensorFlow compiles on the default device)")
    # Under another strategy Keras decides, whatever was measured.
    assert resolve_jit_compile("auto", tf.distribute.MirroredStrategy(["/cpu:0"]), slower_xla)[0] == "auto"


def test_the_shipped_advice_file_is_well_formed():
    with open(advice.ADVICE_FILE) as f:
        data = json.load(f)
    assert data["platforms"], "training/backend_advice.json has no measurement"
    sections = [*data["platforms"].items(), *data.get("gpus", {}).items()]
    for cpu, platform in sections:
        for run in platform["runs"]:
            config = get_variant(run["variant"]).replace(
                image_size=run["image_size"], num_classes=run["num_classes"], **run["overrides"]
            )
            assert math.isclose(run["forward_flops"], flops.config_forward_flops(config), rel_tol=1e-9), (cpu, run)
            for figures in run["images_per_second"].values():
                assert figures and all(v > 0 for v in figures.values())


@pytest.mark.slow
def test_the_trainer_prints_the_advice_and_follows_it_for_auto_jit(tmp_path, monkeypatch, capsys):
    import training
    from training.options.resolve import model_config

    config = training.TrainConfig(dataset="synthetic", image_size=16, batch_size=16, epochs=1, steps_per_epoch=2,
                                  strategy="default", jit_compile="auto")  # fmt: skip
    fwd = flops.config_forward_flops(model_config(config, 10))
    path = tmp_path / "advice.json"
    _record(path, "testing", 16, fwd, {"TensorFlow": 900.0, "TensorFlow+XLA": 500.0, "JAX": 600.0})
    monkeypatch.setattr(advice, "ADVICE_FILE", str(path))
    monkeypatch.setattr(advice, "cpu_class", lambda: "x86_64 avx512_bf16")

    result = training.train(config, str(tmp_path / "run"), verbose=0)
    out = capsys.readouterr().out
    assert "jit_compile=auto: XLA off: measured faster without it on this CPU class (500.0 img/s with XLA, 900.0" in out
    assert "[training] advice: fastest measured training form: TensorFlow (img/s: TensorFlow 900.0" in out
    assert result.metrics["jit_compile"] is False and result.metrics["fastest_measured_form"] == "TensorFlow"
