"""Runs the workers in phases of interleaved rounds and collects their per-round measurements.

benchmarks/summary.py turns those into medians, per-round ratios with their spread, and the targets.
"""

import json
import os
import platform
import subprocess
import sys
import time

from benchmarks import provenance
from benchmarks.keras_impl import model_config
from benchmarks.summary import judge, spread, summarise
from benchmarks.worker import PREFIX
from keras_vit.models import flops
from training.advice import read_cpuinfo

KERAS_IMPLS = ("keras-vit", "keras-hub")  # the TensorFlow-backend workers: TFLite conversion, XLA on and off
BACKENDS = {"keras-vit": "tensorflow", "keras-vit-jax": "jax", "keras-vit-torch": "torch", "keras-hub": "tensorflow"}


class WorkerError(RuntimeError):
    pass


class Worker:
    """A long-lived worker subprocess for one implementation."""

    def __init__(self, impl, spec, threads, log_path):
        self.impl = impl
        self.log = open(log_path, "w")  # noqa: SIM115  (the worker's stderr for its whole life; closed in close())
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        if impl in BACKENDS:
            env["KERAS_BACKEND"] = BACKENDS[impl]  # read once by Keras, at import: it must be set before
        if impl in ("timm", "keras-vit-torch"):
            # PyTorch's OpenMP threads spin at barriers; on a machine shared with other processes that makes
            # timm up to 10x slower. PASSIVE is what a fair comparison on a shared machine needs.
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.worker", "--impl", impl, "--spec", json.dumps(spec),
             "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=root, env=env,
        )  # fmt: skip
        self.hello = None

    def ready(self):
        """Waits for the worker's hello (its imports and set-up done); returns it."""
        if self.hello is None:
            self.hello = self._read()
        return self.hello

    def _read(self):
        for line in self.process.stdout:
            if line.startswith(PREFIX):
                return json.loads(line[len(PREFIX) :])
        raise WorkerError(f"worker {self.impl} exited (code {self.process.wait()}); see {self.log.name}")

    def request(self, task, **args):
        self.process.stdin.write(json.dumps({"task": task, "args": args}) + "\n")
        self.process.stdin.flush()
        reply = self._read()
        if not reply["ok"]:
            raise WorkerError(f"{self.impl} {task}{args}: {reply['error']}")
        return reply

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"task": "exit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
        self.log.close()


def _setting_impls(xla, options):
    """The workers measured in the XLA (True) or plain (False) setting of a training or inference task."""
    if xla:
        return (KERAS_IMPLS if options.xla else ()) + ("keras-vit-jax",)
    return ("keras-vit", "keras-vit-torch", "keras-hub", "timm")


def task_list(options):
    """(key, impls, task, args, unit) for every measurement of a round, in the order they run."""
    b = options.batch
    tasks = []
    train = dict(steps=options.train_steps, warmup=options.warmup)
    for dtype in ("float32", "bfloat16") if options.bf16 else ("float32",):
        for xla in (False, True):
            impls = _setting_impls(xla, options)
            key = f"train/{dtype}" + ("+xla" if xla else "")
            tasks.append((key, impls, "train", dict(dtype=dtype, xla=xla, **train), "img/s"))
    for batch, reps, name in ((b, options.infer_reps, f"infer/b{b}"), (1, options.latency_reps, "latency/b1")):
        for xla in (False, True):
            impls = _setting_impls(xla, options)
            unit = "img/s" if batch > 1 else "ms"
            args = dict(batch=batch, xla=xla, reps=reps, warmup=options.warmup)
            tasks.append((name + ("+xla" if xla else ""), impls, "infer", args, unit))
    tasks += interchange_tasks(options)
    if options.tflite:
        for mode in ("float32", "dynamic_int8", "full_int8", "int8_matmul"):
            args = dict(mode=mode, reps=options.tflite_reps, warmup=max(options.warmup, 3))
            tasks.append((f"tflite/{mode}", KERAS_IMPLS, "tflite_latency", args, "ms"))
        # LiteRT's own matmul rate, the bound of the TFLite models (as TensorFlow's bounds the Keras ones).
        args = dict(threads=options.threads)
        tasks.append(("peak/litert_float32", ("keras-vit",), "tflite_peak", args, "GFLOP/s"))
    if options.pipeline_batches:
        args = dict(folder=None, batch=options.batch, batches=options.pipeline_batches, threads=options.threads)
        tasks.append(("pipeline/imagenet", ("keras-vit", "timm"), "pipeline", args, "img/s/core"))
        # The same stream as `--set device_input=true` feeds it: uint8 images and Mixup's weights.
        uint8 = dict(args, device_input=True)
        tasks.append(("pipeline/imagenet_uint8", ("keras-vit",), "pipeline", uint8, "img/s/core"))
    if options.input_wait_steps:
        args = dict(folder=None, steps=options.input_wait_steps, threads=options.threads)
        tasks.append(("input_wait/train", ("keras-vit",), "input_wait", args, "fraction"))
    for dtype in ("float32", "bfloat16") if options.bf16 else ("float32",):
        tasks.append((f"peak/{dtype}", ("keras-vit",), "peak", dict(dtype=dtype), "GFLOP/s"))
    if options.bf16 and options.step_split:
        tasks.append(("step_split/bfloat16", ("keras-vit",), "step_split", dict(reps=3), "x"))
    return tasks


