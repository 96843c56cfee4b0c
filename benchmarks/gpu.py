"""`python -m benchmarks.gpu`: keras_vit against timm on one accelerator, each measurement its own process, under a
deadline; refuses a GPU run whose train step lacks cuDNN's fused attention (docs/performance.md)."""

import argparse
import json
import os
import subprocess
import sys
import time

# label, environment, argv after `python -m benchmarks.gpu_step`, timeout (s), expects fused attention
B16 = ["--variant", "B/16", "--batch", "256"]
L16 = ["--variant", "L/16", "--batch", "128"]
DINOV3_B16 = ["--timm-arch", "vit_base_patch16_dinov3", "--batch", "256"]  # RoPE (DINOv3's), registers, LayerScale
EVA02_B14 = ["--timm-arch", "eva02_base_patch14_224", "--batch", "256"]  # RoPE (EVA-02's), SwiGLU with its sub-LN
PLAN = [
    ("matmul", {}, ["matmul"], 40, False),
    ("kv_jax_fused", {"KERAS_BACKEND": "jax"}, ["keras-vit", *B16], 150, True),
    ("kv_jax_unfused", {"KERAS_BACKEND": "jax", "KERAS_VIT_FUSED_ATTENTION": "never"}, ["keras-vit", *B16], 150, False),
    ("timm_compiled", {}, ["timm", *B16, "--compile"], 150, False),
    # The bare step again, then Model.fit through the trainer's DeviceInput on uint8 host arrays: fit / step.
    ("kv_jax_fit", {"KERAS_BACKEND": "jax"}, ["keras-vit", *B16, "--fit", "--steps-per-execution", "5"], 180, True),
    ("kv_jax_remat_elementwise", {"KERAS_BACKEND": "jax"}, ["keras-vit", *B16, "--remat", "elementwise"], 150, True),
    ("kv_jax_remat_block", {"KERAS_BACKEND": "jax"}, ["keras-vit", *B16, "--remat", "block"], 150, True),
    ("kv_jax_fused_pad64", {"KERAS_BACKEND": "jax", "KERAS_VIT_ATTENTION_PAD": "64"}, ["keras-vit", *B16], 150, True),
    ("kv_jax_float8", {"KERAS_BACKEND": "jax"}, ["keras-vit", *B16, "--quantize", "float8"], 180, True),
    ("kv_jax_L16", {"KERAS_BACKEND": "jax"}, ["keras-vit", *L16], 180, True),
    ("timm_compiled_L16", {}, ["timm", *L16, "--compile"], 180, False),
    (
        "kv_jax_L16_remat_elementwise",
        {"KERAS_BACKEND": "jax"},
        ["keras-vit", *L16, "--remat", "elementwise"],
        180,
        True,
    ),
    ("kv_jax_L16_remat_block", {"KERAS_BACKEND": "jax"}, ["keras-vit", *L16, "--remat", "block"], 180, True),
    ("kv_jax_dinov3_B16", {"KERAS_BACKEND": "jax"}, ["keras-vit", *DINOV3_B16], 180, True),
    ("timm_compiled_dinov3_B16", {}, ["timm", *DINOV3_B16, "--compile"], 180, False),
    ("kv_jax_eva02_B14", {"KERAS_BACKEND": "jax"}, ["keras-vit", *EVA02_B14], 180, True),
    ("timm_compiled_eva02_B14", {}, ["timm", *EVA02_B14, "--compile"], 180, False),
    ("kv_torch", {"KERAS_BACKEND": "torch"}, ["keras-vit", *B16], 120, False),
    ("kv_torch_compiled", {"KERAS_BACKEND": "torch"}, ["keras-vit", *B16, "--compile"], 180, False),
    ("timm_eager", {}, ["timm", *B16], 80, False),
]
SMOKE = ["--variant", "Ti/16", "--image-size", "32", "--batch", "4", "--steps", "2", "--rounds", "3", "--warmup", "1"]


def run_one(label, env, argv, timeout, smoke, out_dir):
    """One measurement in a fresh process; its RESULT dict (with `error` when it printed none)."""
    if smoke and argv[0] != "matmul":
        argv = smoke_argv(argv)
    cmd = [sys.executable, "-m", "benchmarks.gpu_step", *argv]
    full_env = {**os.environ, "BLOCK_TF": "1", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".85", **env}
    log_path = os.path.join(out_dir, "logs.txt")  # one file: the device tool brings back at most 8
    try:
        done = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        output, code = f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {timeout}s", "timeout"
    with open(log_path, "a") as f:
        f.write(f"===== {label} (exit {code})\n")
        f.write(output if isinstance(output, str) else output.decode(errors="replace"))
    lines = [ln for ln in str(output).splitlines() if ln.startswith("RESULT ")]
    result = json.loads(lines[-1][7:]) if lines else {"error": f"no result (exit {code}); see {log_path}"}
    return {"label": label, "env": env, **result}


