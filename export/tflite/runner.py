"""`TFLiteRunner`: a .tflite file run with LiteRT's interpreter, its outputs by name (the runner interface of
export/keras_runner.py), quantized input and output handled here."""

import json
import os

import numpy as np

from keras_vit import _startup, files
from keras_vit.preprocessing import PIXEL_CENTER, PIXEL_SCALE

from ..description import INPUT, SIGNATURE, resize_pixels
from ..errors import ExportError
from ..runtime import batches, check_batch, gather, median_ms
from .metadata_reader import read_metadata


class TFLiteRunner:
    """Runs a .tflite flatbuffer with LiteRT's interpreter; quantized I/O is (de)quantized here.

    A file of one output names it by what it holds (`output_kind`): from the `.json` sidecar beside a file, else
    the model's embedded metadata (what MediaPipe reads), else "logits". A file of several (feature maps), or any
    file with `by_signature=True`, names them by its signature `serving_default`: TFLite orders a subgraph's
    outputs by its own rule, so they are read through the signature's name -> tensor map, never by position.
    Labels and the input normalisation come from the sidecar or the metadata, else the project's defaults.
    """

    kind = "tflite"

    def __init__(self, flatbuffer=None, path=None, num_threads=1, labels=None, by_signature=False):
        output_kind = None
        if flatbuffer is None:
            path = os.fspath(path)
            if not files.isfile(path):
                raise ExportError(f"No .tflite file at {str(path)!r}.")
            flatbuffer = files.read_bytes(path)  # LiteRT reads a local file or bytes: bytes work for URLs too
            sidecar = os.path.splitext(path)[0] + ".json"
            if files.isfile(sidecar):
                info = json.loads(files.read_text(sidecar))
                by_signature = by_signature or info.get("kind") == "feature_maps"
                labels = info.get("labels") if labels is None else labels
                output_kind = (info.get("output") or {}).get("meaning")
        where = f" {str(path)!r}" if path else ""
        self.interpreter = _interpreter(flatbuffer, num_threads, where)
        self.flatbuffer = bytes(flatbuffer)
        self.threads = int(num_threads)
        try:
            self.metadata = read_metadata(self.flatbuffer)
        except ExportError as exc:
            raise ExportError(f"The TFLite model{where} has unreadable metadata: {exc}") from exc
        meta = self.metadata or {"input": {}, "output": {}}
        self.labels = labels if labels is not None else meta.get("labels")
        mean, std = meta["input"].get("mean"), meta["input"].get("std")
        # One mean/std for all channels (what this exporter writes); per-channel values are not used here.
        self.normalization = (float(mean[0]), float(std[0])) if mean and std else (PIXEL_CENTER, PIXEL_SCALE)
        inputs, outputs = self.interpreter.get_input_details(), self.interpreter.get_output_details()
        if len(inputs) != 1:
            raise ExportError(f"Expected one input tensor{where}; found {len(inputs)}.")
        self.input = inputs[0]
        if by_signature or len(outputs) > 1:
            self.output_details = _signature_outputs(self.interpreter, where)
        else:
            self.output_details = {output_kind or meta["output"].get("kind") or "logits": outputs[0]}
        self.names = list(self.output_details)
        self.output_kind = self.names[0]
        self.image_size = tuple(int(d) for d in self.input["shape"][1:3])
        self.dynamic_batch = int(self.input["shape_signature"][0]) == -1
        self.batch = int(self.input["shape"][0])

    def positions(self):
        """{name: position in the subgraph's output list}: where TFLite put each named output."""
        order = [d["index"] for d in self.interpreter.get_output_details()]
        return {name: order.index(d["index"]) for name, d in self.output_details.items()}

    def _quantize(self, x):
        dtype = self.input["dtype"]
        if dtype == np.float32:
            return x
        scale, zero_point = self.input["quantization"]
        info = np.iinfo(dtype)
        # Round half away from zero like TFLite's own QUANTIZE (np.round goes to even): with the [-1, 1]
        # calibration range, x / scale lands on (or within float error of) .5 for every raw pixel value.
        q = x.astype(np.float64) / scale + zero_point
        return np.clip(np.sign(q) * np.floor(np.abs(q) + 0.5), info.min, info.max).astype(dtype)

    def dequantize(self, name, y):
        """Output `name`'s raw tensor values as float32 (its scale and zero point applied where it is quantized)."""
        detail = self.output_details[name]
        if detail["dtype"] == np.float32:
            return y
        scale, zero_point = detail["quantization"]
        return (y.astype(np.float32) - zero_point) * scale

    def _invoke(self, xq):
        _invoke_interpreter(self, xq)
        return {name: self.interpreter.get_tensor(d["index"]) for name, d in self.output_details.items()}

    def _run(self, feed, batch_size=64):
        runs = [self._invoke(b) for b in batches(feed, batch_size if self.dynamic_batch else 1)]
        return {name: self.dequantize(name, y).astype(np.float32) for name, y in gather(runs).items()}

    def outputs(self, x, batch_size=64):
        """The model's outputs for model-space images; a quantized input is quantized from them."""
        x = check_batch(x, self.image_size, "The TFLite model")
        return self._run(self._quantize(x), batch_size)

    def outputs_from_pixels(self, pixels, batch_size=64):
        """The model's outputs for uint8 images at its input size, fed the way apps feed them.

        A uint8-input model gets the raw pixels; a float-input model gets the normalisation computed as
        MediaPipe's ImageClassifier computes it from the metadata's mean and std: the range
        [(0 - mean) / std, (255 - mean) / std] mapped linearly from 0..255 in float32, i.e.
        `x * (2 / 255) - 1` here, which rounds differently from `(x - 127.5) / 127.5` in the last bit.
        """
        return self._run(self.feed_from_pixels(pixels), batch_size)

    def feed_from_pixels(self, pixels):
        """What an app puts in the input tensor for uint8 images at the model's size (see `outputs_from_pixels`)."""
        pixels = np.asarray(pixels)
        expected = (*self.image_size, 3)
        if pixels.dtype != np.uint8 or pixels.ndim != 4 or tuple(pixels.shape[1:]) != expected:
            raise ExportError(
                f"Expected uint8 pixels shaped (N, {expected[0]}, {expected[1]}, 3). Received dtype {pixels.dtype}, "
                f"shape {pixels.shape}. Resize them to the model's input size first."
            )
        if self.input["dtype"] == np.uint8:
            return pixels
        if self.input["dtype"] not in (np.float32, np.int16):
            raise ExportError(f"Cannot feed pixels to a {np.dtype(self.input['dtype']).name} input tensor.")
        mean, std = self.normalization
        low, high = np.float32((0.0 - mean) / std), np.float32((255.0 - mean) / std)
        x = pixels.astype(np.float32) * np.float32((high - low) / 255.0) + low
        return self._quantize(x)  # an int16 input (int8_int16) is quantized from it

    def latency_ms(self, x1, runs=50, warmup=5):
        xq = self._quantize(check_batch(x1, self.image_size, "The TFLite model"))
        return median_ms(lambda: self._invoke(xq), runs, warmup)

    def outputs_from_images(self, images):
        """Outputs for raw uint8 images of any size: bilinear resize (`tf.image.resize`), then the metadata's
        normalisation for a float input, or pixels rounded back to uint8 for a uint8 input."""
        pixels = resize_pixels(images, self.image_size)
        if self.input["dtype"] == np.uint8:
            return self._run(np.clip(np.round(pixels), 0, 255).astype(np.uint8))
        mean, std = self.normalization
        return self._run(self._quantize(((pixels - mean) / std).astype(np.float32)))


