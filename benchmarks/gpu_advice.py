"""The trainer's GPU advice from a `python -m benchmarks.gpu` run: `python -m benchmarks.gpu_advice
training/backend_advice.json OUT/results.jsonl [--device NAME] [--date YYYY-MM-DD]`.

A row counts only where it measured keras_vit as the trainer would run it: on Keras' JAX backend (the trainer
trains on TensorFlow or JAX, and the GPU machine has no TensorFlow), with the library's defaults (fused attention
left on `auto`, the sequence padded to `attention_kernel.DEFAULT_PAD`, no remat, no quantisation), with cuDNN's
fused attention present in its compiled step, and without an error. Of several such rows for one GPU, model and
precision, the last in the file (the newest) counts. Every other row is listed with the reason it was left out.
Rows name their GPU and day since `benchmarks.gpu_step` records them; `--device` and `--date` give them for
older results (and must agree with rows that state them).
"""

import argparse
import datetime
import json
import os
import re
import sys

from benchmarks import gpu, gpu_step
from keras_vit.models import flops, get_variant
from training import advice

DTYPES = {"bf16": "bfloat16", "fp32": "float32"}  # gpu_step's --dtype -> the advice file's precision key
NUM_CLASSES = 1000  # what gpu_step measures


def skipped(row):
    """Why `row` does not measure keras_vit as the trainer runs it on a GPU, or None when it does."""
    from keras_vit.layers.attention_kernel import DEFAULT_PAD  # imports Keras: after the inputs are checked

    argv = row.get("argv") or []
    if "error" in row or not isinstance(row.get("train_img_s"), dict):
        return f"no training figure ({row.get('error', 'not measured')})"
    if argv[:1] != ["keras-vit"] or row.get("backend") != "jax":
        return "not keras_vit on Keras' JAX backend"
    if row.get("device") == "cpu":
        return "measured on a CPU"
    args = gpu_step.parse(argv)
    if args.remat != "none" or args.quantize:
        return f"not the default model (remat={args.remat}, quantize={args.quantize})"
    if row.get("fused", "auto") != "auto":
        return f"KERAS_VIT_FUSED_ATTENTION={row['fused']}, not the default auto"
    if str(row.get("pad")) != str(DEFAULT_PAD):
        return f"padded to a multiple of {row.get('pad')}, not the library's default {DEFAULT_PAD}"
    return gpu.missing_fusion(row, on_gpu=True)


def choose(results, device=None, when=None):
    """({(gpu, variant, image_size): {dtype: row}}, [(label, why left out)]) from a results file's rows; each
    chosen row also carries its line in the file (a label recurs when a run is repeated)."""
    chosen, left_out = {}, []
    for line, row in enumerate(results, 1):
        why = skipped(row)
        if why:
            left_out.append((row.get("label"), why))
            continue
        args = gpu_step.parse(row["argv"])
        stated = {key: _stated(row, key, given, f"--{key}") for key, given in (("device", device), ("date", when))}
        row = {**row, **stated, "line": line}
        by_dtype = chosen.setdefault((row["device"], args.variant, args.image_size), {})
        older = by_dtype.get(DTYPES[args.dtype])
        if older is not None:
            left_out.append((older["label"], f"{row['label']}, later in the file, measured the same"))
        by_dtype[DTYPES[args.dtype]] = row
    return chosen, left_out


def _stated(row, key, given, flag):
    """The row's `key` (device or date), or `given` for results written before rows recorded it."""
    value = row.get(key)
    if value is not None and given is not None and value != given:
        raise ValueError(f"{row['label']} states {key}={value!r}, but {flag} says {given!r}. Drop {flag}.")
    if value is None and given is None:
        raise ValueError(
            f"{row['label']} does not state its {key} (results written before benchmarks.gpu_step recorded it). "
            f"Pass {flag}, e.g. --device 'NVIDIA H200' --date 2026-12-04."
        )
    return given if value is None else value


