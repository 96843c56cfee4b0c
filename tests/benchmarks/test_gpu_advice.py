"""benchmarks.gpu_advice: which rows of a `python -m benchmarks.gpu` run the trainer's GPU advice is made of."""

import json
import os

import pytest

from benchmarks import gpu_advice
from keras_vit.models import flops
from tests import support
from training import advice

B16 = flops.vit_forward_flops(224, 16, 768, 12, 3072, 1000)
L16 = flops.vit_forward_flops(224, 16, 1024, 24, 4096, 1000)
FUSED = {"__cudnn$fmhaScaleBiasSoftmax": 12, "__cudnn$fmhaScaleBiasSoftmaxBackward": 12}
ROOT = str(support.ROOT)
H200_RESULTS = os.path.join(ROOT, "benchmarks", "gpu_runs", "gpu-h200-2026-12-04.jsonl")


def _row(label, img_s, *extra, variant="B/16", batch="256", **fields):
    """A keras_vit JAX result as benchmarks.gpu_step writes it, with the library's defaults unless told."""
    row = {
        "label": label,
        "env": {"KERAS_BACKEND": "jax"},
        "argv": ["keras-vit", "--variant", variant, "--batch", batch, *extra],
        "train_img_s": {"median": img_s, "min": img_s * 0.99, "max": img_s * 1.01},
        "train_fmha": dict(FUSED),
        "infer_fmha": {"__cudnn$fmhaScaleBiasSoftmax": 12},
        "versions": {"jax": "0.99.0", "keras": "3.99.0", "torch": "9.0"},
        "backend": "jax",
        "fused": "auto",
        "pad": "2",
        "remat": "none",
        "device": "NVIDIA Test GPU",
        "date": "2026-12-05",
    }
    row.update(fields)
    return row


ROWS = [
    {"label": "matmul", "tflops": 600.0, "argv": ["matmul"], "device": "NVIDIA Test GPU"},
    _row("kv_jax_fused", 2000.0),
    _row("kv_jax_unfused", 1700.0, fused="never", train_fmha={}, infer_fmha={}),
    _row("kv_jax_fused_pad64", 1950.0, pad="64"),
    _row("kv_jax_remat_block", 1500.0, "--remat", "block", remat="block"),
    _row("kv_jax_float8", 1800.0, "--quantize", "float8"),
    _row("kv_jax_fallback", 1650.0, train_fmha={}),  # fused asked for, none compiled: a silent fallback
    _row("kv_torch", 1000.0, backend="torch", train_fmha={}),
    _row("timm_compiled", 2200.0, backend=None) | {"argv": ["timm", "--variant", "B/16", "--compile"]},
    _row("kv_jax_smoke", 50.0, device="cpu"),
    _row("kv_jax_failed", 0.0) | {"error": "RuntimeError: out of memory", "train_img_s": None},
    _row("kv_jax_L16", 700.0, variant="L/16", batch="128"),
    _row("kv_jax_fused", 2100.0, date="2026-12-06"),  # the same measured again, later in the file
]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_only_default_fused_jax_rows_make_the_advice_and_the_newest_counts(tmp_path, capsys):
    results, path = _write(tmp_path / "results.jsonl", ROWS), str(tmp_path / "advice.json")
    assert gpu_advice.cli([path, results]) == 0

    b16 = advice.lookup("gpu", "mixed_bfloat16", B16, path=path, device_name="NVIDIA Test GPU")
    assert b16.figures == {"JAX": 2100.0} and b16.run["measured"] == "2026-12-06" and b16.run["batch"] == 256
    assert b16.run["rows"] == {"bfloat16": "kv_jax_fused (line 13)"}
    assert b16.run["versions"] == {"jax": "0.99.0", "keras": "3.99.0"} and b16.run["forward_flops"] == B16
    l16 = advice.lookup("gpu", "mixed_bfloat16", L16, path=path, device_name="NVIDIA Test GPU")
    assert l16.figures == {"JAX": 700.0} and l16.run["batch"] == 128
    assert list(json.loads((tmp_path / "advice.json").read_text())["gpus"]) == ["NVIDIA Test GPU"]

    _, left_out = gpu_advice.choose(ROWS)
    why = dict(left_out)
    assert len(left_out) == len(ROWS) - 2  # all but the newest B/16 and the L/16
    assert why["kv_jax_unfused"] == "KERAS_VIT_FUSED_ATTENTION=never, not the default auto"
    assert why["kv_jax_fused_pad64"] == "padded to a multiple of 64, not the library's default 2"
    assert "remat=block" in why["kv_jax_remat_block"] and "quantize=float8" in why["kv_jax_float8"]
    assert "no cuDNN fused attention" in why["kv_jax_fallback"]
    assert why["kv_torch"] == why["timm_compiled"] == "not keras_vit on Keras' JAX backend"
    assert why["kv_jax_smoke"] == "measured on a CPU" and "out of memory" in why["kv_jax_failed"]
    assert why["kv_jax_fused"] == "kv_jax_fused, later in the file, measured the same"
    out = capsys.readouterr().out
    assert "left out kv_jax_unfused: KERAS_VIT_FUSED_ATTENTION=never" in out
    assert "recorded NVIDIA Test GPU: ViT-B/16 at 224 px, batch 256: bfloat16 JAX 2,100.0 img/s" in out


def test_results_that_do_not_name_their_gpu_need_device_and_date(tmp_path):
    old = [{k: v for k, v in _row("kv_jax_fused", 2000.0).items() if k not in ("device", "date")}]
    with pytest.raises(ValueError, match="kv_jax_fused does not state its device .* Pass --device"):
        gpu_advice.choose(old)
    with pytest.raises(ValueError, match="does not state its date"):
        gpu_advice.choose(old, device="NVIDIA H200")
    chosen, _ = gpu_advice.choose(old, device="NVIDIA H200", when="2026-12-04")
    assert list(chosen) == [("NVIDIA H200", "B/16", 224)]
    with pytest.raises(ValueError, match="states device='NVIDIA Test GPU', but --device says 'NVIDIA H200'"):
        gpu_advice.choose([_row("kv_jax_fused", 2000.0)], device="NVIDIA H200")


def test_results_without_a_usable_row_record_nothing(tmp_path, capsys):
    results = _write(tmp_path / "results.jsonl", ROWS[2:4])  # unfused and padded to 64 only
    assert gpu_advice.cli([str(tmp_path / "advice.json"), results]) == 1
    assert not (tmp_path / "advice.json").exists() and "nothing recorded" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # the results file is not optional
        gpu_advice.cli([str(tmp_path / "advice.json")])


def test_the_shipped_h200_advice_is_what_the_writer_makes_of_the_raw_results(tmp_path):
    path = str(tmp_path / "advice.json")
    assert gpu_advice.main(path, H200_RESULTS, device="NVIDIA H200", when="2026-12-04") == 0
    with open(path) as f:
        written = json.load(f)["gpus"]
    with open(advice.ADVICE_FILE) as f:
        shipped = json.load(f)["gpus"]
    assert shipped == written, "training/backend_advice.json's GPU section differs from its raw results: regenerate"
    # The figures docs/performance.md gives for that run: B/16 3,248 img/s (padded to 198), L/16 1,081 (second run).
    b16, l16 = (advice.lookup("gpu", "mixed_bfloat16", f, device_name="NVIDIA H200") for f in (B16, L16))
    assert round(b16.figures["JAX"]) == 3248 and b16.run["batch"] == 256
    assert round(l16.figures["JAX"]) == 1081 and l16.run["batch"] == 128