def smoke_argv(argv):
    """A row's argv at smoke size: Ti/16 at 32 px, or its timm architecture at 112 px (whole patches of 14 and 16)."""
    size = ["--image-size", "112"] if "--timm-arch" in argv else []
    return [a for a in argv if a not in ("--compile",)][:1] + SMOKE + size + _extra(argv)


def _extra(argv):
    """The options a smoke run keeps (what the measurement is, not its size)."""
    flags, valued = ("--fit",), ("--quantize", "--remat", "--steps-per-execution", "--timm-arch")
    return [v for i, v in enumerate(argv) if v in flags or v in valued or (i and argv[i - 1] in valued)]


def missing_fusion(result, on_gpu):
    """Why a result that should show fused attention does not, or None."""
    if not on_gpu or "error" in result:
        return None
    forward = [t for t in result.get("train_fmha", {}) if "Backward" not in t]
    backward = [t for t in result.get("train_fmha", {}) if "Backward" in t]
    if not forward or not backward:
        return f"{result['label']}: the compiled train step has no cuDNN fused attention ({result.get('train_fmha')})"
    if not result.get("infer_fmha"):
        return f"{result['label']}: the compiled predict step has no cuDNN fused attention"
    return None


def _cell(result, key):
    value = result.get(key)
    if not isinstance(value, dict):
        return "-"
    return f"{value['median']:,.0f} ({value['min']:,.0f}-{value['max']:,.0f})"


def reference(label):
    """The timm compiled row a row's train img/s is divided by: the one of the same model."""
    model = next((m for m in ("_L16", "_dinov3_B16", "_eva02_B14") if m in label), "")
    return "timm_compiled" + model


def table(results, peak_tflops):
    """Markdown: train/inference img/s (median, min-max of rounds), peak GiB, ratios vs timm compiled, MFU."""
    by = {r["label"]: r for r in results}
    lines = [
        "| run | train img/s | inference img/s | peak GiB | XLA step GiB (temp) | train / timm compiled "
        "| fused calls (train) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["label"] == "matmul":
            continue
        ref = by.get(reference(r["label"]), {})
        ratio = "-"
        if isinstance(r.get("train_img_s"), dict) and isinstance(ref.get("train_img_s"), dict):
            ratio = f"{r['train_img_s']['median'] / ref['train_img_s']['median']:.2f}"
        peak = f"{r['peak_gib']:.1f}" if "peak_gib" in r else "-"
        calls = sum(r.get("train_fmha", {}).values()) if "train_fmha" in r else "-"
        error = f" error: {r['error'][:120]}" if "error" in r else ""
        step = r.get("memory")
        step = f"{step['total'] / 2**30:.1f} ({step['temp'] / 2**30:.1f})" if step else "-"
        lines.append(
            f"| {r['label']} | {_cell(r, 'train_img_s')} | {_cell(r, 'infer_img_s')} | {peak} | {step} | {ratio} | "
            f"{calls} |{error}"
        )
    for r in results:
        if isinstance(r.get("fit_img_s"), dict):
            lines.append(
                f"\n{r['label']}: Model.fit through DeviceInput on uint8 host arrays "
                f"({r['fit_img_s']['steps_per_execution']} steps per execution) {_cell(r, 'fit_img_s')} img/s, "
                f"{r['fit_vs_step']:.2f}x the bare step's {r['train_img_s']['median']:,.0f} in the same process"
            )
    if peak_tflops:
        lines.append(f"\nbfloat16 matmul peak measured in this run: {peak_tflops:.0f} TFLOP/s")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "gpu-bench"))
    p.add_argument("--deadline", type=float, default=480)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--only", default=None, help="comma-separated labels to run")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    start, results = time.monotonic(), []
    plan = [row for row in PLAN if not args.only or row[0] in args.only.split(",")]
    for label, env, cmd, timeout, fused in plan:
        left = args.deadline - (time.monotonic() - start)
        if left < 30:
            results.append({"label": label, "error": "skipped: deadline"})
            continue
        if args.smoke and fused:  # a CPU has no fused kernel: the smoke run takes the fused route's API all the same
            env = {"KERAS_VIT_FUSED_ATTENTION": "always", **env}
        result = run_one(label, env, cmd, min(timeout, left), args.smoke, args.out)
        results.append(result)
        print(json.dumps(result)[:600], flush=True)
        with open(os.path.join(args.out, "results.jsonl"), "a") as f:
            f.write(json.dumps(result) + "\n")
    return report(results, plan, args)


def report(results, plan, args):
    on_gpu = _on_gpu()
    peak = next((r.get("tflops") for r in results if r["label"] == "matmul"), None)
    print(table(results, peak))
    expects = {row[0] for row in plan if row[4]}
    failures = [m for r in results if r["label"] in expects and (m := missing_fusion(r, on_gpu))]
    for failure in failures:
        print("REFUSED: " + failure)
    return 1 if failures else 0


def _on_gpu():
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        return done.returncode == 0 and "GPU" in done.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


if __name__ == "__main__":
    sys.exit(main())
