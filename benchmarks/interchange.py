"""ONNX and OpenVINO inference, in the benchmark's inference phase: keras-vit's own artifacts against timm's ViT.

keras-vit's files are the exporter's (export/interchange/onnx.py and export/interchange/openvino.py: Keras'
`model.export`, opset 17, the
batch open, NHWC); timm's is `torch.onnx.export` of the same architecture (the TorchScript exporter, `dynamo=False`,
opset 17, the batch open, NCHW), which OpenVINO reads directly. Both run under the same settings: onnxruntime's CPU
provider with `threads` intra-op threads, one inter-op thread and its default (full) graph optimisation; OpenVINO's
CPU plugin with `INFERENCE_NUM_THREADS=threads`, the float32 inference precision hint (its default on a CPU with
AVX512-BF16 or AMX is bfloat16) and the latency hint. Timing is the other inference rows' (benchmarks/keras_impl.py):
the median of `reps` calls after `warmup`, the first block of a setting always warmed twice.
"""

import os
import statistics
import time

import numpy as np

from benchmarks.spread import with_spread
from keras_vit.files import atomic_write_bytes

RUNTIMES = ("onnxruntime", "openvino")
OPSET = 17


def onnx_session(path, threads):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = int(threads), 1
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: session.run(None, {name: x})[0]


def openvino_request(path, threads):
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": int(threads), "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    compiled = core.compile_model(core.read_model(path), "CPU", config)
    request = compiled.create_infer_request()
    output = compiled.outputs[0]
    return lambda x: np.array(request.infer([x])[output])


OPENERS = {"onnxruntime": onnx_session, "openvino": openvino_request}


def keras_vit_files(model, out_dir, prefix="keras-vit"):
    """keras-vit's ONNX and OpenVINO files of `model`, as `python -m export` writes them: {runtime: path}."""
    from export.description import describe
    from export.interchange import onnx, openvino
    from export.kinds import classifier

    labels = [str(i) for i in range(int(model.output_shape[-1]))]
    described = describe(classifier, model, labels)
    onnx_path = os.path.join(out_dir, f"{prefix}.onnx")
    atomic_write_bytes(onnx_path, onnx.convert(model, described))
    xml, weights = openvino.convert(model, described)
    xml_path = os.path.join(out_dir, f"{prefix}.xml")
    atomic_write_bytes(os.path.splitext(xml_path)[0] + ".bin", weights)
    atomic_write_bytes(xml_path, xml)
    return {"onnxruntime": onnx_path, "openvino": xml_path}


def timm_files(model, example, out_dir, prefix="timm"):
    """timm's `model` through `torch.onnx.export` (`example`: an NCHW float32 tensor): {runtime: path}."""
    import warnings

    import torch

    path = os.path.join(out_dir, f"{prefix}.onnx")
    with warnings.catch_warnings():  # the tracer's notes on Python-side shape checks in timm's blocks
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (example,), path + ".tmp", dynamo=False, opset_version=OPSET, input_names=["images"],
            output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
        )  # fmt: skip
    os.replace(path + ".tmp", path)
    return {"onnxruntime": path, "openvino": path}


class Interchange:
    """One implementation's files under both runtimes, each opened once and timed every round.

    `files` is {runtime: path}, `images` {batch: float32 array in the file's layout}, and `reference(x)` the
    implementation's own outputs, against which the runtimes' are checked once (the files are the right model).
    """

    def __init__(self, files, images, reference, threads):
        self.files, self.images, self.threads = files, images, int(threads)
        self._run, self._warm, self.parity = {}, set(), {}
        self._reference = reference

    def _runner(self, runtime):
        if runtime not in self._run:
            if runtime not in OPENERS:
                raise ValueError(f"runtime must be one of {RUNTIMES}. Received: {runtime!r}")
            run = self._run[runtime] = OPENERS[runtime](self.files[runtime], self.threads)
            x = self.images[min(self.images)]
            expected = np.asarray(self._reference(x), np.float64)
            self.parity[runtime] = float(np.abs(run(x) - expected).max() / max(1.0, np.abs(expected).max()))
        return self._run[runtime]

    def measure(self, runtime, batch, reps, warmup):
        run, x = self._runner(runtime), self.images[batch]
        if (runtime, batch) not in self._warm:
            self._warm.add((runtime, batch))
            warmup = max(warmup, 2)
        times = []
        for i in range(warmup + reps):
            start = time.perf_counter()
            run(x)
            if i >= warmup:
                times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        return {"images_per_second": batch / seconds, "latency_ms": seconds * 1e3, "threads": self.threads}

    def info(self):
        """Versions, file sizes, the thread count and each runtime's max relative difference from the
        implementation's own outputs (batch 1)."""
        import importlib.metadata as md

        sizes = {}
        for runtime, path in self.files.items():
            paths = [path] + ([os.path.splitext(path)[0] + ".bin"] if path.endswith(".xml") else [])
            sizes[runtime] = sum(os.path.getsize(p) for p in paths)
        return {"threads": self.threads, "files": dict(self.files), "bytes": sizes,
                "versions": {name: md.version(name) for name in ("onnxruntime", "openvino")},
                "max_rel_diff_vs_own": dict(self.parity), "opset": OPSET}  # fmt: skip


