"""What loading a checkpoint costs: seconds and peak RSS for a ViT from an `.npz` and from a `.safetensors` file.

`python -m benchmarks.loading` writes random ViT-B/16 weights (224 px, 1000 classes) into a temporary folder, once
as the original `.npz` layout and once as a timm folder (config.json + model.safetensors), then measures, each in
a fresh subprocess (so no run inherits another's memory), for `--rounds` interleaved rounds:
- read: the reader keras-vit's loaders call (`read_npz`, `read_safetensors`), every array then summed so that each
  byte is really read (a memory map that is never touched would cost nothing and prove nothing);
- read, previous way: what those readers did before they memory-mapped: `safetensors.numpy.load` of the file's
  bytes, and `np.load` of the `.npz` member by member;
- model: `keras_vit.from_pretrained(path)`, which builds the model and loads the weights into it.
Peak RSS is `resource.getrusage(RUSAGE_SELF).ru_maxrss` at the end minus the RSS just before the load (after the
imports), so the libraries' own footprint is left out; it is compared with the weights' size (float32 bytes).
Figures are the median with the min-max over rounds. A comparison with timm / transformers needs torch, which is
not installed here. `--variant testing --rounds 1` is a quick look.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [
    ("npz", "read"),
    ("npz", "read, previous way"),
    ("safetensors", "read"),
    ("safetensors", "read, previous way"),
    ("npz", "model"),
    ("safetensors", "model"),
]


def _rss_now_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _child(fmt, stage, path):
    """Runs one load in this (fresh) process and prints {"seconds", "peak_kib"} as JSON."""
    import resource

    import numpy as np

    from keras_vit.weights import checkpoint, npz

    if stage == "model":
        import keras  # noqa: F401 (Keras, its backend and the loaders are imported before the baseline is taken)

        import keras_vit
        from keras_vit.weights import pretrained  # noqa: F401
    file = os.path.join(path, "model.safetensors") if fmt == "safetensors" else path
    base = _rss_now_kib()
    start = time.perf_counter()
    if stage == "model":
        model = keras_vit.from_pretrained(path)
        assert model.count_params() > 0
    else:
        if stage == "read":
            arrays = npz.read_npz(file) if fmt == "npz" else checkpoint.read_safetensors(file)
        elif fmt == "npz":
            with np.load(file, allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        else:
            from safetensors.numpy import load

            with open(file, "rb") as f:
                arrays = dict(load(f.read()))
        total = sum(float(np.sum(a, dtype=np.float64)) for a in arrays.values())  # touches every byte
        assert np.isfinite(total)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({"seconds": seconds, "peak_kib": peak - base}))


def _write_weights(folder, variant):
    """Random weights of `variant` as an .npz and a timm folder; returns (npz path, timm folder, weights bytes)."""
    import numpy as np

    import keras_vit

    model = keras_vit.create_model(variant, num_classes=1000)
    rng = np.random.default_rng(0)
    for w in model.weights:
        w.assign(rng.normal(0, 0.02, w.shape).astype("float32"))
    npz_path = keras_vit.save_pretrained(model, os.path.join(folder, "weights.npz"), format="npz")
    timm_folder = keras_vit.save_pretrained(model, os.path.join(folder, "timm"), format="timm")
    return npz_path, timm_folder, sum(int(np.prod(w.shape)) * 4 for w in model.weights)


def _run(*args):
    """`python -m benchmarks.loading ARGS` in a fresh process; its last stdout line, parsed as JSON."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.loading", *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=900,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _spread(values, unit):
    return f"{statistics.median(values):.{unit}f} ({min(values):.{unit}f}-{max(values):.{unit}f})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", default="B/16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("FORMAT", "STAGE", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--write", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(*args.child)
    if args.write:
        return print(json.dumps(_write_weights(args.write, args.variant)))
    # This process stays small and does nothing but start others: on Linux a child's ru_maxrss starts from the
    # peak of the process that started it (vfork + exec), so the weights are written by a child too.
    with tempfile.TemporaryDirectory() as folder:
        npz_path, timm_folder, weight_bytes = _run("--write", folder, "--variant", args.variant)
        paths = {"npz": npz_path, "safetensors": timm_folder}
        results = {case: [] for case in CASES}
        for _ in range(args.rounds):  # interleaved: a slow spell of the machine hits every case alike
            for fmt, stage in CASES:
                results[(fmt, stage)].append(_run("--child", fmt, stage, paths[fmt]))
    mib = weight_bytes / 2**20
    print(f"{args.variant}: weights {mib:.1f} MiB (float32), {args.rounds} rounds, median (min-max)")
    print(f"{'format':<12} {'stage':<20} {'seconds':>22} {'peak RSS MiB':>24} {'x weights':>22}")
    for (fmt, stage), runs in results.items():
        seconds = [r["seconds"] for r in runs]
        peak = [r["peak_kib"] / 1024 for r in runs]
        ratio = [p / mib for p in peak]
        print(f"{fmt:<12} {stage:<20} {_spread(seconds, 3):>22} {_spread(peak, 1):>24} {_spread(ratio, 2):>22}")
    return results


if __name__ == "__main__":
    main()
