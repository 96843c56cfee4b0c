"""One interface over the three artifact kinds: a Keras model, a SavedModel directory, a .tflite file.

Each runner turns model-space float32 images (N, H, W, 3) in [-1, 1] into its model's outputs (N, classes),
checks the tensor it is given, and times a batch-1 call; `output_kind` says whether the outputs are "logits"
(Keras, SavedModel's model_space, `--tflite-output logits`) or "probabilities" (TFLite models by default).
`load_runner` picks the kind from the path.
"""

import json
import os

import numpy as np

from keras_vit import _startup, files

from . import metadata as tflite_metadata
from . import preprocessing
from .errors import ExportError
from .io import load_keras_model, model_labels, read_labels
from .kinds.embedder import is_feature_model
from .runtime import check_batch, invoke, median_ms

# A feature-map file (export/feature_maps.py) has several named outputs and no classes: these runners refuse it.
_FEATURE_MAPS = (
    "{what} (several named outputs, no classes): predict and similar take classifiers and image embedders. Read "
    "its outputs by name with export.feature_maps_artifacts (TFLiteFeatureMaps, SavedModelFeatureMaps)."
)


class KerasRunner:
    """Runs a Keras model through one traced `tf.function` (what serving the model in TF would do)."""

    kind = "keras"
    output_kind = "logits"

    def __init__(self, model, labels=None):
        import tensorflow as tf

        self.model = model
        self.image_size = tuple(model.input_shape[1:3])
        self.labels = labels
        self.output_kind = "embedding" if is_feature_model(model) else "logits"
        self._call = tf.function(lambda x: model(x, training=False))

    @property
    def threads(self):
        return "tf-default"

    def logits(self, x, batch_size=64):
        x = check_batch(x, self.image_size, "The Keras model")
        return np.concatenate([np.asarray(self._call(x[i : i + batch_size])) for i in range(0, len(x), batch_size)])

    def latency_ms(self, x1, runs=50, warmup=5):
        return median_ms(lambda: np.asarray(self._call(x1)), runs, warmup)

    def logits_from_images(self, images):
        return self.logits(preprocessing.to_model_space(images, self.image_size))

    outputs = logits
    outputs_from_images = logits_from_images


class SavedModelRunner:
    """Runs an exported SavedModel: `model_space` for tensors, `serving_default` for raw images."""

    kind = "saved_model"
    output_kind = "logits"

    def __init__(self, path):
        import tensorflow as tf

        path = os.fspath(path)
        if not files.isfile(files.join(path, "saved_model.pb")):
            raise ExportError(f"{str(path)!r} is not a SavedModel directory (no saved_model.pb).")
        try:
            self.loaded = tf.saved_model.load(str(path))
        except Exception as exc:
            raise ExportError(f"Could not load the SavedModel at {str(path)!r}: {exc}") from exc
        missing = {"serving_default", "model_space"} - set(self.loaded.signatures)
        if missing:
            raise ExportError(f"{str(path)!r} lacks the signatures {sorted(missing)}; re-export it with export/.")
        self.serving = self.loaded.signatures["serving_default"]
        self.model_space = self.loaded.signatures["model_space"]
        if "logits" not in self.model_space.structured_outputs:
            raise ExportError(_FEATURE_MAPS.format(what=f"{str(path)!r} is a feature-map SavedModel"))
        spec = self.model_space.structured_input_signature[1]["images"]
        self.image_size = tuple(int(d) for d in spec.shape[1:3])
        labels_file = files.join(path, "assets", "labels.txt")
        self.labels = read_labels(labels_file) if files.isfile(labels_file) else None

    @property
    def threads(self):
        return "tf-default"

    def logits(self, x, batch_size=64):
        x = check_batch(x, self.image_size, "The SavedModel's model_space signature")
        out = [self.model_space(images=x[i : i + batch_size])["logits"].numpy() for i in range(0, len(x), batch_size)]
        return np.concatenate(out)

    def latency_ms(self, x1, runs=50, warmup=5):
        def run():
            return self.model_space(images=x1)["logits"].numpy()

        return median_ms(run, runs, warmup)

    def serve(self, image):
        """Runs `serving_default` on one raw uint8 image of any size; returns its output dict (numpy)."""
        (image,) = preprocessing.check_images(np.asarray(image)[None] if np.ndim(image) == 3 else image)
        return {k: v.numpy() for k, v in self.serving(images=image[None]).items()}

    def logits_from_images(self, images, batch_size=64):
        images = preprocessing.check_images(images)
        if len({image.shape for image in images}) == 1:  # one size: batch them through the signature
            batches = [np.stack(images[i : i + batch_size]) for i in range(0, len(images), batch_size)]
            return np.concatenate([self.serving(images=b)["logits"].numpy() for b in batches])
        return np.concatenate([self.serve(image)["logits"] for image in images])

    outputs = logits
    outputs_from_images = logits_from_images


