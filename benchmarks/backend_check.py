"""`python -m benchmarks.backend_check`: keras_vit on this machine's Keras backend and device: parity with the golden
logits in tests/fixtures/, and training throughput in float32 and mixed_bfloat16."""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import keras_vit

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures")


def golden_model(gelu="tanh", image_size=None):
    with open(os.path.join(FIXTURES, "vit_tiny_config.json")) as f:
        c = json.load(f)
    model = keras_vit.create_model(
        "testing", image_size=image_size or c["img_size"], patch_size=c["patch_size"], hidden_size=c["embed_dim"],
        num_layers=c["depth"], num_heads=c["num_heads"], mlp_dim=c["mlp_dim"], num_classes=c["num_classes"],
        layer_norm_epsilon=c["layer_norm_epsilon"], pooling=c["pooling"],
        representation_size=c["representation_size"], gelu=gelu,
    )  # fmt: skip
    keras_vit.load_npz(model, os.path.join(FIXTURES, "vit_tiny_official.npz"))
    return model


def golden_parity():
    """Max |logit - golden| for the three golden sets."""
    with np.load(os.path.join(FIXTURES, "vit_tiny_reference_io.npz")) as ref:
        ref = dict(ref)
    out = {}
    for gelu in ("tanh", "exact"):
        logits = np.asarray(golden_model(gelu)(ref["x32"], training=False))
        out[f"32px_gelu_{gelu}"] = float(np.abs(logits - ref[f"logits32_gelu_{gelu}"]).max())
    logits = np.asarray(golden_model("tanh", image_size=48)(ref["x48"], training=False))
    out["48px_resized_pos_embedding"] = float(np.abs(logits - ref["logits48_gelu_tanh_scipy_zoom"]).max())
    return out


def train_throughput(variant, image_size, batch, dtype, steps, warmup):
    import keras

    keras.utils.set_random_seed(0)
    model = keras_vit.create_model(variant, image_size=image_size, num_classes=1000, dtype=dtype)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (batch, image_size, image_size, 3)).astype("float32")
    y = rng.integers(0, 1000, batch).astype("int32")
    start = time.perf_counter()
    for _ in range(warmup):
        model.train_on_batch(x, y)
    compile_seconds = time.perf_counter() - start
    times, losses = [], []
    for _ in range(steps):
        start = time.perf_counter()
        losses.append(float(np.asarray(model.train_on_batch(x, y)).ravel()[0]))  # reading the loss waits for the step
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {"images_per_second": batch / seconds, "step_ms": seconds * 1e3, "warmup_seconds": compile_seconds,
            "loss_first_last": [losses[0], losses[-1]]}  # fmt: skip


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.backend_check", description=__doc__.splitlines()[0])
    p.add_argument("--variant", default="B/16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dtypes", default="float32,mixed_bfloat16")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)

    import keras

    backend = keras.backend.backend()
    report = {"backend": backend, "keras": keras.__version__, "devices": _devices(backend)}
    print(f"[backend] {backend} (keras {keras.__version__}) on {report['devices']}", flush=True)
    report["golden_max_abs_diff"] = {"default_precision": golden_parity()}
    if backend == "jax":
        import jax

        with jax.default_matmul_precision("highest"):
            report["golden_max_abs_diff"]["highest_precision"] = golden_parity()
    for precision, diffs in report["golden_max_abs_diff"].items():
        print(f"[golden] {precision}: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()), flush=True)
    report["train"] = {}
    for dtype in [d.strip() for d in args.dtypes.split(",") if d.strip()]:
        result = train_throughput(args.variant, args.image_size, args.batch, dtype, args.steps, args.warmup)
        report["train"][dtype] = result
        print(f"[train] {args.variant} {args.image_size}px b{args.batch} {dtype}: {result['images_per_second']:.1f} "
              f"img/s ({result['step_ms']:.1f} ms/step; warm-up {result['warmup_seconds']:.1f} s; loss "
              f"{result['loss_first_last'][0]:.3f} -> {result['loss_first_last'][1]:.3f})", flush=True)  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def _devices(backend):
    if backend == "jax":
        import jax

        return [str(d) for d in jax.devices()]
    if backend == "torch":
        import torch

        return [torch.cuda.get_device_name(0)] if torch.cuda.is_available() else ["cpu"]
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices()]


if __name__ == "__main__":
    sys.exit(main())
