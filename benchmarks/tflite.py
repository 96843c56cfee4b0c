"""TFLite conversion (float32, dynamic-range int8, full int8, int8 matmuls), op inventory and batch-1 latency.

The conversion here takes any Keras model (keras-hub's too) through a SavedModel; the op types that
"int8_matmul" quantises are export/'s (`python -m export --quantize int8_matmul`), so the benchmark times
the recipe the exporter ships.
"""

import collections
import statistics
import tempfile
import time

import numpy as np

from export.tflite import INT8_MATMUL_OPS, quantize_matmuls_only

MODES = ("float32", "dynamic_int8", "full_int8", "int8_matmul")
# Ops that only move data between int8 and float: their presence is the cost of a float island, not one.
_BOUNDARY_OPS = {"QUANTIZE", "DEQUANTIZE"}


def convert(model, input_shape, mode, calibration=None, int8_ops=None):
    """Converts a Keras model to a TFLite flatbuffer (bytes) with a fixed batch-1 float32 input.

    Args:
        model: a Keras model (TF backend).
        input_shape: (H, W, C).
        mode: "float32"; "dynamic_int8" (int8 weights, activations quantised on the fly);
            "full_int8" (int8 weights and activations, calibrated on `calibration`; float32 in/out so the
            interface matches the float model, and ops without an int8 kernel fall back to float);
            "int8_matmul" (as full_int8, but only export.tflite.INT8_MATMUL_OPS are quantised: every
            FULLY_CONNECTED/CONV_2D runs int8 x int8 with calibrated activation scales, the rest in float).
        calibration: float32 array (N, H, W, C) of representative inputs, needed for the int8 modes.
        int8_ops: for "int8_matmul", the op types to quantise instead of export.tflite.INT8_MATMUL_OPS.
    """
    import keras
    import tensorflow as tf

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}. Received: mode={mode!r}")
    spec = tf.TensorSpec((1, *input_shape), tf.float32, name="images")
    # Through a SavedModel written by Keras' ExportArchive, which tracks the Keras 3 variables so that the
    # converter can freeze them (a plain tf.Module keeps them as VAR_HANDLE/READ_VARIABLE ops that fail).
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", lambda images: model(images, training=False), input_signature=[spec])
    with tempfile.TemporaryDirectory() as directory:
        archive.write_out(directory, verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(directory)
        if mode == "float32":
            return converter.convert()
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if mode == "dynamic_int8":
            return converter.convert()
        if calibration is None or len(calibration) == 0:
            raise ValueError(f"{mode} conversion needs calibration images (N, H, W, C); received none.")

        def representative():
            for image in calibration:
                yield [np.asarray(image[None], np.float32)]

        converter.representative_dataset = representative
        if mode == "full_int8":
            return converter.convert()
        float_flatbuffer = tf.lite.TFLiteConverter.from_saved_model(directory).convert()
        return quantize_matmuls_only(converter, float_flatbuffer, representative, int8_ops or INT8_MATMUL_OPS)


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