def record(path, key, by_dtype):
    """Writes one (gpu, variant, image_size) entry into the advice file at `path`; returns it."""
    gpu_name, variant, image_size = key
    batches = {gpu_step.parse(row["argv"]).batch for row in by_dtype.values()}
    if len(batches) > 1:
        raise ValueError(f"{variant} at {image_size} px was measured at batches {sorted(batches)}: keep one.")
    newest = max(by_dtype.values(), key=lambda row: row["date"])
    spec = {"variant": variant, "image_size": image_size, "batch": batches.pop(), "num_classes": NUM_CLASSES}
    config = get_variant(variant).replace(image_size=image_size, num_classes=NUM_CLASSES)
    medians = {dtype: {"JAX": row["train_img_s"]["median"]} for dtype, row in by_dtype.items()}
    versions = {k: v for k, v in newest.get("versions", {}).items() if k in ("jax", "keras")}
    rows = {dtype: f"{row['label']} (line {row['line']})" for dtype, row in by_dtype.items()}
    forward = flops.config_forward_flops(config)
    return advice.record_gpu(path, gpu_name, spec, forward, medians, versions, when=newest["date"], rows=rows)


def read_results(path):
    """The rows of a results file. Raises `ValueError` naming the line that is not a JSON object."""
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"{path} line {number} is not JSON ({err.msg}; a truncated or hand-edited line?): remove or "
                    f"repair it, or give the results.jsonl a `python -m benchmarks.gpu` run wrote."
                ) from None
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path} line {number} is a {type(row).__name__}, not a result row (a JSON object per line, "
                    f"as `python -m benchmarks.gpu` writes): remove that line."
                )
            rows.append(row)
    return rows


def check_files(advice_path, results_path):
    """One `ValueError` for inputs that are not an advice file and a results file, before anything is read."""
    if advice_path.endswith(".jsonl") and not results_path.endswith(".jsonl"):
        raise ValueError(
            f"the arguments look swapped ({advice_path} is a results file): give the advice file first, e.g. "
            f"python -m benchmarks.gpu_advice training/backend_advice.json {advice_path}"
        )
    for path, what in ((results_path, "results file"), (advice_path, "advice file")):
        if os.path.isdir(path):
            raise ValueError(f"the {what} {path} is a directory: give the file (e.g. {path}/results.jsonl).")
    if not os.path.isfile(results_path):
        raise ValueError(f"no results file {results_path}: give the results.jsonl of a `python -m benchmarks.gpu` run.")
    if os.path.isfile(advice_path):
        try:
            with open(advice_path) as f:
                advice_file = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(
                f"the advice file {advice_path} is not JSON ({err}): restore it (git checkout -- {advice_path})."
            ) from None
        if not isinstance(advice_file, dict):
            raise ValueError(
                f"the advice file {advice_path} holds a {type(advice_file).__name__}, not the advice object: "
                f"restore it (git checkout -- {advice_path})."
            )


def iso_date(text):
    """`--date`'s type: a day written YYYY-MM-DD, as the advice file stores it."""
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected a day as YYYY-MM-DD, e.g. 2026-12-04. Received: {text!r}")


def main(path, results_path, device=None, when=None):
    """Records the GPU figures of the results file in the advice file; prints what it took and left out."""
    chosen, left_out = choose(read_results(results_path), device, when)
    for label, why in left_out:
        print(f"left out {label}: {why}")
    for key, by_dtype in chosen.items():
        entry = record(path, key, by_dtype)
        figures = ", ".join(f"{d} JAX {f['JAX']:,.1f} img/s" for d, f in entry["images_per_second"].items())
        print(f"recorded {key[0]}: ViT-{key[1]} at {key[2]} px, batch {entry['batch']}: {figures} ({entry['rows']})")
    if not chosen:
        print(f"no row of {results_path} measured keras_vit on JAX with the library's defaults: nothing recorded")
        return 1
    return 0


def cli(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_advice", description=main.__doc__)
    p.add_argument("advice", help="the trainer's advice file to record in (training/backend_advice.json)")
    p.add_argument("results", help="a `python -m benchmarks.gpu` run's results.jsonl")
    p.add_argument("--device", default=None, help="the GPU's name, for rows that do not state it")
    p.add_argument(
        "--date", default=None, type=iso_date, help="the day measured (YYYY-MM-DD), for rows that do not state it"
    )
    args = p.parse_args(argv)
    try:
        check_files(args.advice, args.results)
        return main(args.advice, args.results, args.device, args.date)
    except (ValueError, OSError) as err:  # one line, as every command here answers a bad input
        print(f"{p.prog}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
