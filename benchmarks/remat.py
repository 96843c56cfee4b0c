"""What `create_model(remat=...)` saves: the residuals the train step keeps for the backward pass, its time, and the
batch that fits 80 and 141 GiB (`KERAS_BACKEND=jax python -m benchmarks.remat`; docs/performance.md)."""

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

GIB = 2**30
CAPACITIES_GIB = (80, 141)  # an 80 GiB A100/H100, a 141 GiB H200
SETTINGS = ("none", "elementwise", "block")


def largest_batch(fixed_bytes, per_image_bytes, capacity_gib):
    """The largest batch whose step fits `capacity_gib`: fixed + batch * per_image <= capacity (0 if none)."""
    room = capacity_gib * GIB - fixed_bytes
    return max(0, math.floor(room / per_image_bytes)) if per_image_bytes > 0 else 0


def fit(small, large):
    """{per_image, fixed} bytes from two buffer assignments {"batch", "memory": {"total", ...}} of one setting."""
    per_image = (large["memory"]["total"] - small["memory"]["total"]) / (large["batch"] - small["batch"])
    return {"per_image": per_image, "fixed": small["memory"]["total"] - per_image * small["batch"]}


def fit_one(record):
    """The same from one GPU record: every temporary counted per image (an upper bound on the per-image cost)."""
    memory = record["memory"]
    return {"per_image": memory["temp"] / record["batch"], "fixed": memory["total"] - memory["temp"]}


def largest(fitted):
    return {f"{gib} GiB": largest_batch(fitted["fixed"], fitted["per_image"], gib) for gib in CAPACITIES_GIB}


def compile_step(variant, image_size, batch, dtype, remat):
    """(memory dict, run(n) that runs n steps) of the donated, compiled train step of one setting."""
    import jax

    from benchmarks import gpu_step

    args = argparse.Namespace(variant=variant, image_size=image_size, dtype=dtype, remat=remat, quantize=None)
    model = gpu_step._keras_model(args)
    x, y = (jax.device_put(a) for a in gpu_step._batch(argparse.Namespace(batch=batch, image_size=image_size)))
    state, step = gpu_step.compile_train_step(model, x, y)
    holder = [state]

    def run(n):
        for _ in range(n):
            _, holder[0] = step(holder[0], (x, y))
        jax.block_until_ready(holder[0])

    return gpu_step.step_memory(step), run


def kept_bytes(variant, image_size, batch, dtype, remat):
    """(bytes, count) of the residuals the training loss's gradient keeps, the model's variables left out."""
    import keras
    import numpy as np
    from jax._src.ad_checkpoint import saved_residuals  # what jax.ad_checkpoint.print_saved_residuals prints

    from benchmarks import gpu_step

    policy = {"bf16": "mixed_bfloat16", "fp32": "float32"}[dtype]
    model = _model(variant, image_size, policy, gpu_step.REMAT[remat])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = np.zeros((batch, image_size, image_size, 3), "float32"), np.zeros((batch,), "int32")
    fixed = [v.value for v in model.non_trainable_variables]

    def f(trainable):
        return loss(y, model.stateless_call(trainable, fixed, x, training=True)[0])

    kept = [a for a, where in saved_residuals(f, [v.value for v in model.trainable_variables])
            if not where.startswith("from the argument")]  # fmt: skip
    return sum(a.size * a.dtype.itemsize for a in kept), len(kept), model.count_params(), model.config.num_layers


def _model(variant, image_size, policy, remat):
    import keras_vit

    return keras_vit.create_model(variant, image_size=image_size, num_classes=1000, dtype=policy, remat=remat)


def measure_kept(variant, image_size, dtype):
    """[{variant, setting, dtype, per_image, fixed, residuals}] bytes: what batches 1 and 2 keep, and the state.

    `per_image` adds to what is kept one block's residuals without remat (the working set of the block the backward
    pass is in, which whole-block remat recomputes there), `fixed` the state: 16 bytes a parameter."""
    records, working = [], None
    for remat in SETTINGS:  # "none" first: its per-block residuals are every setting's working set
        (one, count, params, layers), (two, *_) = (kept_bytes(variant, image_size, b, dtype, remat) for b in (1, 2))
        working = (two - one) / layers if working is None else working
        records.append({"variant": variant, "setting": remat, "dtype": dtype, "kept": two - one,
                        "per_image": two - one + working, "fixed": one - (two - one) + 16 * params,
                        "residuals": count})  # fmt: skip
        print(json.dumps(records[-1]), flush=True)
    return records


