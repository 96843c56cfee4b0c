"""`python -m benchmarks.commits OLD [NEW]`: keras_vit's CPU speed at two commits, interleaved, and the programs each
asks the backend to run (docs/performance.md)."""

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (backend, form): how `--measure` runs it.
FORMS = (
    ("tensorflow", "train"),
    ("tensorflow", "train_bf16"),
    ("tensorflow", "infer"),
    ("tensorflow", "infer_xla"),
    ("jax", "train"),
    ("jax", "infer"),
    ("torch", "train"),
)


def _batch(batch, image_size):
    import numpy as np

    x = np.random.default_rng(0).uniform(-1, 1, (batch, image_size, image_size, 3)).astype("float32")
    return x, np.random.default_rng(1).integers(0, 1000, batch)


def _warm_step(keras_vit, form, variant, x, y):
    """A function running one step of `form` ("train", "train_bf16", "infer", "infer_xla") on a model that
    `keras_vit` builds, compiled and warmed by two steps. JAX always compiles its step (jit_compile=True)."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if form.endswith("bf16") else "float32")
    keras.utils.set_random_seed(0)
    model = keras_vit.create_model(variant, image_size=x.shape[1], num_classes=1000)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    jit = form.endswith("xla") or keras.config.backend() == "jax"
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss=loss, jit_compile=jit)

    def step():
        return model.train_on_batch(x, y) if form.startswith("train") else model.predict_on_batch(x)

    for _ in range(2):
        step()
    return step


def measure(form, variant, image_size, batch, steps):
    """img/s of one form in this process (keras_vit from PYTHONPATH)."""
    import keras_vit

    step = _warm_step(keras_vit, form, variant, *_batch(batch, image_size))
    count = steps if form.startswith("train") else 2 * steps
    start = time.perf_counter()
    for _ in range(count):
        step()
    return count * batch / (time.perf_counter() - start)


def paired(form, trees, args):
    """Step-by-step pairs in one process: each commit's keras_vit imported in turn (sys.modules purged between),
    its model built, compiled and warmed; then single steps alternate (old, new, new, old, ...). Pairs see the same
    machine load and process, so a shared machine's swings cancel. Returns per-pair speed ratios new/old."""
    x, y = _batch(args.batch, args.image_size)
    steps = {}
    for side in ("old", "new"):
        for name in [m for m in sys.modules if m == "keras_vit" or m.startswith("keras_vit.")]:
            del sys.modules[name]
        sys.path.insert(0, trees[side])
        try:
            import keras_vit

            steps[side] = _warm_step(keras_vit, form, args.variant, x, y)
        finally:
            sys.path.remove(trees[side])
    times = {"old": [], "new": []}
    for r in range(args.pairs):
        for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
            start = time.perf_counter()
            steps[side]()
            times[side].append(time.perf_counter() - start)
    return [o / n for o, n in zip(times["old"], times["new"])]


