"""What the runners and export steps of every format share: checking a model-space batch, timing a batch-1 call,
capturing what the converters print, the sizes of what was written, one artifact's report entry (`record`)."""

import contextlib
import time
from pathlib import Path

import numpy as np

from keras_vit import _startup, files
from keras_vit.preprocessing import check_model_range

from .errors import ExportError


def check_batch(x, image_size, what):
    """`x` as a model-space batch (float32 (N, H, W, 3) in [-1, 1] at `image_size`), or a one-line error."""
    x = np.asarray(x)
    expected = (*image_size, 3)
    if x.ndim != 4 or tuple(x.shape[1:]) != expected:
        raise ExportError(
            f"{what} expects model-space images shaped (N, {expected[0]}, {expected[1]}, 3). Received shape "
            f"{x.shape}. Resize raw uint8 images with export.to_model_space first."
        )
    if x.dtype != np.float32:
        raise ExportError(f"{what} expects float32 images in [-1, 1]. Received dtype {x.dtype}.")
    check_model_range(x, what, stacklevel=3)  # 0..255 floats would run and give confident nonsense: say so
    return x


def median_ms(call, runs, warmup):
    """The median of `runs` timed calls of `call()` after `warmup` untimed ones, in milliseconds."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def named_call(model, names):
    """A function of model-space images returning {name: output} for `model`'s outputs in order: the one form in
    which every runner, file and comparison holds a model's outputs."""

    def call(images):
        outputs = model(images, training=False)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        return dict(zip(names, outputs))

    return call


def batches(x, step):
    """`x` in consecutive slices of at most `step`."""
    return [x[i : i + step] for i in range(0, len(x), step)]


def gather(results):
    """[{name: array}] -> {name: the arrays concatenated}."""
    return {name: np.concatenate([np.asarray(r[name]) for r in results]) for name in results[0]}


def printed(converter_output):
    """Captures what the converters print from C++ (yields a one-item list that holds it once the block ends)
    when `converter_output` is "report"; lets it through to the terminal ("terminal")."""
    return _startup.captured_native_output() if converter_output == "report" else contextlib.nullcontext([""])


def dir_bytes(path):
    """The bytes of every file under `path` (a SavedModel directory)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def image_size(model):
    """(height, width) of a model's input."""
    return tuple(int(d) for d in model.input_shape[1:3])


def record(plan, v, options, name, fmt, mode, out, size, found, runner, budget, failures, **fields):
    """The entry of the file `name` in `fmt` (`mode` for TFLite) written for `plan` and judged on `v` (the
    verification), `found` the kind's figures, `fields` what the format adds."""
    return {
        "name": name,
        "format": fmt,
        "kind": plan.kind.NAME,
        "quantization": mode,
        "path": files.join(out, name),  # where it is once committed
        "file_bytes": int(size),
        **plan.kind.entry_figures(found, plan),
        "latency_ms": runner.latency_ms(v.x[:1], options.latency_runs, options.latency_warmup),
        "threads": runner.threads,
        **fields,
        "budget": budget,
        "failures": list(failures),
        "passed": not failures,
    }
