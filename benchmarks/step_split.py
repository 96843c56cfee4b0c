"""How a ViT training step's time splits into matmuls and everything else, in float32 and mixed_bfloat16, and the
bfloat16 speed-up bound that follows (`python -m benchmarks.step_split`)."""

import argparse
import json
import os
import statistics
import time

from benchmarks.keras_impl import KerasBench
from keras_vit.files import atomic_write_text
from keras_vit.models import get_variant


def matmul_shapes(batch, image_size, patch, width, layers, heads, mlp, classes):
    """(count, batch dims, m, k, n) of the forward products of one training step (count: how many per step)."""
    tokens = (image_size // patch) ** 2 + 1
    rows = batch * tokens
    head_dim = width // heads
    per_layer = [
        (3, (), rows, width, width),  # query, key, value
        (1, (batch * heads,), tokens, head_dim, tokens),  # scores
        (1, (batch * heads,), tokens, tokens, head_dim),  # weighted sum of values
        (1, (), rows, width, width),  # output projection
        (1, (), rows, width, mlp),
        (1, (), rows, mlp, width),
    ]
    shapes = [(count * layers, b, m, k, n) for count, b, m, k, n in per_layer]
    shapes.append((1, (), batch * (tokens - 1), patch * patch * 3, width))  # patch embedding
    shapes.append((1, (), batch, width, classes))  # head
    return shapes


def step_flops(shapes):
    """FLOPs of the forward products and the backward pass's two per product (3x the forward)."""
    total = 0
    for count, b, m, k, n in shapes:
        total += count * 2 * m * k * n * (b[0] if b else 1)
    return 3 * total


def time_matmuls(shapes, dtype, reps, state=None):
    """Median seconds of every forward and backward product of the step, run as one tf.function.

    `state` (a dict) keeps the operands and the traced function per dtype between calls.
    """
    state = {} if state is None else state
    if dtype not in state:
        state[dtype] = _matmul_function(shapes, dtype)
    products, operands = state[dtype]
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        products(operands).numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _matmul_function(shapes, dtype):
    """(traced function, its operands) computing every product of `shapes`; called once untimed."""
    import tensorflow as tf

    operands = []  # distinct tensors for every product: identical ones would be merged by grappler's CSE
    for count, b, m, k, n in shapes:
        for _ in range(count):
            a, w, g = (
                tf.cast(tf.random.uniform(shape, -1, 1), dtype) for shape in ((*b, m, k), (*b, k, n), (*b, m, n))
            )
            operands.append((a, w, g))

    @tf.function
    def products(operands):
        # Operands are arguments, not captured constants (which grappler would fold at trace time). A corner of
        # each product feeds the result, so all are computed, and .numpy() waits for them.
        corners = []
        for a, w, g in operands:
            for product in (
                tf.matmul(a, w),  # forward
                tf.matmul(g, w, transpose_b=True),  # gradient of the input
                tf.matmul(a, g, transpose_a=True),  # gradient of the weight
            ):
                corners.append(tf.reshape(tf.cast(product[..., :1, :1], tf.float32), [-1])[:1])
        return tf.add_n(corners)

    products(operands).numpy()
    return products, operands


def time_step(bench, precision, reps):
    """Median seconds of a keras-vit training step: `benchmarks.keras_impl.KerasBench.train` without XLA."""
    dtype = "float32" if precision == "float32" else "bfloat16"
    images_per_second = bench.train(dtype, xla=False, steps=reps, warmup=0)["images_per_second"]
    return bench.spec["batch"] / images_per_second


def split(variant="Ti/16", image_size=224, batch=32, reps=5, overrides=None, bench=None, state=None):
    """The split in float32 and mixed_bfloat16.

    `bench` (a keras-vit `KerasBench` of the same model) and `state` (a dict) are kept between calls by the
    benchmark's worker, so its later rounds reuse the compiled steps and the traced matmuls.
    """
    if bench is None:
        spec = {"variant": variant, "image_size": image_size, "batch": batch, "num_classes": 1000,
                "overrides": overrides or {}}  # fmt: skip
        bench = KerasBench("keras-vit", spec)
    classes = bench.spec["num_classes"]
    c = get_variant(variant).replace(**(overrides or {}))
    shapes = matmul_shapes(batch, image_size, c.patch_size, c.hidden_size, c.num_layers, c.num_heads, c.mlp_dim,
                           classes)  # fmt: skip
    out = {"variant": variant, "image_size": image_size, "batch": batch, "matmul_flops": step_flops(shapes)}
    for precision, dtype in (("float32", "float32"), ("mixed_bfloat16", "bfloat16")):
        step = time_step(bench, precision, reps)
        matmuls = time_matmuls(shapes, dtype, reps, state)
        out[precision] = {
            "step_ms": step * 1e3,
            "matmul_ms": matmuls * 1e3,
            "rest_ms": (step - matmuls) * 1e3,
            "matmul_gflops": out["matmul_flops"] / matmuls / 1e9,
            "images_per_second": batch / step,
        }
    f32, bf16 = out["float32"], out["mixed_bfloat16"]
    out["bf16_speedup"] = f32["step_ms"] / bf16["step_ms"]
    out["bf16_matmul_speedup"] = f32["matmul_ms"] / bf16["matmul_ms"]
    out["bf16_rest_speedup"] = f32["rest_ms"] / bf16["rest_ms"]
    out["bf16_bound_if_rest_took_no_time"] = f32["step_ms"] / bf16["matmul_ms"]
    return out


def measure(bench, reps, state):
    """The split of a benchmark worker's keras-vit model (`KerasBench`): its compiled training steps and the
    matmuls traced into `state` (a dict the worker keeps) serve every round, so only the first compiles."""
    if bench.backend != "tensorflow":
        raise ValueError(f"step_split runs on the TensorFlow backend; this worker runs {bench.backend}")
    spec = bench.spec
    return split(spec["variant"], spec["image_size"], spec["batch"], reps, spec.get("overrides"), bench=bench,
                 state=state)  # fmt: skip


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.step_split", description=__doc__.splitlines()[0])
    p.add_argument("--variant", default="Ti/16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    out = split(args.variant, args.image_size, args.batch, args.reps)
    print(f"ViT-{out['variant']} at {out['image_size']} px, batch {out['batch']}; TensorFlow without XLA; "
          f"{out['matmul_flops'] / 1e9:.1f} GFLOP of matmuls per step")  # fmt: skip
    for precision in ("float32", "mixed_bfloat16"):
        r = out[precision]
        print(f"  {precision:15s} step {r['step_ms']:7.1f} ms ({r['images_per_second']:.1f} img/s) = matmuls "
              f"{r['matmul_ms']:7.1f} ms ({r['matmul_gflops']:.0f} GFLOP/s) + rest {r['rest_ms']:7.1f} ms")  # fmt: skip
    print(f"  bfloat16 / float32 speed-up: step {out['bf16_speedup']:.2f}x, matmuls {out['bf16_matmul_speedup']:.2f}x, "
          f"rest {out['bf16_rest_speedup']:.2f}x; bound if the rest took no time: "
          f"{out['bf16_bound_if_rest_took_no_time']:.2f}x")  # fmt: skip
    if args.out:
        atomic_write_text(args.out, json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
