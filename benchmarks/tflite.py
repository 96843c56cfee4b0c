"""TFLite conversion (float32, dynamic-range int8, full int8, int8 matmuls), op inventory and batch-1 latency.

The conversion is the exporter's own (`export.tflite.converter.frozen_function`, then
`export.tflite.converter.convert_frozen`,
what `python -m export` runs for every .tflite it writes), so the benchmark times the conversion that ships:
"full_int8" is the exporter's "int8" (int8 builtins only, float32 input and output) and "int8_matmul" its
recipe of the same name. The files have logits out and no metadata (`python -m export` adds a softmax and
the metadata by default), so their outputs compare with the Keras model's directly.
"""

import collections
import statistics
import time

import numpy as np

from export.tflite import converter as export_tflite

MODES = ("float32", "dynamic_int8", "full_int8", "int8_matmul")
# The exporter's name for each mode (export/tflite/converter.py QUANTIZATION_MODES).
EXPORT_MODES = {"float32": "float32", "dynamic_int8": "dynamic_int8", "full_int8": "int8", "int8_matmul": "int8_matmul"}
# Ops that only move data between int8 and float: their presence is the cost of a float island, not one.
_BOUNDARY_OPS = {"QUANTIZE", "DEQUANTIZE"}


def convert(model, input_shape, mode, calibration=None, int8_ops=None):
    """Converts a Keras model to a TFLite flatbuffer (bytes) with a fixed batch-1 float32 input.

    Args:
        model: a Keras model (TF backend) with a static input shape.
        input_shape: (H, W, C), which must be the model's.
        mode: "float32"; "dynamic_int8" (int8 weights, activations quantised on the fly);
            "full_int8" (the exporter's "int8": int8 weights and activations, calibrated on `calibration`,
            int8 builtins only, float32 in/out so the interface matches the float model);
            "int8_matmul" (only export.tflite.converter.INT8_MATMUL_OPS are quantised: every FULLY_CONNECTED/CONV_2D
            runs
            int8 x int8 with calibrated activation scales, the rest in float).
        calibration: float32 array (N, H, W, C) of representative inputs, needed for the int8 modes.
        int8_ops: for "int8_matmul", the op types to quantise instead of export.tflite.converter.INT8_MATMUL_OPS.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}. Received: mode={mode!r}")
    if tuple(model.input_shape[1:]) != tuple(input_shape):
        raise ValueError(f"input_shape {tuple(input_shape)} is not the model's {tuple(model.input_shape[1:])}.")
    quantize = EXPORT_MODES[mode]
    if quantize in export_tflite.CALIBRATED_MODES and (calibration is None or len(calibration) == 0):
        raise ValueError(f"{mode} conversion needs calibration images (N, H, W, C); received none.")
    calibration = np.asarray(calibration, np.float32) if quantize in export_tflite.CALIBRATED_MODES else None
    function = export_tflite.frozen_function(model, output="logits")
    return export_tflite.convert_frozen(function, model, quantize, calibration,
                                        int8_ops=int8_ops or export_tflite.INT8_MATMUL_OPS)  # fmt: skip


def _interpreter(flatbuffer, threads, delegates=True):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    # The default resolver applies XNNPACK, as an app would; without it the op list is the model's own.
    resolver = OpResolverType.AUTO if delegates else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interpreter = Interpreter(model_content=flatbuffer, num_threads=threads, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    return interpreter


def op_inventory(flatbuffer):
    """Counts the ops of a flatbuffer and lists those that compute in float.

    An op computes in float when its first input is a float tensor; QUANTIZE/DEQUANTIZE only mark the
    borders of such float islands and are counted separately.

    Returns:
        {"ops": {op: count}, "float_ops": {op: count}, "boundary_ops": count}
    """
    interpreter = _interpreter(flatbuffer, 1, delegates=False)
    dtypes = {t["index"]: np.dtype(t["dtype"]).name for t in interpreter.get_tensor_details()}
    ops, float_ops, boundary = collections.Counter(), collections.Counter(), 0
    for op in interpreter._get_ops_details():  # the public API has no per-op view
        name = op["op_name"]
        ops[name] += 1
        if name in _BOUNDARY_OPS:
            boundary += 1
            continue
        inputs = [i for i in op["inputs"] if i >= 0]
        if inputs and dtypes.get(inputs[0], "").startswith("float"):
            float_ops[name] += 1
    return {"ops": dict(sorted(ops.items())), "float_ops": dict(sorted(float_ops.items())), "boundary_ops": boundary}


def run(flatbuffer, images, threads=1):
    """Runs a batch-1 flatbuffer over `images` (N, H, W, C) one by one; returns (N, K) outputs."""
    interpreter = _interpreter(flatbuffer, threads)
    inp = interpreter.get_input_details()[0]
    out = interpreter.get_output_details()[0]
    results = []
    for image in images:
        interpreter.set_tensor(inp["index"], np.asarray(image[None], inp["dtype"]))
        interpreter.invoke()
        results.append(interpreter.get_tensor(out["index"])[0].copy())
    return np.stack(results)


class Latency:
    """Batch-1 latency of one flatbuffer, with the interpreter kept between measurements."""

    def __init__(self, flatbuffer, threads):
        self.threads = threads
        self.interpreter = _interpreter(flatbuffer, threads)
        detail = self.interpreter.get_input_details()[0]
        self.index = detail["index"]
        rng = np.random.default_rng(0)
        self.image = rng.uniform(-1, 1, detail["shape"]).astype(detail["dtype"])

    def measure(self, reps, warmup):
        """Median milliseconds of `reps` invocations after `warmup` untimed ones."""
        self.interpreter.set_tensor(self.index, self.image)
        times = []
        for i in range(warmup + reps):
            start = time.perf_counter()
            self.interpreter.invoke()
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)


def matmul_peak(threads, size=1024, chain=4, reps=5, state=None):
    """LiteRT's own float32 matmul rate: a chain of `chain` (size x size) @ (size x size) FULLY_CONNECTED ops.

    The bound for a LiteRT model is the rate of LiteRT's kernels (XNNPACK's GEMM), as TensorFlow's MatMul bounds a
    TensorFlow model; the best of `reps` medians, as `benchmarks.peak.matmul_peak` takes its best run.
    `state` (a dict) keeps the converted chain and its interpreter, so later rounds skip the conversion.
    """
    state = {} if state is None else state
    key = (threads, size, chain)
    if key not in state:
        import keras

        inputs = keras.Input((size, size), batch_size=1)
        x = inputs
        for _ in range(chain):
            x = keras.layers.Dense(size, use_bias=False)(x)
        flatbuffer = convert(keras.Model(inputs, x), (size, size), "float32")
        state[key] = (flatbuffer, Latency(flatbuffer, threads))
    flatbuffer, latency = state[key]
    latency.measure(2, 2)
    best_ms = min(latency.measure(3, 0) for _ in range(reps))
    return {"gflops": 2 * size**3 * chain / (best_ms / 1e3) / 1e9, "size": size, "threads": threads,
            "ops": op_inventory(flatbuffer)["ops"]}  # fmt: skip
