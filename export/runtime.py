"""What the runners and the export steps of every kind and format share: checking a model-space batch, timing a
batch-1 call, feeding a LiteRT interpreter, capturing what the converters print, and the sizes of what was written.

It imports nothing of export/ but its errors, so every runner and every export step can stand on it.
"""

import contextlib
import time
from pathlib import Path

import numpy as np

from keras_vit import _startup
from keras_vit.preprocessing import check_model_range

from .errors import ExportError


def check_batch(x, image_size, what):
    """`x` as a model-space batch (float32 (N, H, W, 3) in [-1, 1] at `image_size`), or a one-line error."""
    x = np.asarray(x)
    expected = (*image_size, 3)
    if x.ndim != 4 or tuple(x.shape[1:]) != expected:
        raise ExportError(
            f"{what} expects model-space images shaped (N, {expected[0]}, {expected[1]}, 3). Received shape "
            f"{x.shape}. Resize raw uint8 images with export.preprocessing.to_model_space first."
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


def invoke(runner, x):
    """Feeds `x` to `runner.interpreter` (a TFLite runner with `input`, `dynamic_batch` and `batch`), resizing an
    open batch dimension when the batch size changed, and invokes it; the caller reads the outputs it needs."""
    if runner.dynamic_batch and x.shape[0] != runner.batch:
        runner.interpreter.resize_tensor_input(runner.input["index"], x.shape)
        runner.interpreter.allocate_tensors()
        runner.batch = x.shape[0]
    runner.interpreter.set_tensor(runner.input["index"], x)
    runner.interpreter.invoke()


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
