"""The GPU check: each .tflite run through LiteRT's GPU accelerator (a Vulkan driver, SwiftShader on a server) in a
child process with a timeout, its outputs held to the file's budget, and the ops it left to the CPU (docs/mobile.md)."""

import ctypes.util
import glob
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ExportError

ICD_ENV = "VK_ICD_FILENAMES"
# Debian's chromium package: SwiftShader, a Vulkan 1.x driver that runs on the CPU.
KNOWN_ICDS = ("/usr/lib/chromium/vk_swiftshader_icd.json",)
# Where the Vulkan loader looks for drivers (manifests) when VK_ICD_FILENAMES is unset.
SYSTEM_ICD_DIRS = ("/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d", "/usr/share/vulkan/icd.d")
CHECK_MODES = ("auto", "require", "off")
DEFAULT_TIMEOUT_S = 300
DEFAULT_MAX_IMAGES = 128
# Images run until this many seconds have passed (at least one): SwiftShader takes ~11 s per ViT-Ti/16 image.
DEFAULT_RUN_SECONDS = 30
NO_DRIVER = "not run: no Vulkan driver"
INSTALL = "apt-get install chromium libvulkan1 (SwiftShader, a Vulkan driver on the CPU) or a GPU's Vulkan driver"
CHILD = Path(__file__).with_name("gpu_child.py")

_ADAPTER = re.compile(r"Selected adapter: (.+)")
_UNSUPPORTED = "Following operations are not supported by GPU delegate:"
_OP_LINE = re.compile(r"^([A-Z][A-Z0-9_]*): (.*)$")
_SPLIT = re.compile(r"(\d+) operations will run on the GPU, and the remaining (\d+) operations will run on the CPU")
_NO_ADAPTER = ("No adapters found", "VK_ERROR_INCOMPATIBLE_DRIVER")


@dataclass(frozen=True)
class Driver:
    """A Vulkan driver to run on: its manifest files (empty: the loader's own search) and where it was found."""

    icd_files: tuple
    source: str


def check_mode(mode):
    if mode not in CHECK_MODES:
        raise ExportError(
            f"gpu_check must be one of {', '.join(CHECK_MODES)}. Received: {mode!r} (e.g. --gpu-check off)"
        )
    return mode


def find_driver(environ=None):
    """The Vulkan driver the GPU check runs on, or (None, why not).

    1. `VK_ICD_FILENAMES` when it is set (manifest files or folders of them, `os.pathsep`-separated): used as it
       is, and when it names no manifest that exists there is no driver (the loader would find none either).
    2. chromium's SwiftShader (`KNOWN_ICDS`).
    3. A driver installed for the system loader (a manifest in `SYSTEM_ICD_DIRS`).
    The Vulkan loader (libvulkan.so.1) must be installed too.

    Returns:
        (Driver, None) or (None, reason).
    """
    environ = os.environ if environ is None else environ
    if ctypes.util.find_library("vulkan") is None:
        return None, "no Vulkan loader (libvulkan.so.1)"
    if environ.get(ICD_ENV) is not None:
        found = []
        for entry in (e for e in environ[ICD_ENV].split(os.pathsep) if e):
            found += sorted(glob.glob(os.path.join(entry, "*.json"))) if os.path.isdir(entry) else [entry]
        found = tuple(f for f in found if os.path.isfile(f))
        if not found:
            return None, f"{ICD_ENV}={environ[ICD_ENV]!r} names no driver manifest"
        return Driver(found, ICD_ENV), None
    for icd in KNOWN_ICDS:
        if os.path.isfile(icd):
            return Driver((icd,), "chromium's SwiftShader"), None
    if any(glob.glob(os.path.join(d, "*.json")) for d in SYSTEM_ICD_DIRS):
        return Driver((), "the system's Vulkan drivers"), None
    return None, f"no {ICD_ENV}, no {KNOWN_ICDS[0]} and nothing in {', '.join(SYSTEM_ICD_DIRS)}"


def parse_log(text):
    """What the delegate said on stderr: the adapter, the ops it left to the CPU (with reasons) and the split."""
    adapter = _ADAPTER.search(text)
    cpu_ops, listing = {}, False
    for line in text.splitlines():
        line = line.strip()
        if _UNSUPPORTED in line:
            listing = True
            continue
        match = _OP_LINE.match(line) if listing else None
        if match:
            cpu_ops.setdefault(match.group(1), set()).add(match.group(2).strip())
        else:
            listing = False
    splits = [(int(g), int(c)) for g, c in _SPLIT.findall(text)]
    return {
        "adapter": adapter.group(1).strip() if adapter else None,
        "cpu_ops": {op: sorted(reasons) for op, reasons in sorted(cpu_ops.items())},
        "nodes_on_gpu": sum(g for g, _ in splits) if splits else None,
        "nodes_on_cpu": sum(c for _, c in splits) if splits else None,
    }


