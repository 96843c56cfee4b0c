"""What loading a checkpoint costs: seconds and peak RSS, keras-vit against timm and transformers, from the same files
(`python -m benchmarks.loading`; docs/performance.md says how each row is measured)."""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = {"npz": "npz", "timm": "timm folder", "transformers": "transformers folder"}
STAGES = {
    "read": "read",
    "read, previous way": "read, previous way",
    "keras-vit": "keras_vit.from_pretrained",
    "timm": "timm.create_model",
    "transformers": "ViTForImageClassification.from_pretrained",
}
CASES = [
    ("npz", "read"),
    ("npz", "read, previous way"),
    ("timm", "read"),
    ("timm", "read, previous way"),
    ("npz", "keras-vit"),
    ("timm", "keras-vit"),
    ("timm", "timm"),
    ("transformers", "keras-vit"),
    ("transformers", "transformers"),
]
_NEEDS = {"timm": ("torch", "timm"), "transformers": ("torch", "transformers")}
TARGET_RSS = 1.3  # peak RSS at most 1.3x the weights (issue 29)


def _rss_now_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _child(fmt, stage, path):
    """Runs one load in this (fresh) process and prints {"seconds", "peak_kib"} as JSON."""
    import resource

    load, check = _loader(fmt, stage, path)  # every import happens here, before the baseline
    base = _rss_now_kib()
    start = time.perf_counter()
    loaded = load()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    check(loaded)  # after the clock and the peak: the check reads the file again
    print(json.dumps({"seconds": seconds, "peak_kib": peak - base}))


def _loader(fmt, stage, path):
    """(load, check) for one case; load() returns what check(loaded) then verifies."""
    if stage.startswith("read"):
        return _reader(fmt, stage, path), lambda total: None
    if stage == "keras-vit":
        import keras  # noqa: F401 (Keras, its backend and the loaders are imported before the baseline is taken)

        import keras_vit
        from keras_vit.weights import model_io  # noqa: F401

        def weights(model):
            return model.get_layer("posembed_input").pos_embedding.numpy(), model.get_layer("head").bias.numpy()

        return lambda: keras_vit.from_pretrained(path), lambda model: _same(fmt, path, weights(model))
    from benchmarks import _torchvision_shim

    _torchvision_shim.install()  # before timm and transformers: both import torchvision
    if stage == "timm":
        import timm  # imports torch

        cfg = _config(path)
        overlay = dict(cfg["pretrained_cfg"], file=os.path.join(path, "model.safetensors"))

        def load():
            arguments = dict(pretrained=True, pretrained_cfg_overlay=overlay, **cfg["model_args"])
            return timm.create_model(cfg["architecture"], **arguments)

        return load, lambda model: _same(fmt, path, (_numpy(model.pos_embed), _numpy(model.head.bias)))
    import torch  # noqa: F401
    import transformers

    model_class = getattr(transformers, _config(path)["architectures"][0])  # its module is imported lazily: now

    def weights(model):
        return _numpy(model.vit.embeddings.position_embeddings), _numpy(model.classifier.bias)

    return lambda: model_class.from_pretrained(path), lambda model: _same(fmt, path, weights(model))


def _reader(fmt, stage, path):
    import numpy as np

    from keras_vit.weights import checkpoint, npz

    file = path if fmt == "npz" else os.path.join(path, "model.safetensors")

    def read():
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
        return total

    return read


def _config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)


def _numpy(tensor):
    return tensor.detach().numpy()


# The file's own names for the position embedding and the head bias, read back with numpy / safetensors.
_REFERENCE_KEYS = {
    "npz": ("Transformer/posembed_input/pos_embedding", "head/bias"),
    "timm": ("pos_embed", "head.bias"),
    "transformers": ("vit.embeddings.position_embeddings", "classifier.bias"),
}


def _same(fmt, path, got):
    """Fails unless the loaded model's position embedding and head bias are the file's, exactly."""
    import numpy as np

    keys = _REFERENCE_KEYS[fmt]
    if fmt == "npz":
        with np.load(path) as archive:
            expected = [archive[k] for k in keys]
    else:
        from safetensors.numpy import load_file

        tensors = load_file(os.path.join(path, "model.safetensors"))
        expected = [tensors[k] for k in keys]
    for key, have, want in zip(keys, got, expected):
        np.testing.assert_array_equal(np.asarray(have).reshape(want.shape), want, err_msg=f"{fmt} {key}")


def _write_weights(folder, variant):
    """Random weights of `variant` as an .npz, a timm and a transformers folder; {format: path} and the bytes."""
    import numpy as np

    import keras_vit

    model = keras_vit.create_model(variant, num_classes=1000)
    rng = np.random.default_rng(0)
    for w in model.weights:
        w.assign(rng.normal(0, 0.02, w.shape).astype("float32"))
    paths = {"npz": keras_vit.save_pretrained(model, os.path.join(folder, "weights.npz"), format="npz")}
    for fmt in ("timm", "transformers"):
        paths[fmt] = keras_vit.save_pretrained(model, os.path.join(folder, fmt), format=fmt)
    return {"paths": paths, "bytes": sum(int(np.prod(w.shape)) * 4 for w in model.weights)}


