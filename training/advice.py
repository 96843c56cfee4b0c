"""Which Keras backend trains fastest here, from the benchmark's measurements per CPU class and GPU
(training/backend_advice.json): the advice the trainer prints, and `jit_compile="auto"` on a CPU. Pure Python."""

import dataclasses
import datetime
import json
import math
import os
import platform

ADVICE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "backend_advice.json")
# The forms the trainer can run (it trains on TensorFlow or JAX) and how to select each.
TRAINER_FORMS = {
    "TensorFlow": "KERAS_BACKEND=tensorflow with --set jit_compile=False",
    "TensorFlow+XLA": "KERAS_BACKEND=tensorflow with --set jit_compile=True",
    "JAX": "KERAS_BACKEND=jax",
}
SECTIONS = {"cpu": "platforms", "gpu": "gpus"}  # device kind -> the advice file's section, keyed by device
PRECISIONS = {"float32": "float32", "mixed_bfloat16": "bfloat16"}  # trainer precision -> benchmark dtype key
# A measurement speaks for models within this factor of its FLOPs per image; beyond, the balance of op
# overhead and matmul speed that decides between the forms may differ.
SCALE_RANGE = 8.0
# Forms closer than this are a tie on a shared machine (back-to-back runs moved by several percent).
NOISE_MARGIN = 0.05


def read_cpuinfo(cpuinfo="/proc/cpuinfo"):
    """(model name or None, set of ISA flags) of the first CPU in `cpuinfo` (x86 "flags", Arm "Features");
    (None, empty set) where there is no such file (not Linux)."""
    model, flags = None, set()
    try:
        with open(cpuinfo) as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "model name" and model is None:
                    model = value.strip()
                elif name in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model, flags


def cpu_class(cpuinfo="/proc/cpuinfo"):
    """The CPU class whose kernels decide the fastest form: architecture and the widest matmul ISA.

    e.g. "x86_64 amx", "x86_64 avx512_bf16", "x86_64 avx512", "x86_64 avx2", "aarch64".
    """
    _, flags = read_cpuinfo(cpuinfo)
    machine = platform.machine() or "unknown"
    for isa, flag in (("amx", "amx_bf16"), ("avx512_bf16", "avx512_bf16"), ("avx512", "avx512f"), ("avx2", "avx2")):
        if flag in flags:
            return f"{machine} {isa}"
    return machine


def record(path, cpu, machine, spec, forward_flops, medians, when=None):
    """Merges one benchmark run's training figures into the advice file at `path` (written atomically).

    Args:
        cpu: `cpu_class()` of the measured machine.
        machine: the benchmark's machine description (model, ISA flags, threads).
        spec: the benchmark's model spec (variant, image_size, batch).
        forward_flops: FLOPs of one image's forward pass of that model.
        medians: {"float32": {form name: img/s}, "bfloat16": {...}}, keras-vit forms only.
    A run of the same variant and image size on the same CPU class replaces the older one.
    """
    entry = _entry(spec, forward_flops, medians, when)
    entry.update(cpu_model=machine.get("cpu_model"), threads=machine.get("threads"))
    return _merge(path, "cpu", cpu, entry)


def record_gpu(path, gpu, spec, forward_flops, medians, versions, when=None, rows=None):
    """Merges one GPU's training figures (`python -m benchmarks.gpu`) into the advice file at `path`.

    Args:
        gpu: the GPU's name as its driver gives it ("NVIDIA H200"): the key a run's GPU is looked up by.
        spec, forward_flops, medians, when: as for `record`.
        versions: the packages that ran ({"jax": ..., "keras": ...}).
        rows: {dtype: the label of the results row each figure comes from}, so a figure can be traced back.
    """
    entry = _entry(spec, forward_flops, medians, when)
    entry.update(versions=dict(versions), rows=dict(rows or {}))
    return _merge(path, "gpu", gpu, entry)


def _entry(spec, forward_flops, medians, when):
    """The fields every measured run has: the model, its batch and FLOPs, the day, img/s per dtype and form."""
    return {
        "model": spec.get("recipe") or spec["variant"],  # how the advice names the measured model
        "variant": spec["variant"],
        "overrides": spec.get("overrides") or {},
        "image_size": spec["image_size"],
        "num_classes": spec["num_classes"],
        "batch": spec["batch"],
        "forward_flops": forward_flops,
        "measured": when or datetime.date.today().isoformat(),
        "images_per_second": {dtype: dict(sorted(forms.items())) for dtype, forms in medians.items() if forms},
    }