def build(bench, out_dir, threads):
    """The Interchange of a worker's bench: timm's for a TimmBench (the one that carries torch), else a KerasBench's."""
    return timm(bench, out_dir, threads) if hasattr(bench, "torch") else keras_vit(bench, out_dir, threads)


def keras_vit(bench, out_dir, threads):
    """The Interchange of a KerasBench's float model (benchmarks/keras_impl.py)."""
    model = bench.float_model()
    files = keras_vit_files(model, out_dir, bench.impl)
    return Interchange(files, bench.images, lambda x: model.predict(x, verbose=0), threads)


def timm(bench, out_dir, threads):
    """The Interchange of a TimmBench's eval model (benchmarks/torch_impl.py), NCHW images."""
    torch = bench.torch
    if bench._eval is None:
        bench._eval = bench.make().eval()
    model = bench._eval
    files = timm_files(model, bench.images[1], out_dir)
    images = {b: x.numpy() for b, x in bench.images.items()}

    def reference(x):
        with torch.inference_mode():
            return model(torch.from_numpy(x)).numpy()

    return Interchange(files, images, reference, threads)


TITLES = {"onnxruntime": "ONNX under onnxruntime", "openvino": "OpenVINO IR (float32 hint)"}


def _keys(report):
    batch = report["spec"]["batch"]
    return [(runtime, b, f"{runtime}/b{b}") for runtime in RUNTIMES for b in dict.fromkeys((batch, 1))
            if f"{runtime}/b{b}" in report.get("median", {})]  # fmt: skip


def _context(report):
    impls = report.get("implementations", {})
    info = next((impls[i]["interchange"] for i in ("keras-vit", "timm") if "interchange" in impls.get(i, {})), {})
    return info.get("versions", {}), info.get("threads", report["machine"].get("threads"))


def rows(report):
    """The performance table's Markdown rows of the ONNX and OpenVINO measurements (none when not measured)."""
    versions, threads = _context(report)
    out = []
    for runtime, batch, key in _keys(report):
        values = report["median"][key]
        what = "batch-1 latency, ms (lower is better)" if batch == 1 else f"batch-{batch} inference, img/s"
        version = versions.get(runtime)
        ratio = with_spread(report.get("ratios", {}).get(key, {}).get("keras-vit/timm"))
        timm = "-" if values.get("timm") is None else f"timm's torch.onnx.export {values['timm']:,.1f}: ratio {ratio}"
        keras = "-" if values.get("keras-vit") is None else f"keras-vit's export {values['keras-vit']:,.1f}"
        out.append(f"| {TITLES[runtime]}{' ' + version if version else ''}, {what}, {threads} threads | {keras} | - | "
                   f"- | {timm} |")  # fmt: skip
    return out


def table_lines(report):
    """The printed summary's lines: each measurement's medians and per-round ratio, and each file's check."""
    keys = _keys(report)
    if not keys:
        return []
    versions, threads = _context(report)
    lines = [f"ONNX / OpenVINO ({', '.join(f'{k} {v}' for k, v in versions.items())}; {threads} threads), "
             "keras-vit's export vs timm's torch.onnx.export, medians over rounds:"]  # fmt: skip
    for _, _, key in keys:
        values = report["median"][key]
        unit = "ms" if key.endswith("/b1") else "img/s"
        ratio = with_spread(report.get("ratios", {}).get(key, {}).get("keras-vit/timm"))
        lines.append(f"  {key:18s} " + "  ".join(f"{i} {v:.2f} {unit}" for i, v in values.items())
                     + f"  keras-vit/timm {ratio}")  # fmt: skip
    for impl, info in report.get("implementations", {}).items():
        if "interchange" in info and "error" not in info["interchange"]:
            parity = ", ".join(f"{r} {d:.1e}" for r, d in info["interchange"]["max_rel_diff_vs_own"].items())
            sizes = ", ".join(f"{r} {b / 1e6:.1f} MB" for r, b in info["interchange"]["bytes"].items())
            lines.append(f"  {impl}: files {sizes}; max rel diff from its own outputs: {parity}")
    return lines
