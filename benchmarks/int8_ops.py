"""Which op types pay off in int8 on LiteRT's CPU kernels: `int8_matmul` plus each candidate, batch-1 latency.

`python -m benchmarks.int8_ops` converts one keras-vit model (default Ti/16 at 224 px; the benchmark's float32
inference model: random weights, a random head) to float32, to the exporter's `int8_matmul` recipe
(export.tflite.converter.INT8_MATMUL_OPS in int8, the rest float) and to that recipe with further op types quantised
(`--candidates`, default: GELU, SOFTMAX, BATCH_MATMUL and all three), and prints each one's batch-1 latency
(median of `--reps` after a warm-up, `--threads` threads, LiteRT's default XNNPACK delegate as an app gets it),
the ratio to float32, and the op types left in float.
"""

import argparse
import os

import numpy as np

DEFAULT_CANDIDATES = ("GELU", "SOFTMAX", "BATCH_MATMUL", "GELU+SOFTMAX+BATCH_MATMUL")


def measure(variant="Ti/16", image_size=224, candidates=DEFAULT_CANDIDATES, threads=None, reps=30, calibration=8):
    """[(name, latency ms, float op types)] for float32, int8_matmul and int8_matmul plus each candidate."""
    from benchmarks import tflite
    from benchmarks.keras_impl import KerasBench
    from export.tflite.converter import INT8_MATMUL_OPS

    threads = threads or len(os.sched_getaffinity(0))
    # The benchmark's float32 inference model: random weights, a randomly re-initialised head.
    spec = {"variant": variant, "image_size": image_size, "batch": 1, "num_classes": 1000}
    model = KerasBench("keras-vit", spec).float_model()
    images = np.random.default_rng(2).uniform(-1, 1, (calibration, image_size, image_size, 3)).astype("float32")
    settings = [("float32", None), ("int8_matmul", INT8_MATMUL_OPS)]
    settings += [(f"int8_matmul + {c}", (*INT8_MATMUL_OPS, *c.split("+"))) for c in candidates]
    rows = []
    for name, int8_ops in settings:
        mode = "float32" if int8_ops is None else "int8_matmul"
        flatbuffer = tflite.convert(model, (image_size, image_size, 3), mode, calibration=images, int8_ops=int8_ops)
        latency = tflite.Latency(flatbuffer, threads)
        latency.measure(3, 3)
        ms = min(latency.measure(reps, 1) for _ in range(3))  # the best of three medians: the machine is shared
        rows.append((name, ms, tflite.op_inventory(flatbuffer)["float_ops"]))
    return rows, threads


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.int8_ops", description=__doc__.splitlines()[0])
    p.add_argument("--variant", default="Ti/16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--candidates", default=",".join(DEFAULT_CANDIDATES),
                   help="comma-separated op types (or A+B groups) to quantise on top of int8_matmul")  # fmt: skip
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    rows, threads = measure(args.variant, args.image_size, [c for c in args.candidates.split(",") if c],
                            args.threads, args.reps)  # fmt: skip
    base = rows[0][1]
    print(f"ViT-{args.variant} at {args.image_size} px, batch 1, {threads} threads, LiteRT with XNNPACK")
    for name, ms, float_ops in rows:
        print(f"  {name:45s} {ms:7.2f} ms  {ms / base:5.2f}x float32  float: {', '.join(sorted(float_ops)) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