def _merge(path, kind, device, entry):
    """Adds `entry` to `device`'s runs in the `kind` section of the file at `path`, replacing a run of the same
    model and image size, and rewrites the file atomically."""
    from keras_vit.files import atomic_write_text

    advice = _read(path) or {}
    runs = advice.setdefault(SECTIONS[kind], {}).setdefault(device, {"runs": []})["runs"]
    same = ("model", "variant", "overrides", "image_size")
    runs[:] = [r for r in runs if any(r.get(k) != entry[k] for k in same)]
    runs.append(entry)
    runs.sort(key=lambda r: r["forward_flops"])
    advice["about"] = (
        "Training img/s of keras-vit's forms per CPU class (`platforms`, written by `python -m benchmarks --advice`) "
        "and per GPU (`gpus`, by `python -m benchmarks.gpu_advice`); read by training/advice.py. Regenerate, do "
        "not edit."
    )
    atomic_write_text(path, json.dumps(advice, indent=1, sort_keys=True) + "\n")
    return entry


def _read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


@dataclasses.dataclass
class Advice:
    """The measurement that speaks for a run, and what it says."""

    device: str  # the CPU class, or the GPU's name, it was measured on
    precision: str
    run: dict  # the benchmark entry (variant, image size, figures, when)
    figures: dict  # {form: img/s} of the trainer's forms in that measurement
    kind: str = "cpu"  # "cpu" or "gpu"

    @property
    def fastest(self):
        """The faster of the forms measured; None when only one was (nothing to be faster than)."""
        return max(self.figures, key=self.figures.get) if len(self.figures) > 1 else None

    def xla_faster(self):
        """False when TensorFlow without XLA measured more than NOISE_MARGIN faster than with it, True otherwise;
        None unless both were measured. A near tie keeps XLA, the trainer's choice without a measurement."""
        plain, xla = self.figures.get("TensorFlow"), self.figures.get("TensorFlow+XLA")
        if plain is None or xla is None:
            return None
        return not plain > xla * (1 + NOISE_MARGIN)

    def source(self):
        r = self.run
        model = f"{_model_name(r)} at {r['image_size']} px, batch {r['batch']}, {self.precision}"
        if self.kind == "gpu":
            return f"`python -m benchmarks.gpu` on {self.device}, {r['measured']}: {model}"
        return (
            f"`python -m benchmarks` on {r.get('cpu_model') or 'a'} CPU ({self.device}, {r.get('threads')} threads, "
            f"{r['measured']}): {model}"
        )

    def line(self, current):
        """The startup line for a run in form `current` ("TensorFlow", "TensorFlow+XLA" or "JAX"): the figures,
        the trainer's forms that were not measured, and how to switch to the fastest (or the only) measured one."""
        figures = ", ".join(f"{form} {v:,.1f}" for form, v in sorted(self.figures.items(), key=lambda kv: -kv[1]))
        target = self.fastest
        if target is not None:
            text, which = f"fastest measured training form: {target} (img/s: {figures}; {self.source()})", "faster"
        else:
            (target,) = self.figures
            text, which = f"measured training speed: {figures} img/s ({self.source()})", "measured"
        missing = [form for form in TRAINER_FORMS if form not in self.figures]
        if missing:
            text += f"; {', '.join(missing)} not measured on this {'GPU' if self.kind == 'gpu' else 'CPU class'}"
        if current == target:
            return text + "; this run uses it"
        return text + f"; this run uses {current}: for the {which} one use {TRAINER_FORMS[target]}"


def _model_name(run):
    name = run.get("model") or run["variant"]
    return f"ViT-{name}" if name == run["variant"] else f"the {name} recipe's model"


def lookup(device_kind, precision, forward_flops, path=None, cpu=None, device_name=None):
    """The `Advice` for a run, or None where nothing measured speaks for it.

    Args:
        device_kind: "cpu", "gpu" or "tpu" (CPUs and GPUs are measured; a TPU gets no advice).
        precision: the trainer's precision ("float32" or "mixed_bfloat16").
        forward_flops: the run's model FLOPs per image (None for a hybrid: no advice).
        path: the advice file (default: `ADVICE_FILE`, the one the repository's benchmark runs wrote).
        cpu: the CPU class (default: this machine's `cpu_class()`).
        device_name: the GPU's name ("NVIDIA H200"), which selects a GPU's measurement (None: no GPU advice).
    """
    if device_kind not in SECTIONS or forward_flops is None or precision not in PRECISIONS:
        return None
    device = (cpu or cpu_class()) if device_kind == "cpu" else device_name
    sections = (_read(path or ADVICE_FILE) or {}).get(SECTIONS[device_kind], {})
    runs = (sections.get(device) or {}).get("runs", []) if device else []
    dtype = PRECISIONS[precision]
    runs = [r for r in runs if any(f in TRAINER_FORMS for f in r["images_per_second"].get(dtype, {}))]
    if not runs:
        return None
    nearest = min(runs, key=lambda r: abs(math.log(r["forward_flops"] / forward_flops)))
    if abs(math.log(nearest["forward_flops"] / forward_flops)) > math.log(SCALE_RANGE):
        return None
    figures = {f: v for f, v in nearest["images_per_second"][dtype].items() if f in TRAINER_FORMS}
    return Advice(device=device, precision=precision, run=nearest, figures=figures, kind=device_kind)