def _last_lines(text, n=3):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-n:]) or "(no output)"


def run_on_gpu(model_path, feed, driver, timeout_s=DEFAULT_TIMEOUT_S, run_seconds=DEFAULT_RUN_SECONDS):
    """Runs a .tflite file on LiteRT's GPU accelerator in a child process, one image at a time.

    Args:
        model_path: the .tflite file.
        feed: the model's inputs (N, H, W, 3), in its input dtype.
        driver: a `Driver` from `find_driver`.
        timeout_s: the child is killed after this long.
        run_seconds: images run in order until this many seconds have passed (at least one); `outputs` has a
            row for each image run.

    Returns:
        dict: `status` "ran" (with `outputs`, raw in the output dtype, `fully_accelerated`, `compile_s`,
        `run_s`), "not run" (no usable driver) or "failed" (crash, error or timeout), `reason`, `seconds`, and
        what the delegate logged (`parse_log`).
    """
    env = dict(os.environ)
    if driver.icd_files:
        env[ICD_ENV] = os.pathsep.join(driver.icd_files)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="keras-vit-gpu-") as tmp:
        feed_path, out_path = os.path.join(tmp, "feed.npy"), os.path.join(tmp, "out.npz")
        np.save(feed_path, np.ascontiguousarray(feed))
        command = [sys.executable, str(CHILD), os.fspath(model_path), feed_path, out_path, str(run_seconds)]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            log = (exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
            return {"status": "failed", "reason": f"timed out after {timeout_s:g} s", "seconds": timeout_s,
                    **parse_log(log)}  # fmt: skip
        seconds = time.perf_counter() - started
        result = {"seconds": seconds, **parse_log(done.stderr)}
        if done.returncode != 0 or not os.path.isfile(out_path):
            if any(marker in done.stderr for marker in _NO_ADAPTER):
                reason = f"the Vulkan loader found no usable device ({driver.source})"
                return {**result, "status": "not run", "reason": reason}
            how = f"exit status {done.returncode}" if done.returncode > 0 else f"killed by signal {-done.returncode}"
            return {**result, "status": "failed", "reason": f"{how}: {_last_lines(done.stderr)}"}
        with np.load(out_path) as out:
            return {**result, "status": "ran", "reason": None, "outputs": out["outputs"],
                    "fully_accelerated": bool(out["fully_accelerated"]), "compile_s": float(out["compile_s"]),
                    "run_s": float(out["run_s"])}  # fmt: skip


def _dequantize(y, detail):
    if detail["dtype"] == np.float32:
        return y.astype(np.float32)
    scale, zero_point = detail["quantization"]
    return (y.astype(np.float32) - zero_point) * scale


def verdict(result):
    """One line: fully accelerated, or which ops fall back to the CPU; or why it did not run."""
    if result["status"] == "not run":
        return f"{NO_DRIVER} ({result['reason']})"
    if result["status"] == "failed":
        return f"failed: {result['reason']}"
    if not result["cpu_ops"] and result["fully_accelerated"]:
        return "fully accelerated"
    ops = "; ".join(f"{op}: {', '.join(reasons)}" for op, reasons in result["cpu_ops"].items())
    split = "" if result["nodes_on_cpu"] is None else f"{result['nodes_on_cpu']} of "
    total = "" if result["nodes_on_cpu"] is None else f"{result['nodes_on_cpu'] + result['nodes_on_gpu']} "
    return f"partly accelerated: {split}{total}nodes on the CPU ({ops or 'the delegate named no op'})"


def check_artifact(path, runner, pixels, reference, truth, kind, budget, mode="auto", timeout_s=DEFAULT_TIMEOUT_S,
                   max_images=DEFAULT_MAX_IMAGES):  # fmt: skip
    """The export report's `gpu` entry for one .tflite file.

    Args:
        path: the .tflite file (staged).
        runner: its `TFLiteRunner` (the CPU run, and how an app feeds the model).
        pixels: uint8 images at the model's size; the first `max_images` are run, or as many as run in
            DEFAULT_RUN_SECONDS.
        reference: the Keras outputs for those images by name; truth: their labels or None.
        kind: the model's kind (export/kinds/), whose `figures` and `check_budget` judge the GPU's outputs.
        budget: the artifact's budget, which the GPU's outputs are held to as well.
        mode: "auto" (run where a driver exists; a miss is reported, not fatal), "require" (no driver, a failed
            run or a miss fails the export) or "off".

    Returns:
        dict with `verdict` (one line), `status`, the driver, what the delegate logged, the output figures vs
        Keras (`compare`), `max_abs_diff_vs_cpu`, `within_budget`, `seconds`, and `failures` (only in "require").
    """
    check_mode(mode)
    if mode == "off":
        return {"status": "off", "verdict": "not run: --gpu-check off", "failures": []}
    driver, why = find_driver()
    if driver is None:
        entry = {"status": "not run", "verdict": f"{NO_DRIVER} ({why}; {INSTALL})", "driver": None}
        return {**entry, "failures": [f"GPU: {entry['verdict']}"] if mode == "require" else []}
    n = min(int(max_images), len(pixels))
    feed = runner.feed_from_pixels(pixels[:n])
    result = run_on_gpu(path, feed, driver, timeout_s)
    entry = {
        "status": result["status"],
        "driver": {"source": driver.source, "icd_files": list(driver.icd_files)},
        "adapter": result.get("adapter"),
        "cpu_ops": result.get("cpu_ops") or {},
        "nodes_on_gpu": result.get("nodes_on_gpu"),
        "nodes_on_cpu": result.get("nodes_on_cpu"),
        "seconds": round(result["seconds"], 3),
        "verdict": verdict(result),
        "failures": [],
    }
    if result["status"] != "ran":
        entry["failures"] = [f"GPU: {entry['verdict']}"] if mode == "require" else []
        return entry
    figures, misses, vs_cpu = _judged(result, runner, pixels, reference, truth, kind, budget)
    failures = [f"GPU: {m}" for m in misses] if mode == "require" else []
    if entry["cpu_ops"] and mode == "require":
        failures.append(f"GPU: {entry['verdict']}")
    return {
        **entry,
        "fully_accelerated": result["fully_accelerated"],
        "compile_s": round(result["compile_s"], 3),
        "run_s": round(result["run_s"], 3),
        "figures": figures,
        "max_abs_diff_vs_cpu": vs_cpu,
        "budget": budget,
        "within_budget": not misses,
        "misses": misses,
        "failures": failures,
    }


def _judged(result, runner, pixels, reference, truth, kind, budget):
    """The GPU's outputs against Keras (figures, budget misses) and their largest difference from the CPU's."""
    name = runner.output_kind
    outputs = _dequantize(result["outputs"], runner.output_details[name])
    n = len(outputs)  # the images run in the time allowed
    figures = kind.figures(
        {name: outputs}, {k: v[:n] for k, v in reference.items()}, None if truth is None else truth[:n]
    )
    on_cpu = runner.outputs_from_pixels(pixels[:n])[name]
    return figures, kind.check_budget(figures, budget), float(np.abs(outputs - on_cpu).max())


def describe(entry):
    """The report's line for a `check_artifact` entry."""
    if entry["status"] != "ran":
        return f"  GPU (LiteRT GPU accelerator): {entry['verdict']}"
    f = entry["figures"]
    budget = "within budget" if entry["within_budget"] else f"OVER BUDGET ({'; '.join(entry['misses'])})"
    where = f"  GPU (LiteRT GPU accelerator on {(entry['adapter'] or entry['driver']['source']).split(', arch=')[0]})"
    if f["output"] == "embedding":
        return (
            f"{where}: {entry['verdict']}; {f['images']} images: min cosine vs Keras {f['min_cosine']:.6f}, {budget}; "
            f"max|d| vs LiteRT on the CPU {entry['max_abs_diff_vs_cpu']:.2e}; {entry['seconds']:.1f} s"
        )
    word = "probability" if f["output"] == "probabilities" else "logit"
    return (
        f"{where}: {entry['verdict']}; "
        f"{f['images']} images: max|d{word}| vs Keras {f[f'max_abs_{word}_diff']:.2e}, top1 agree "
        f"{100 * f['top1_agreement']:.2f}%, {budget}; vs LiteRT on the CPU {entry['max_abs_diff_vs_cpu']:.2e}; "
        f"{entry['seconds']:.1f} s"
    )
