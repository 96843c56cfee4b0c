"""`python -m benchmarks.naflex_preprocessing`: naflex_preprocessing.tflite's size, its LiteRT latency per image size
against the numpy `naflex_image`, and whether the two agree bitwise there (one JSON object on stdout)."""

import argparse
import json
import platform
import time

import numpy as np

from keras_vit.naflex_inputs import naflex_image, target_size

DEFAULT_SIZES = "224x224,480x640,768x1024,1080x1920,3024x4032"


def _median_ms(call, runs):
    call()  # the first call sizes the interpreter's tensors
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def _sum_bytes(h, w, p, n):
    """The largest intermediate: the columns pass's int32 running sum, H x W' x 3 (its taps are added one by one)."""
    return h * target_size(h, w, p, n)[1] * 3 * 4


def _measure(runner, size, args):
    """One image size: agreement, both latencies and the columns pass's intermediate."""
    from export.naflex.tflite_preprocessing import OUTPUTS

    h, w = (int(v) for v in size.split("x"))
    image = np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)
    found, expected = runner.inputs(image), naflex_image(image, args.patch_size, args.max_num_patches)
    return {
        "image": [h, w],
        "bitwise_equal": all(np.array_equal(found[k][0], e) for k, e in zip(OUTPUTS, expected)),
        "tflite_ms": _median_ms(lambda: runner.inputs(image), args.runs),
        "numpy_ms": _median_ms(lambda: naflex_image(image, args.patch_size, args.max_num_patches), args.runs),
        "columns_pass_sum_bytes": _sum_bytes(h, w, args.patch_size, args.max_num_patches),
    }


def _dense(index, weights, n_in):
    out = np.zeros((len(weights), n_in), np.int64)
    for i, (cols, w) in enumerate(zip(index, weights)):
        np.add.at(out[i], cols, w)
    return out


def exactness(pairs, sizes, seed=0):
    """The in-graph integers against numpy's float64 bisection and weights (TensorFlow eager, the same ops the
    file runs): counts of (n_in, n_out) pairs, nonzero weights, differing weights, and sizes with a differing target
    size, over `pairs` random pairs (plus all pairs up to 40) per style and `sizes` random image sizes per setting."""
    import tensorflow as tf

    from export.naflex.tflite_preprocessing import pass_taps, target_grid
    from keras_vit.resample import _fixed_point, resample_weights

    rng = np.random.default_rng(seed)
    chosen = [(a, b) for a in range(1, 41) for b in range(1, 41)]
    chosen += [tuple(int(v) for v in rng.integers(1, 4000, 2)) for _ in range(pairs)]
    found = {}
    for method, arithmetic in (("bilinear", "torchvision"), ("bicubic", "pil")):
        nonzero = differing = 0
        for n_in, n_out in chosen:
            rows, bits = _fixed_point(resample_weights(n_in, n_out, method), arithmetic)
            want = _dense([np.arange(lo, lo + len(w)) for lo, w in rows], [w for _, w in rows], n_in)
            index, weights, got_bits = pass_taps(tf.constant(n_in), tf.constant(n_out), method, arithmetic)
            got = _dense(index.numpy(), weights.numpy(), n_in)
            nonzero += int((want != 0).sum())
            differing += int((got != want).sum()) + int(int(got_bits) != bits) * n_in
        found[method] = {"pairs": len(chosen), "nonzero_weights": nonzero, "differing_weights": differing}
    images = [(h, w) for h in range(1, 60) for w in range(1, 60)]
    images += [tuple(int(v) for v in s) for s in np.exp(rng.uniform(0, np.log(30000), (sizes, 2))).astype(int) + 1]
    checked = wrong = 0
    for p, n in ((16, 256), (8, 12), (14, 729)):
        grid = tf.function(lambda h, w, p=p, n=n: target_grid(h, w, p, n))
        for h, w in images:
            rows, cols = grid(tf.constant(h), tf.constant(w))
            checked, wrong = checked + 1, wrong + ((int(rows) * p, int(cols) * p) != target_size(h, w, p, n))
    found["target_size"] = {"sizes": checked, "differing": wrong}
    return found


def main(argv=None):
    from export.naflex import tflite_preprocessing

    p = argparse.ArgumentParser(prog="python -m benchmarks.naflex_preprocessing", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="HxW image sizes, comma-separated")
    p.add_argument("--patch-size", type=int, default=16)
    p.add_argument("--max-num-patches", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument(
        "--exactness",
        type=int,
        default=0,
        metavar="N",
        help="also compare the integer weights on N random size pairs and target sizes on 2N image sizes",
    )
    args = p.parse_args(argv)
    settings = dict(patch_size=args.patch_size, max_num_patches=args.max_num_patches, style="transformers",
                    mean=0.5, std=0.5)  # fmt: skip
    data = tflite_preprocessing.flatbuffer(settings)
    runner = tflite_preprocessing.Runner(data, args.threads)
    rows = [_measure(runner, size, args) for size in args.sizes.split(",")]
    report = {"file_bytes": len(data), "settings": settings, "threads": args.threads, "runs": args.runs,
              "cpu": _cpu(), "sizes": rows}  # fmt: skip
    if args.exactness:
        report["exactness"] = exactness(args.exactness, 2 * args.exactness)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
