"""LiteRT's GPU accelerator on every TFLite mode of a ViT the size people ship: what `python -m export` reports.

`python -m benchmarks.export_gpu` builds a ViT (default Ti/16 at 224 px) with seeded random weights and a random
10-class head scaled so that its top-1 is decisive (a fresh head is zero: every class would tie), exports it through
`export.export_model` in every TFLite mode (float32, float16, dynamic_int8, int8, int8_matmul; the calibrated
modes on seeded random images) with the GPU check on, and prints each file's GPU verdict (fully accelerated, or the
ops left to the CPU), how many images the check ran in its time (export/tflite/gpu.py: SwiftShader runs about one Ti/16
image every 5-11 s on a 2-core CPU), the largest probability difference against Keras and against LiteRT's CPU
kernels, and how long the check took. Where no Vulkan driver exists the verdict says "not run". A mode that misses
its CPU budget (random weights calibrate full int8 poorly) is reported, not raised: the GPU verdict stands apart.
`--variant testing --image-size 32 --modes float32` is a quick look.
"""

import argparse
import json
import os
import tempfile
import time

import numpy as np

MODES = ("float32", "float16", "dynamic_int8", "int8", "int8_matmul")


def random_model(variant, image_size, num_classes=10, seed=0, head_scale=4.0):
    """Seeded random weights and a random head whose logits spread by about `head_scale`."""
    import keras

    import keras_vit

    keras.utils.set_random_seed(seed)
    model = keras_vit.create_model(variant, image_size=image_size, num_classes=num_classes)
    head = model.get_layer("head")
    rng = np.random.default_rng(seed)
    head.kernel.assign(rng.normal(0, head_scale / np.sqrt(head.kernel.shape[0]), head.kernel.shape).astype("float32"))
    head.bias.assign(rng.normal(0, 0.1, head.bias.shape).astype("float32"))
    return model


def run(variant="Ti/16", image_size=224, modes=MODES, images=16, out=None):
    """[(file, GPU entry of the export report, its CPU verdict)], and the export's seconds."""
    import export

    model = random_model(variant, image_size)
    pixels = np.random.default_rng(3).integers(0, 256, (images, image_size, image_size, 3), dtype=np.uint8)
    half = images // 2
    source = export.ExportSource(model, representative_images=pixels[:half], heldout=(pixels[half:], None))
    options = export.ExportOptions(formats=("tflite",), quantize=tuple(modes), latency_runs=3, latency_warmup=1)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        try:
            report = export.export_model(source, out or os.path.join(tmp, "export"), options)
        except export.VerificationError as error:  # a mode over its CPU budget: still report every file
            report = error.report
        seconds = time.perf_counter() - started
    return [(a["name"], a.get("gpu", {}), a.get("passed")) for a in report["artifacts"]], seconds


def row(name, gpu, passed=True):
    """One printed line: GPU verdict, images, differences, seconds; and the file's CPU verification."""
    figures = gpu.get("figures") or {}
    parts = [f"{name}: {gpu.get('verdict') or gpu.get('status')}"]
    if gpu.get("reason"):
        parts.append(str(gpu["reason"]))
    if figures:
        parts.append(f"{figures.get('images')} images")
        parts.append(f"max |GPU - Keras| (probabilities) {figures.get('max_abs_probability_diff', float('nan')):.1e}")
        parts.append(f"max |GPU - LiteRT CPU| {gpu.get('max_abs_diff_vs_cpu', float('nan')):.1e}")
        parts.append("within budget" if gpu.get("within_budget") else f"OVER BUDGET {gpu.get('misses')}")
    if gpu.get("seconds") is not None:
        parts.append(f"{gpu['seconds']:.1f} s")
    parts.append("CPU verification passed" if passed else "CPU verification FAILED (see the export's table)")
    return "; ".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.export_gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--variant", default="Ti/16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated TFLite modes")
    parser.add_argument("--images", type=int, default=16, help="half calibrate, half verify (and feed the GPU)")
    parser.add_argument("--json", help="also write the GPU entries to this file")
    args = parser.parse_args(argv)
    if args.images < 2:
        parser.error(f"--images must be at least 2 (half calibrate, half verify); got {args.images}")
    rows, seconds = run(args.variant, args.image_size, args.modes.split(","), args.images)
    print(f"{args.variant} at {args.image_size} px, random weights; export with the GPU check took {seconds:.1f} s")
    for name, gpu, passed in rows:
        print(row(name, gpu, passed))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({name: gpu for name, gpu, _ in rows}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
