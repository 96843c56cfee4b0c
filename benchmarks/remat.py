"""What `create_model(remat=...)` saves: the compiled train step's memory per setting, its time, the batch that fits.

`python -m benchmarks.remat` (Keras' JAX backend, no TensorFlow) compiles Keras' own `train_step` jitted with the
state donated (as `Model.fit` and `benchmarks.gpu_step` do) for each remat setting and reads XLA's buffer assignment
(`compiled.memory_analysis()`: arguments, outputs, donated aliases, temporaries) at two batch sizes: the difference
is the memory one more image costs, the rest is what the step holds whatever the batch (state, gradients, optimizer
update). From those two numbers it computes the largest batch that fits 80 and 141 GiB. Then it times the step on
this machine: `--rounds` rounds, each running every setting once in turn (interleaved, so a busy neighbour slows
all settings alike), median and min-max per setting.

On a CPU these are estimates of a GPU's figures: XLA's CPU compiler fuses and schedules differently, and the
explicit attention runs where a GPU would use cuDNN's fused kernel. A GPU run of `python -m benchmarks.gpu` writes
`results.jsonl` with the same buffer assignment per setting at batch 256 (and the device's measured peak);
`python -m benchmarks.remat --from-results OUT/results.jsonl` turns those into the largest batches instead.

    KERAS_BACKEND=jax python -m benchmarks.remat                              # B/16 224 px, batches 4 and 8
    KERAS_BACKEND=jax python -m benchmarks.remat --variant L/16 --dtypes bf16 --rounds 0
"""

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
    p.add_argument("--variant", default="B/16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batches", default="4,8", help="two batch sizes: the per-image cost is their difference")
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds (0: memory only)")
    p.add_argument("--time-dtype", default="fp32", help="the dtype timed (bfloat16 is slow on CPUs)")
    p.add_argument("--from-results", default=None, help="a GPU run's results.jsonl: its batches that fit")
    args = p.parse_args(argv)
    if args.from_results:
        print(from_results(args.from_results))
        return 0
    os.environ.setdefault("KERAS_BACKEND", "jax")
    batches = [int(b) for b in args.batches.split(",")]
    records = []
    for dtype in args.dtypes.split(","):
        records += measure_memory(args.variant, args.image_size, batches, dtype)
    print(f"\n{args.variant}, {args.image_size} px, XLA buffer assignment of the donated train step (estimates "
          f"until a GPU run confirms them):\n" + memory_table(records))  # fmt: skip
    if args.rounds:
        timed = measure_time(args.variant, args.image_size, batches[-1], args.time_dtype, args.rounds)
        print(f"\nstep seconds, batch {batches[-1]}, {args.time_dtype}, {args.rounds} interleaved rounds:")
        for remat, s in timed.items():
            ratio = s["median"] / timed["none"]["median"]
            print(f"  {remat:12s} {s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})  x{ratio:.2f} of none")
        print("RESULT " + json.dumps({"memory": records, "seconds": timed}))
    else:
        print("RESULT " + json.dumps({"memory": records}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