def kept_table(records):
    """Markdown rows per variant, dtype and setting: MiB kept per image, the fixed GiB, the batches that fit."""
    head = " | ".join(f"largest batch, {g} GiB" for g in CAPACITIES_GIB)
    lines = [
        f"| variant | dtype | remat | residuals | MiB kept per image | + a block's working set | fixed GiB | {head} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        fits = " | ".join(str(v) for v in largest(r).values())
        mib = f"{r['kept'] / 2**20:,.1f} | {r['per_image'] / 2**20:,.1f}"
        lines.append(f"| {r['variant']} | {r['dtype']} | {r['setting']} | {r['residuals']} | {mib} | "
                     f"{r['fixed'] / GIB:.2f} | {fits} |")  # fmt: skip
    return "\n".join(lines)


def measure_memory(variant, image_size, batches, dtype):
    """[{setting, dtype, batch, memory}] for every setting at each batch (compiled, not run)."""
    records = []
    for remat in SETTINGS:
        for batch in batches:
            memory, _ = compile_step(variant, image_size, batch, dtype, remat)
            records.append({"variant": variant, "setting": remat, "dtype": dtype, "batch": batch, "memory": memory})
            print(json.dumps(records[-1]), flush=True)
            gc.collect()
    return records


def measure_time(variant, image_size, batch, dtype, rounds):
    """{setting: {median, min, max} seconds per step}: `rounds` interleaved rounds of one step per setting."""
    runs = {}
    for remat in SETTINGS:
        _, runs[remat] = compile_step(variant, image_size, batch, dtype, remat)
        runs[remat](1)  # warm-up
    seconds = {remat: [] for remat in SETTINGS}
    for _ in range(rounds):
        for remat, run in runs.items():
            start = time.perf_counter()
            run(1)
            seconds[remat].append(time.perf_counter() - start)
    return {r: {"median": statistics.median(s), "min": min(s), "max": max(s)} for r, s in seconds.items() if s}


def memory_table(records):
    """Markdown rows per setting and dtype: the step's bytes at each batch, the per-image cost, the batches that fit."""
    lines = [
        "| dtype | remat | "
        + " | ".join(f"step GiB at batch {b} (temp)" for b in sorted({r["batch"] for r in records}))
        + " | MiB per image | fixed GiB | "
        + " | ".join(f"largest batch, {g} GiB" for g in CAPACITIES_GIB)
        + " |"
    ]
    lines.append("|" + "---|" * (lines[0].count("|") - 1))
    for dtype in sorted({r["dtype"] for r in records}):
        for remat in SETTINGS:
            mine = sorted(
                (r for r in records if r["dtype"] == dtype and r["setting"] == remat), key=lambda r: r["batch"]
            )
            if len(mine) < 2:
                continue
            fitted = fit(mine[0], mine[-1])
            cells = [f"{r['memory']['total'] / GIB:.2f} ({r['memory']['temp'] / GIB:.2f})" for r in mine]
            fits = " | ".join(str(v) for v in largest(fitted).values())
            lines.append(
                f"| {dtype} | {remat} | {' | '.join(cells)} | {fitted['per_image'] / 2**20:,.1f} | "
                f"{fitted['fixed'] / GIB:.2f} | {fits} |"
            )
    return "\n".join(lines)


def from_results(path):
    """Markdown rows from a GPU run's results.jsonl: measured peak, XLA's bytes, the batches that fit (per setting)."""
    lines = ["| run | batch | peak GiB (device) | XLA step GiB (temp) | MiB per image (upper bound) | largest batch, "
             + ", ".join(f"{g} GiB" for g in CAPACITIES_GIB) + " |", "|---|---|---|---|---|---|"]  # fmt: skip
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    for r in records:
        if "memory" not in r or "--batch" not in r.get("argv", []):
            continue
        r["batch"] = int(r["argv"][r["argv"].index("--batch") + 1])
        fitted = fit_one(r)
        lines.append(
            f"| {r['label']} | {r['batch']} | {r.get('peak_gib', 0):.1f} | {r['memory']['total'] / GIB:.1f} "
            f"({r['memory']['temp'] / GIB:.1f}) | {fitted['per_image'] / 2**20:,.0f} | "
            f"{', '.join(str(v) for v in largest(fitted).values())} |"
        )
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default="B/16,L/16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--xla", action="store_true", help="also the CPU's compiled step (first variant, --batches)")
    p.add_argument("--batches", default="4,8", help="--xla: two batch sizes")
    p.add_argument("--rounds", type=int, default=0, help="timed rounds of the compiled step (first variant)")
    p.add_argument("--time-dtype", default="fp32", help="the dtype timed (bfloat16 is slow on CPUs)")
    p.add_argument("--from-results", default=None, help="a GPU run's results.jsonl: its batches that fit")
    args = p.parse_args(argv)
    if args.from_results:
        print(from_results(args.from_results))
        return 0
    os.environ.setdefault("KERAS_BACKEND", "jax")
    variants, dtypes = args.variants.split(","), args.dtypes.split(",")
    out = {"kept": [r for v in variants for d in dtypes for r in measure_kept(v, args.image_size, d)]}
    print(f"\nWhat the train step keeps for the backward pass ({args.image_size} px; estimates until a GPU run):")
    print(kept_table(out["kept"]))
    batches = [int(b) for b in args.batches.split(",")]
    if args.xla:
        out["xla"] = [r for d in dtypes for r in measure_memory(variants[0], args.image_size, batches, d)]
        print("\nXLA's CPU buffer assignment (no remat survives the CPU compiler):\n" + memory_table(out["xla"]))
    if args.rounds:
        out["seconds"] = measure_time(variants[0], args.image_size, batches[-1], args.time_dtype, args.rounds)
        print(f"\nstep seconds, batch {batches[-1]}, {args.time_dtype}, {args.rounds} interleaved rounds:")
        for remat, t in out["seconds"].items():
            ratio = t["median"] / out["seconds"]["none"]["median"]
            print(f"  {remat:12s} {t['median']:.3f} ({t['min']:.3f}-{t['max']:.3f})  x{ratio:.2f} of none")
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