INTERCHANGE_IMPLS = ("keras-vit", "timm")


def interchange_tasks(options):
    """The inference phase's ONNX and OpenVINO rows (benchmarks/interchange.py): keras-vit's exported files and
    timm's torch.onnx.export under each runtime, batch 1 (ms) and the throughput batch (img/s), `--threads`."""
    from benchmarks.interchange import RUNTIMES

    if not getattr(options, "interchange", True):
        return []
    tasks = []
    for runtime in RUNTIMES:
        for batch in dict.fromkeys((options.batch, 1)):
            reps = options.latency_reps if batch == 1 else options.infer_reps
            args = dict(runtime=runtime, batch=batch, reps=reps, warmup=options.warmup,
                        out_dir=os.path.abspath(options.out), threads=options.threads)  # fmt: skip
            tasks.append((f"{runtime}/b{batch}", INTERCHANGE_IMPLS, "interchange", args,
                          "ms" if batch == 1 else "img/s"))  # fmt: skip
    return tasks


def _value(key, result):
    if key.startswith(("onnxruntime/", "openvino/")):
        return result["latency_ms"] if key.endswith("/b1") else result["images_per_second"]
    if key.startswith("peak/"):
        return result["gflops"]
    if key.startswith("pipeline/"):
        return result["images_per_second_per_core"]
    if key.startswith("input_wait/"):
        return result["wait_fraction"]
    if key.startswith("step_split/"):
        return result["bf16_speedup"]
    if key.startswith(("latency/", "tflite/")):
        return result["latency_ms"]
    return result["images_per_second"]


def run(options, progress=print):
    """Runs the benchmark; returns the JSON-ready report dict."""
    wall_start = time.time()
    report = _new_report(options)
    tasks = task_list(options)
    if any(task in ("pipeline", "input_wait") for _, _, task, _, _ in tasks):
        from benchmarks import pipeline

        folder = os.path.join(os.path.abspath(options.out), "jpeg_folder")
        progress(f"[setup] writing {options.pipeline_images} synthetic JPEGs to {folder}")
        report["pipeline_folder"] = pipeline.make_jpeg_folder(folder, options.pipeline_images)
        tasks = [(k, i, t, dict(a, folder=folder) if "folder" in a else a, u) for k, i, t, a, u in tasks]
    unavailable = set()
    for phase in PHASES:
        phase_tasks = [t for t in tasks if phase_of(t[2], t[3]) == phase]
        impls = [i for i in options.impls if i not in unavailable and any(i in t[1] for t in phase_tasks)]
        if impls:
            _run_phase(phase, phase_tasks, impls, options, report, unavailable, progress)
    report["units"] = {key: unit for key, _, _, _, unit in task_list(options)}
    summarise(report)
    report["wall_seconds"] = time.time() - wall_start
    # The 15-minute bound is the default run's; the optional memory phase after it is timed on its own.
    report["targets"]["6_wall_minutes"] = judge("<=", 15, spread([report["wall_seconds"] / 60]))
    report["machine"]["loadavg_end"] = os.getloadavg()
    if getattr(options, "memory", False):
        report["memory"] = run_memory(options, progress)
    return report


def _new_report(options):
    """The report before any phase: settings, the model's spec and FLOPs, the machine, empty rounds."""
    overrides = getattr(options, "model_overrides", None) or {}
    spec = {
        "variant": options.variant, "image_size": options.image_size, "batch": options.batch,
        "num_classes": options.num_classes, "overrides": overrides, "recipe": getattr(options, "recipe", None),
        "timm_architecture": getattr(options, "timm_arch", None),
    }  # fmt: skip
    config = model_config(spec)
    spec["config"] = {k: config.to_dict()[k] for k in ("patch_size", "hidden_size", "num_layers", "num_heads",
                                                       "mlp_dim")}  # fmt: skip
    if config.resnet_layers is not None:
        raise ValueError(f"The benchmark covers plain ViTs; {options.variant!r} is a hybrid. Use e.g. 'Ti/16'.")
    forward = flops.config_forward_flops(config)
    os.makedirs(options.out, exist_ok=True)
    return {
        "settings": dict(vars(options)),
        "spec": spec,
        "flops": {"forward_per_image": forward, "train_per_image": flops.training_flops(forward)},
        "machine": {**describe_machine(), "threads": options.threads, "loadavg_start": os.getloadavg()},
        "implementations": {},
        "rounds": [{} for _ in range(options.rounds)],
        "phase_seconds": {},
        "commits": {},  # phase -> the commit its workers imported (benchmarks/provenance.py)
    }