class TFLiteRunner:
    """Runs a .tflite flatbuffer with LiteRT's interpreter; quantized I/O is (de)quantized here.

    Labels, the output kind and the input normalisation come from the `.json` sidecar beside a file, else from
    the model's embedded metadata (what MediaPipe reads), else the project's defaults.
    """

    kind = "tflite"

    def __init__(self, flatbuffer=None, path=None, num_threads=1, labels=None):
        from ai_edge_litert.interpreter import Interpreter

        output_kind = None
        if flatbuffer is None:
            path = os.fspath(path)
            if not files.isfile(path):
                raise ExportError(f"No .tflite file at {str(path)!r}.")
            flatbuffer = files.read_bytes(path)  # LiteRT reads a local file or bytes: bytes work for URLs too
            sidecar = os.path.splitext(path)[0] + ".json"
            if files.isfile(sidecar):
                info = json.loads(files.read_text(sidecar))
                if info.get("kind") == "feature_maps":
                    raise ExportError(_FEATURE_MAPS.format(what=f"{str(path)!r} is a feature-map file"))
                labels = info.get("labels") if labels is None else labels
                output_kind = (info.get("output") or {}).get("meaning")
        try:
            with _startup.native_lines_dropped(_startup.LITERT_NOTICES):  # LiteRT's once-per-process INFO line
                self.interpreter = Interpreter(model_content=bytes(flatbuffer), num_threads=int(num_threads))
                self.interpreter.allocate_tensors()
        except Exception as exc:
            where = f" {str(path)!r}" if path else ""
            raise ExportError(f"LiteRT could not load the flatbuffer{where}: {exc}") from exc
        self.flatbuffer = bytes(flatbuffer)
        self.num_threads = int(num_threads)
        try:
            self.metadata = tflite_metadata.read_metadata(self.flatbuffer)
        except ExportError as exc:
            raise ExportError(
                f"The TFLite model{' ' + repr(str(path)) if path else ''} has unreadable metadata: {exc}"
            ) from exc
        meta = self.metadata or {"input": {}, "output": {}}
        self.labels = labels if labels is not None else meta.get("labels")
        self.output_kind = output_kind or meta["output"].get("kind") or "logits"
        mean, std = meta["input"].get("mean"), meta["input"].get("std")
        # One mean/std for all channels (what this exporter writes); per-channel values are not used here.
        self.normalization = (
            (float(mean[0]), float(std[0])) if mean and std else (preprocessing.PIXEL_CENTER, preprocessing.PIXEL_SCALE)
        )
        inputs, outputs = self.interpreter.get_input_details(), self.interpreter.get_output_details()
        if len(inputs) != 1 or len(outputs) != 1:
            raise ExportError(f"Expected one input and one output tensor; found {len(inputs)} and {len(outputs)}.")
        self.input, self.output = inputs[0], outputs[0]
        self.image_size = tuple(int(d) for d in self.input["shape"][1:3])
        self.dynamic_batch = int(self.input["shape_signature"][0]) == -1
        self.batch = int(self.input["shape"][0])

    @property
    def threads(self):
        return self.num_threads

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

    def _dequantize(self, y):
        if self.output["dtype"] == np.float32:
            return y
        scale, zero_point = self.output["quantization"]
        return (y.astype(np.float32) - zero_point) * scale

    def _invoke(self, xq):
        invoke(self, xq)
        return self.interpreter.get_tensor(self.output["index"])

    def _run(self, feed, batch_size=64):
        step = batch_size if self.dynamic_batch else 1
        out = [self._dequantize(self._invoke(feed[i : i + step])) for i in range(0, len(feed), step)]
        return np.concatenate(out).astype(np.float32)

    def outputs(self, x, batch_size=64):
        """The model's outputs (`output_kind`) for model-space images; a uint8 input is quantized from them."""
        x = check_batch(x, self.image_size, "The TFLite model")
        return self._run(self._quantize(x), batch_size)

    def logits(self, x, batch_size=64):
        if self.output_kind != "logits":
            raise ExportError(
                f"This TFLite model outputs {self.output_kind}, not logits. Use .outputs(x), or export with "
                "--tflite-output logits."
            )
        return self.outputs(x, batch_size)

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
        pixels = preprocessing.resize_pixels(images, self.image_size)
        if self.input["dtype"] == np.uint8:
            return self._run(np.clip(np.round(pixels), 0, 255).astype(np.uint8))
        mean, std = self.normalization
        return self._run(self._quantize(((pixels - mean) / std).astype(np.float32)))

    def logits_from_images(self, images):
        return self.logits(preprocessing.to_model_space(images, self.image_size))


def load_runner(path, num_threads=1):
    """Opens any artifact: a `.keras` file (or a training workdir), a SavedModel directory, a `.tflite` file, a
    `.onnx` file (onnxruntime) or an OpenVINO `.xml` (with its `.bin`).

    Labels come with the artifact: a `.keras` model's own `class_names` (else `labels.txt` next to it, as in
    older training workdirs), `assets/labels.txt` inside a SavedModel, the `.json` sidecar of a `.tflite` file
    or, without one, the model's embedded metadata; ONNX metadata_props, OpenVINO rt_info.
    """
    path = os.fspath(path)
    is_dir = files.isdir(path)
    if (
        is_dir
        and not files.isfile(files.join(path, "saved_model.pb"))
        and files.isfile(files.join(path, "model.keras"))
    ):
        path, is_dir = files.join(path, "model.keras"), False  # a training workdir: its Keras model
    if is_dir:
        return SavedModelRunner(path)
    if path.endswith(".tflite"):
        return TFLiteRunner(path=path, num_threads=num_threads)
    if path.endswith(".onnx"):
        from .onnx import OnnxRunner

        return OnnxRunner(path=path, num_threads=num_threads)
    if path.endswith((".xml", ".bin")):
        from .openvino import OpenVINORunner

        return OpenVINORunner(path=os.path.splitext(path)[0] + ".xml", num_threads=num_threads)
    if path.endswith(".keras"):
        model = load_keras_model(path)
        return KerasRunner(model, model_labels(model, path))
    if not files.exists(path):
        raise ExportError(f"No artifact at {str(path)!r}.")
    raise ExportError(
        f"Cannot tell what {str(path)!r} is. Pass a .keras file, a SavedModel directory, a .tflite, .onnx or "
        "OpenVINO .xml file."
    )