def programs(variant, image_size, batch):
    """Op-type counts of what this process's keras_vit runs: TensorFlow's graphs or JAX's compiled HLO."""
    import keras
    import numpy as np

    import keras_vit

    keras.utils.set_random_seed(0)
    model = keras_vit.create_model(variant, image_size=image_size, num_classes=1000)
    x = np.zeros((batch, image_size, image_size, 3), "float32")
    if keras.config.backend() == "jax":
        import jax

        def infer(trainable, non_trainable, images):
            return model.stateless_call(trainable, non_trainable, images, training=False)[0]

        state = [v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables]
        hlo = jax.jit(infer).lower(*state, x).compile().as_text()
        return {"jax_infer_hlo": dict(collections.Counter(re.findall(r"= \S+ ([\w-]+)\(", hlo)))}
    import tensorflow as tf

    @tf.function
    def train(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        return tape.gradient(loss, model.trainable_variables)

    graphs = {"tf_train_graph": train.get_concrete_function(x, np.zeros(batch, "int32")).graph}
    graphs["tf_infer_graph"] = tf.function(lambda images: model(images, training=False)).get_concrete_function(x).graph
    return {k: dict(collections.Counter(op.type for op in g.get_operations())) for k, g in graphs.items()}


def _child(tree, backend, argv, python):
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": tree, "TF_CPP_MIN_LOG_LEVEL": "3"}
    # This file by its path: an older commit may not have it; keras_vit comes from the tree (PYTHONPATH).
    done = subprocess.run([python, os.path.abspath(__file__), *argv], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        return {"error": (done.stderr or done.stdout)[-600:]}
    return json.loads(lines[-1][7:])


def _size(args):
    return ["--variant", args.variant, "--image-size", str(args.image_size), "--batch", str(args.batch)]


def compare(args, trees):
    """{"speed": {form: per-round ratios and figures}, "programs": {name: differing op counts}}."""
    python = {"torch": args.torch_python or sys.executable}
    chosen = args.forms.split(",") if getattr(args, "forms", None) else None
    forms = [f for f in FORMS if (f[0] != "torch" or args.torch_python) and (not chosen or "/".join(f) in chosen)]
    speed = collections.defaultdict(lambda: {"old": [], "new": []})
    for r in range(args.rounds):
        for backend, form in forms:
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for side in order:
                argv = ["--measure", form, *_size(args), "--steps", str(args.steps)]
                got = _child(trees[side], backend, argv, python.get(backend, sys.executable))
                speed[f"{backend}/{form}"][side].append(got.get("img_s", float("nan")))
                print(f"round {r + 1} {backend}/{form} {side}: {got}", flush=True)
    report = {"speed": {}, "programs": {}}
    for key, sides in speed.items():
        ratios = [n / o for n, o in zip(sides["new"], sides["old"])]
        report["speed"][key] = {**sides, "ratios": ratios, "median": statistics.median(ratios),
                                "min": min(ratios), "max": max(ratios)}  # fmt: skip
    for backend in () if getattr(args, "no_programs", False) else ("tensorflow", "jax"):
        old, new = (_child(trees[s], backend, ["--programs", *_size(args)], sys.executable) for s in ("old", "new"))
        for name in sorted(set(old) | set(new)):
            a, b = old.get(name, {}), new.get(name, {})
            differ = {op: [a.get(op, 0), b.get(op, 0)] for op in sorted(set(a) | set(b)) if a.get(op) != b.get(op)}
            report["programs"][name] = {"ops": [sum(a.values()), sum(b.values())], "differ": differ}
    return report


def _report_pairs(args, trees):
    import keras

    backend = keras.config.backend()
    forms = args.forms.split(",") if args.forms else [f"{b}/{f}" for b, f in FORMS if b == backend]
    for key in forms:
        if not key.startswith(backend + "/"):
            raise SystemExit(f"--pairs runs this process's backend ({backend}); {key} needs KERAS_BACKEND changed")
        ratios = paired(key.split("/", 1)[1], trees, args)
        quartiles = statistics.quantiles(ratios, n=4)
        print(
            f"{key}: new/old per pair {statistics.median(ratios):.3f} (quartiles {quartiles[0]:.3f}-"
            f"{quartiles[2]:.3f}, min-max {min(ratios):.3f}-{max(ratios):.3f}) over {len(ratios)} pairs",
            flush=True,
        )


def _worktree(ref, where):
    path = os.path.join(where, ref.replace("/", "_"))
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", path, ref], check=True,
                   capture_output=True)  # fmt: skip
    return path


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.commits", description=__doc__.splitlines()[0])
    p.add_argument("old", nargs="?", help="the commit to compare against")
    p.add_argument("new", nargs="?", default=None, help="the other commit (default: this working tree)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6, help="timed training steps (inference: twice as many batches)")
    p.add_argument("--variant", default="Ti/16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--torch-python", default=None, help="a Python with torch and keras_vit's needs: the torch rows")
    p.add_argument("--forms", default=None, help="comma-separated forms to time, e.g. tensorflow/train (default: all)")
    p.add_argument("--no-programs", action="store_true", help="time only; skip the program comparison")
    p.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="instead: N step-by-step pairs of each --forms form in this process (KERAS_BACKEND's forms)",
    )
    p.add_argument("--out", default=None, help="also write the report here (JSON)")
    p.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    p.add_argument("--programs", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        img_s = measure(args.measure, args.variant, args.image_size, args.batch, args.steps)
        print("RESULT " + json.dumps({"img_s": img_s}), flush=True)
        return
    if args.programs:
        print("RESULT " + json.dumps(programs(args.variant, args.image_size, args.batch)), flush=True)
        return
    if not args.old:
        p.error("give the commit to compare against, e.g. python -m benchmarks.commits HEAD~1")
    with tempfile.TemporaryDirectory() as where:
        trees = {"old": _worktree(args.old, where), "new": _worktree(args.new, where) if args.new else ROOT}
        try:
            if args.pairs:
                return _report_pairs(args, trees)
            report = compare(args, trees)
        finally:
            for side in ("old", "new") if args.new else ("old",):
                subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", trees[side]], check=False)
    for key, entry in report["speed"].items():
        print(f"{key}: new/old {entry['median']:.3f} ({entry['min']:.3f}-{entry['max']:.3f}) over {args.rounds} rounds")
    for name, entry in report["programs"].items():
        print(f"{name}: {entry['ops'][0]} -> {entry['ops'][1]} ops; differing op types {entry['differ'] or 'none'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