def _run(*args):
    """`python -m benchmarks.loading ARGS` in a fresh process; its last stdout line, parsed as JSON."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.loading", *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def missing_libraries():
    """{stage: why it cannot be measured in this Python} for the timm and transformers rows."""
    out = {}
    for stage, modules in _NEEDS.items():
        absent = [m for m in modules if importlib.util.find_spec(m) is None]
        if absent:
            out[stage] = f"{' and '.join(absent)} not installed in this Python; see benchmarks/requirements.txt"
    return out


def _warm(path):
    """Reads the file a case loads once, in small chunks, so that every case finds it in the page cache alike."""
    file = path if path.endswith(".npz") else os.path.join(path, "model.safetensors")
    buffer = bytearray(8 << 20)  # small: a child's ru_maxrss starts from this process's
    with open(file, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def measure(variant, rounds, cases):
    """{case: [{"seconds", "peak_kib"} per round]} and the weights' bytes, from files in a removed temporary folder."""
    with tempfile.TemporaryDirectory(prefix="keras-vit-loading-") as folder:
        written = _run("--write", folder, variant)
        results = {case: [] for case in cases}
        for r in range(rounds):  # interleaved, each round from another case: a slow spell hits every case alike
            for fmt, stage in cases[r % len(cases) :] + cases[: r % len(cases)]:
                _warm(written["paths"][fmt])
                results[(fmt, stage)].append(_run("--child", fmt, stage, written["paths"][fmt]))
    return results, written["bytes"]


def _spread(values, digits):
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def rows(variant, results, weight_bytes):
    """The table's markdown rows for one model."""
    mib = weight_bytes / 2**20
    out = []
    for (fmt, stage), runs in results.items():
        seconds = [r["seconds"] for r in runs]
        peak = [r["peak_kib"] / 1024 for r in runs]
        ratio = [p / mib for p in peak]
        cells = [variant, FORMATS[fmt], STAGES[stage], _spread(seconds, 3), _spread(peak, 1), _spread(ratio, 2)]
        out.append("| " + " | ".join(cells) + " |")
    return out


def targets(variant, results, weight_bytes):
    """The issue's targets, per round: from_pretrained no slower than timm from the same file; peak <= 1.3x."""
    lines = []
    ours, theirs = results.get(("timm", "keras-vit")), results.get(("timm", "timm"))
    if ours and theirs:
        ratio = [a["seconds"] / b["seconds"] for a, b in zip(ours, theirs)]
        met = sum(r <= 1.0 for r in ratio)
        lines.append(
            f"{variant}: seconds, keras_vit.from_pretrained / timm.create_model of the same file, per round: "
            f"{_spread(ratio, 2)}; no slower in {met} of {len(ratio)} rounds"
        )
    mib = weight_bytes / 2**20
    for fmt in FORMATS:
        runs = results.get((fmt, "keras-vit"))
        if runs:
            worst = max(r["peak_kib"] / 1024 / mib for r in runs)
            met = sum(r["peak_kib"] / 1024 / mib <= TARGET_RSS for r in runs)
            lines.append(
                f"{variant}: peak RSS of keras_vit.from_pretrained ({FORMATS[fmt]}) at most {TARGET_RSS}x the "
                f"weights in {met} of {len(runs)} rounds (highest {worst:.2f}x)"
            )
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="B/16,L/16", help="comma-separated keras-vit variants")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("FORMAT", "STAGE", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--write", nargs=2, metavar=("FOLDER", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(*args.child)
    if args.write:
        return print(json.dumps(_write_weights(*args.write)))
    # This process stays small and does nothing but start others: on Linux a child's ru_maxrss starts from the
    # peak of the process that started it (vfork + exec), so the weights are written by a child too.
    missing = missing_libraries()
    cases = [case for case in CASES if case[1] not in missing]
    print(f"{args.rounds} interleaved rounds, a fresh process per load; median (min-max)", flush=True)
    print("| model | file | loaded by | seconds | peak RSS, MiB | x weights |")
    print("| :--- | :--- | :--- | ---: | ---: | ---: |", flush=True)
    notes, everything = [], {}
    for variant in args.variants.split(","):
        results, weight_bytes = measure(variant, args.rounds, cases)
        print("\n".join(rows(variant, results, weight_bytes)), flush=True)
        notes.append(f"{variant}: weights {weight_bytes / 2**20:.1f} MiB (float32)")
        notes += targets(variant, results, weight_bytes)
        everything[variant] = results
    notes += [f"not measured: {STAGES[stage]} ({why})" for stage, why in missing.items()]
    print("\n".join(notes))
    return everything


if __name__ == "__main__":
    main()
