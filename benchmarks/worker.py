"""One implementation's worker process: builds once, then answers the coordinator's JSON requests on stdin, one reply
per stdout line prefixed with `@@result `."""

import argparse
import importlib.metadata as md
import json
import os
import resource
import sys
import time
import traceback

PREFIX = "@@result "
# keras-vit-jax and keras-vit-torch are keras-vit on those Keras backends: the coordinator sets KERAS_BACKEND in
# the worker's environment, since Keras reads it once, at import.
IMPLS = ("keras-vit", "keras-vit-jax", "keras-vit-torch", "keras-hub", "timm")


def _reply(payload):
    payload["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sys.stdout.write(PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


def _make_bench(impl, spec, threads):
    if impl == "timm":
        from benchmarks.torch_impl import TimmBench

        return TimmBench(spec, threads)
    from benchmarks.keras_impl import KerasBench

    return KerasBench("keras-hub" if impl == "keras-hub" else "keras-vit", spec, threads)


def _step_split(bench, state, reps):
    from benchmarks import step_split  # TensorFlow's: only the keras-vit worker measures it

    return step_split.measure(bench, reps, state.setdefault("step_split", {}))


def _interchange(bench, state, runtime, batch, reps, warmup, out_dir, threads):
    from benchmarks import interchange  # onnxruntime and OpenVINO: imported by the workers that measure them

    if "interchange" not in state:  # the files are converted once, on the first request, and kept for every round
        state["interchange"] = interchange.build(bench, out_dir, threads)
    return state["interchange"].measure(runtime, batch, reps, warmup)


def _interchange_info(bench, state):
    return state["interchange"].info() if "interchange" in state else {}


def _matmul_peak(bench, state, **args):
    from benchmarks.peak import matmul_peak  # TensorFlow's: not imported by the timm worker

    return matmul_peak(**args)


def _method(name):
    """The task answered by the bench's method `name` (KerasBench, TimmBench)."""

    def task(bench, state, **args):
        return getattr(bench, name)(**args)

    task.method = name
    return task


# What a worker answers: the coordinator's task name -> f(bench, the worker's state between rounds, **args).
TASKS = {
    "train": _method("train"),
    "infer": _method("infer"),
    "sizes": _method("sizes"),
    "pipeline": _method("pipeline"),
    "input_wait": _method("input_wait"),
    "tflite_setup": _method("tflite_setup"),
    "tflite_latency": _method("tflite_latency"),
    "tflite_peak": _method("tflite_peak"),
    "digits_int8": _method("digits_int8"),
    "interchange": _interchange,
    "interchange_info": _interchange_info,
    "peak": _matmul_peak,
    "step_split": _step_split,
}


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", required=True, choices=IMPLS)
    parser.add_argument("--spec", required=True, help="JSON: variant, image_size, batch, num_classes, config")
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args(argv)
    spec = json.loads(args.spec)
    try:
        start = time.perf_counter()
        bench = _make_bench(args.impl, spec, args.threads)
        versions = _versions(args.impl)
        if args.impl == "timm":
            versions["torchvision_placeholder"] = bench.torchvision_placeholder
        _reply({"ok": True, "ready_seconds": time.perf_counter() - start, "versions": versions})
    except Exception as error:  # the coordinator reports the implementation as unavailable and goes on
        _reply({"ok": False, "error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()})
        return 1
    state = {}
    for line in sys.stdin:
        request = json.loads(line)
        if request["task"] == "exit":
            break
        try:
            start = time.perf_counter()
            if request["task"] not in TASKS:
                raise ValueError(f"unknown task {request['task']!r}; the worker answers {', '.join(TASKS)}")
            result = TASKS[request["task"]](bench, state, **request["args"])
            _reply({"ok": True, "result": result, "seconds": time.perf_counter() - start})
        except Exception as error:
            _reply({"ok": False, "error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()})
    return 0


def _versions(impl):
    names = ["numpy"] + (["torch", "timm"] if impl == "timm" else ["tensorflow", "keras", "ai-edge-litert"])
    names += {"keras-vit-jax": ["jax", "jaxlib"], "keras-vit-torch": ["torch"]}.get(impl, [])
    if impl == "keras-hub":
        names.append("keras-hub")
    out = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