def _interpreter(flatbuffer, num_threads, where):
    from ai_edge_litert.interpreter import Interpreter

    try:
        with _startup.native_lines_dropped(_startup.LITERT_NOTICES):  # LiteRT's once-per-process INFO line
            interpreter = Interpreter(model_content=bytes(flatbuffer), num_threads=int(num_threads))
            interpreter.allocate_tensors()
    except Exception as exc:
        raise ExportError(f"LiteRT could not load the flatbuffer{where}: {exc}") from exc
    return interpreter


def _signature_outputs(interpreter, where):
    """{name: output detail} through the signature `serving_default` (its one input named `images`)."""
    signatures = interpreter.get_signature_list()
    if SIGNATURE not in signatures or signatures[SIGNATURE]["inputs"] != [INPUT]:
        raise ExportError(
            f"The TFLite model{where} has no signature {SIGNATURE!r} with one input {INPUT!r} (found {signatures}); "
            "files of several outputs name them through it. Re-export the model with export/."
        )
    runner = interpreter.get_signature_runner(SIGNATURE)
    details = runner.get_output_details()
    del runner  # it holds the interpreter's internals, and LiteRT refuses to run while anything else does
    return details


def _invoke_interpreter(runner, x):
    """Feeds `x` to `runner.interpreter` (a TFLite runner with `input`, `dynamic_batch` and `batch`), resizing an
    open batch dimension when the batch size changed, and invokes it; the caller reads the outputs it needs."""
    if runner.dynamic_batch and x.shape[0] != runner.batch:
        runner.interpreter.resize_tensor_input(runner.input["index"], x.shape)
        runner.interpreter.allocate_tensors()
        runner.batch = x.shape[0]
    runner.interpreter.set_tensor(runner.input["index"], x)
    runner.interpreter.invoke()
