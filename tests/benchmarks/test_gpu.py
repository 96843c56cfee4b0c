"""benchmarks.gpu: the smoke mode CI runs on the CPU, and the refusal of a GPU run without fused attention."""

import datetime
import json

import pytest

from benchmarks import gpu, gpu_step

HLO = """
  %custom-call.1 = (bf16[256,198,12,64]{3,2,1,0}, f32[256,12,198]{2,1,0}) custom-call(%a, %b, %c, %mask),
    custom_call_target="__cudnn$fmhaScaleBiasSoftmax", backend_config={}
  %custom-call.9 = (bf16[256,198,12,64]{3,2,1,0}) custom-call(%a, %b),
    custom_call_target="__cudnn$fmhaScaleBiasSoftmaxBackward"
  %dot.3 = bf16[256,197,768]{2,1,0} dot(%x, %w)
"""


def test_fused_calls_are_read_from_the_hlo_text():
    assert gpu_step.fused_calls(HLO) == {"__cudnn$fmhaScaleBiasSoftmax": 1, "__cudnn$fmhaScaleBiasSoftmaxBackward": 1}
    assert gpu_step.fused_calls("%dot = dot(%a, %b)") == {}


def test_a_gpu_run_without_fused_attention_is_refused():
    fused = {"label": "kv", "train_fmha": gpu_step.fused_calls(HLO), "infer_fmha": {"__cudnn$fmhaSoftmax": 12}}
    assert gpu.missing_fusion(fused, on_gpu=True) is None
    forward_only = {**fused, "train_fmha": {"__cudnn$fmhaScaleBiasSoftmax": 12}}
    assert "no cuDNN fused attention" in gpu.missing_fusion(forward_only, on_gpu=True)
    assert "no cuDNN fused attention" in gpu.missing_fusion({**fused, "train_fmha": {}}, on_gpu=True)
    assert "predict step" in gpu.missing_fusion({**fused, "infer_fmha": {}}, on_gpu=True)
    assert gpu.missing_fusion({**fused, "train_fmha": {}}, on_gpu=False) is None  # a CPU has no such kernel


def test_a_result_names_its_device_and_day(capsys):
    gpu_step.main(["matmul"])  # JAX, a 512^2 product on the CPU: a second
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("RESULT ")]
    result = json.loads(line[len("RESULT ") :])
    assert result["device"] == "cpu" and result["date"] == datetime.date.today().isoformat()
    assert gpu_step.device_name("keras-vit", "jax") == "cpu"  # jax.devices()[0].device_kind: "NVIDIA H200" on one


@pytest.mark.slow
def test_smoke_mode_measures_keras_vit_on_jax_without_tensorflow(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "_on_gpu", lambda: False)
    # kv_jax_fit is kv_jax_fused's measurement followed by Model.fit: it stands for the fused row here.
    only = "matmul,kv_jax_fit,kv_jax_unfused,kv_jax_remat_elementwise"
    code = gpu.main(["--smoke", "--only", only, "--out", str(tmp_path)])
    assert code == 0
    results = {r["label"]: r for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    for label in ("kv_jax_fit", "kv_jax_unfused", "kv_jax_remat_elementwise"):
        r = results[label]
        assert "error" not in r, r
        assert r["train_img_s"]["min"] <= r["train_img_s"]["median"] <= r["train_img_s"]["max"]
        assert len(r["losses"]) == 1 + 3 * 2  # warm-up, then 3 rounds of 2 steps
        assert r["device"] == "cpu"
    assert results["kv_jax_fit"]["fused"] == "always"  # the smoke run takes the fused route's API on the CPU
    # the same seed and data on the two routes: the same training, step for step, to mixed bfloat16's rounding
    # (3.3e-4 apart over 7 steps; the routes agree to 1e-6 in float32: tests/keras_vit/test_attention_kernel.py)
    fused, unfused = results["kv_jax_fit"]["losses"], results["kv_jax_unfused"]["losses"]
    assert max(abs(a - b) for a, b in zip(fused, unfused, strict=True)) < 2e-3
    # remat: the same training again, and the step's XLA buffer assignment in the record
    remat = results["kv_jax_remat_elementwise"]
    assert remat["remat"] == "elementwise" and "--remat" in remat["argv"]
    # mixed bfloat16 again; remat's gradients themselves are held to 1e-6 in float32 by tests/keras_vit/test_remat.py
    assert max(abs(a - b) for a, b in zip(remat["losses"], fused, strict=True)) < 2e-3
    assert remat["memory"]["temp"] > 0 and remat["memory"]["total"] >= remat["memory"]["argument"]
    assert results["matmul"]["tflops"] > 0
    # Model.fit through the trainer's DeviceInput on uint8 host arrays, against the bare step of the same process
    fit = results["kv_jax_fit"]
    assert "error" not in fit, fit
    assert fit["fit_img_s"]["min"] <= fit["fit_img_s"]["median"] <= fit["fit_img_s"]["max"]
    assert fit["fit_img_s"]["steps_per_execution"] == 2  # --steps-per-execution 5 down to a divisor of 2 steps
    assert fit["fit_vs_step"] == fit["fit_img_s"]["median"] / fit["train_img_s"]["median"] > 0


def test_the_rope_rows_build_keras_vits_model_of_their_timm_architecture():
    """DINOv3 B/16 and EVA-02 B/14 against timm compiled: each keras-vit row resolves (at full and at smoke size)
    and its train ratio is taken against the timm row of the same architecture."""
    labels = {row[0] for row in gpu.PLAN}
    rows = [row for row in gpu.PLAN if "--timm-arch" in row[2]]
    assert {row[2][row[2].index("--timm-arch") + 1] for row in rows} == {"vit_base_patch16_dinov3",
                                                                         "eva02_base_patch14_224"}  # fmt: skip
    for label, _, argv, _, fused in rows:
        assert gpu.reference(label) in labels and gpu.reference(label) != "timm_compiled"
        if argv[0] == "keras-vit":
            assert fused
            for args in (gpu_step.parse(argv), gpu_step.parse(gpu.smoke_argv(argv))):
                config = gpu_step._keras_config(args)
                assert config.rope in ("dinov3", "eva") and config.hidden_size == 768
                assert args.image_size % config.patch_size == 0
    assert gpu.reference("kv_jax_L16_remat_block") == "timm_compiled_L16" and gpu.reference("kv_jax_fused") == (
        "timm_compiled")  # fmt: skip