def _run_phase(phase, phase_tasks, impls, options, report, unavailable, progress):
    """One phase: fresh workers, its rounds, what it collects after them; the workers closed whatever happens."""
    commit = report["commits"][phase] = provenance.source_commit()
    progress(f"[{phase}] starting workers: {', '.join(impls)} (commit {provenance.label(commit)})")
    phase_start = time.time()
    workers = _start_workers(impls, report["spec"], options, report, unavailable, progress, phase)
    # Where the run's time goes, for trimming it: the first round also builds, compiles and converts.
    timing = report["phase_seconds"][phase] = {"workers": time.time() - phase_start, "rounds": []}
    try:
        for r in range(options.rounds):
            progress(f"[{phase}, round {r + 1}/{options.rounds}]")
            round_start = time.time()
            _run_round(r, phase_tasks, workers, options, report, progress)
            timing["rounds"].append(time.time() - round_start)
        if phase == "infer":
            for impl, worker in workers.items():
                report["implementations"][impl].update(worker.request("sizes")["result"])
            _interchange_info(workers, phase_tasks, report)
        if phase == "tflite" and options.digits_workdir and "keras-vit" in workers:
            progress(f"[digits] int8 accuracy of the trained model in {options.digits_workdir}")
            try:
                report["digits_int8"] = workers["keras-vit"].request(
                    "digits_int8", workdir=os.path.abspath(options.digits_workdir), threads=options.threads
                )["result"]
            except WorkerError as error:
                report["digits_int8"] = {"error": str(error)}
    finally:
        for worker in workers.values():
            worker.close()
        timing["total"] = time.time() - phase_start


def run_memory(options, progress=print):
    """The memory phase: benchmarks.memory's settings (a fresh process each) at every `options.memory_sizes`,
    and the recipes' figures the fit table needs (benchmarks/fit.py). Needs TensorFlow only."""
    from benchmarks import fit, memory

    start = time.time()
    machine = {**describe_machine(), "loadavg_start": os.getloadavg()}
    commit = provenance.source_commit()
    progress(f"[memory] commit {provenance.label(commit)}")
    settings = []
    for size in options.memory_sizes:
        progress(f"[memory] {options.memory_variant} at {size} px, batch {options.memory_batch}: "
                 f"{len(memory.SETTINGS)} settings, one process each")  # fmt: skip

        def report_one(record):
            name = f"remat={record['remat']}, accum_steps={record['accum_steps']}"
            if "error" in record:
                progress(f"  {name}: FAILED {record['error'][-200:]}")
            else:
                progress(f"  {name}: step {record['step_mib']} MiB, {record['per_image_mib']} MiB per image "
                         f"(micro-batch {record['micro_batch']})")  # fmt: skip

        settings += memory.run_settings(options.memory_variant, size, options.memory_batch, progress=report_one)
    progress("[memory] counting the recipes' parameters: " + ", ".join(fit.RECIPES))
    recipes = [fit.recipe_spec(name) for name in fit.RECIPES]
    machine["loadavg_end"] = os.getloadavg()
    backends = {r["backend"] for r in settings if "backend" in r}
    return {"variant": options.memory_variant, "batch": options.memory_batch, "image_sizes": list(options.memory_sizes),
            "backend": ", ".join(sorted(backends)) or "tensorflow", "settings": settings, "recipes": recipes,
            "machine": machine, "seconds": time.time() - start, "commit": commit}  # fmt: skip


# Each phase starts its own workers and closes them when its rounds are done, so the machine holds only one
# phase's models at a time. All of them at once (4 training models, inference functions and 4 TFLite conversions
# per TensorFlow worker) took 23.5 GB of a 24 GB machine, and one phase for all training settings 21.2 GB; one
# phase per training dtype holds two models per worker. Rounds interleave the implementations within a phase,
# which is what the per-round ratios compare. input_wait has a phase, and a worker, of its own.
PHASES = ("train/float32", "train/bfloat16", "infer", "tflite", "pipeline", "input_wait", "step_split")


def phase_of(task, args):
    if task == "train":
        return f"train/{args['dtype']}"
    return {"tflite_latency": "tflite", "tflite_peak": "tflite", "peak": "pipeline", "interchange": "infer"}.get(
        task, task
    )


def _interchange_info(workers, phase_tasks, report):
    """Each ONNX/OpenVINO worker's files, versions, threads and parity, under its implementation's "interchange"."""
    impls = {i for _, task_impls, task, _, _ in phase_tasks if task == "interchange" for i in task_impls}
    for impl in sorted(impls & set(workers)):
        try:
            info = workers[impl].request("interchange_info")["result"]
        except WorkerError as error:
            info = {"error": str(error)}
        if info:
            report["implementations"][impl]["interchange"] = info


def _start_workers(impls, spec, options, report, unavailable, progress, phase):
    # All of a phase's workers start at once: their imports (TensorFlow, JAX, torch: seconds each, mostly one core)
    # overlap instead of queueing. Nothing is timed before every worker has said hello and sits idle.
    started = {}
    for impl in impls:
        log = os.path.join(options.out, f"worker_{impl.replace('-', '_')}_{phase.replace('/', '_')}.log")
        started[impl] = Worker(impl, spec, options.threads, log)
    workers = {}
    for impl, worker in started.items():
        try:
            worker.ready()
        except WorkerError as error:
            worker.close()
            report["implementations"].setdefault(impl, {"available": False, "reason": str(error)})
            unavailable.add(impl)
            continue
        if not worker.hello["ok"]:
            reason = worker.hello["error"]
            progress(f"[setup] {impl} unavailable: {reason}")
            report["implementations"][impl] = {"available": False, "reason": reason}
            unavailable.add(impl)
            worker.close()
            continue
        info = report["implementations"].setdefault(impl, {"available": True})
        info["versions"] = worker.hello["versions"]
        info.setdefault("ready_seconds", worker.hello["ready_seconds"])
        workers[impl] = worker
    return workers


def _run_round(r, tasks, workers, options, report, progress):
    """One round of a phase's tasks on its live workers; values go into report["rounds"][r]."""
    values = report["rounds"][r]
    for key, impls, task, args, unit in tasks:
        for impl in impls:
            if impl not in workers:
                continue
            info = report["implementations"][impl]
            if task == "tflite_latency" and "tflite" not in info:
                progress(f"  {impl}: converting to TFLite (float32, dynamic int8, full int8, int8 matmuls)")
                try:
                    reply = workers[impl].request(
                        "tflite_setup", out_dir=os.path.abspath(options.out), threads=options.threads,
                        calibration_size=options.calibration_size, agreement_size=options.agreement_size,
                    )  # fmt: skip
                    info["tflite"] = reply["result"]
                except WorkerError as error:
                    progress(f"  {impl}: TFLite conversion FAILED: {error}")
                    info["tflite"], info["tflite_error"] = {}, str(error)
            if task == "tflite_latency" and not info["tflite"]:
                continue
            try:
                reply = workers[impl].request(task, **args)
            except (WorkerError, OSError) as error:
                progress(f"  {key:24s} {impl:10s} FAILED: {error}")
                report.setdefault("errors", []).append({"round": r, "key": key, "impl": impl, "error": str(error)})
                if workers[impl].process.poll() is not None:
                    # A dead worker (killed for memory, say) ends its own measurements in this phase, not the
                    # run: the others go on, the next phase starts a fresh one, and the report says so.
                    dead = workers.pop(impl)
                    dead.close()
                    code = dead.process.returncode
                    progress(f"  {impl} worker exited (code {code}); the phase goes on without it")
                    info["died"] = f"round {r + 1}, {key}: exit code {code}"
                continue
            if task == "step_split":
                report.setdefault("step_split", []).append(reply["result"])
            value = _value(key, reply["result"])
            values.setdefault(key, {})[impl] = value
            if key.startswith("train/float32"):  # the phase's first request: that setting's peak
                info.setdefault("peak_rss_mb_train_float32", reply["max_rss_mb"])
            info["peak_rss_mb_all_settings"] = max(info.get("peak_rss_mb_all_settings", 0), reply["max_rss_mb"])
            progress(f"  {key:24s} {impl:10s} {value:9.2f} {unit}")


ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
             "amx_bf16", "amx_int8")  # fmt: skip


def describe_machine(cpuinfo="/proc/cpuinfo"):
    """CPU model, the ISA extensions that decide the kernels (AVX-512, VNNI, BF16, AMX) and the usable cores."""
    model, flags = read_cpuinfo(cpuinfo)  # not Linux: the report says "unknown" rather than guessing

    return {
        "cpu_model": model or platform.processor() or "unknown",
        "isa_flags": [f for f in ISA_FLAGS if f in flags],
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
