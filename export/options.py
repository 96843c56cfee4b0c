"""What an export is asked to do (`ExportOptions`, checked when built) and what it exports (`ExportSource`: the model,
its labels, calibration and verification images): the two values `export.export_model` takes."""

import dataclasses

import numpy as np

from .errors import ExportError, check_choices, check_count
from .formats import FORMATS as FORMAT_TABLE
from .tflite import converter as tflite
from .tflite import gpu

FORMATS = tuple(FORMAT_TABLE)  # the registry's, in its order
DEFAULT_FORMATS = FORMATS
# How many seeded random images an export verifies on when it is given none.
RANDOM_VERIFICATION_IMAGES = 32


def check_formats(formats):
    """Validates a list (or comma-separated string) of formats; returns a list."""
    return check_choices(formats, tuple(FORMAT_TABLE), "format(s)", "--formats saved_model,tflite")


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """How to export and verify (every field has the CLI's default).

    Attributes:
        formats: subset of ("saved_model", "tflite", "onnx", "openvino") (a list or a comma-separated string);
            default all four. ONNX and OpenVINO are float32 files that keep the batch (and a
            dynamic_image_size=True model's height and width) open.
        quantize: TFLite modes, subset of ("float32", "float16", "dynamic_int8", "int8", "int8_matmul",
            "int8_int16", "int4_weights"); None means the first five, with the calibrated ones ("int8",
            "int8_matmul") left out (and a note) when the source has no representative images.
        dynamic_batch: TFLite batch dimension left open (default batch 1).
        int8_io: "float32" or "uint8" input/output tensors for the full-integer model.
        num_threads: LiteRT interpreter threads for verification and latency.
        latency_runs, latency_warmup: batch-1 latency is the median of `latency_runs` calls after warm-up.
        max_verify_images: verify on at most this many images.
        top_k: classes returned by the SavedModel's serving signature.
        tflite_output: "probabilities" (the TFLite models end in a softmax, what MediaPipe and the Task
            Library expect) or "logits".
        metadata: descriptive fields of the TFLite metadata: a dict with any of name, description, version,
            license, author (defaults in `export.tflite.metadata.render`).
        converter_output: "report" keeps what the TFLite converter prints (from C++, on file descriptors 1 and
            2: dozens of lines per model) in each artifact's "converter_output" in report.json; "terminal"
            lets it through.
        gpu_check: "auto" runs every .tflite on LiteRT's GPU accelerator where a Vulkan driver exists and reports
            the verdict (export/tflite/gpu.py); "require" also fails the export on no driver, a fallback or a miss;
            "off".

    Raises:
        ExportError: an unknown format, mode or choice, or a count out of range.
    """

    formats: tuple = DEFAULT_FORMATS
    quantize: tuple = None
    dynamic_batch: bool = False
    int8_io: str = "float32"
    num_threads: int = 1
    latency_runs: int = 50
    latency_warmup: int = 5
    max_verify_images: int = 512
    top_k: int = 5
    tflite_output: str = "probabilities"
    metadata: dict = None
    converter_output: str = "report"
    gpu_check: str = "auto"

    def __post_init__(self):
        formats = tuple(check_formats(self.formats))
        object.__setattr__(self, "formats", formats)
        if self.quantize is not None:  # checked only where TFLite is asked for, as the CLI always did
            quantize = tuple(tflite.check_quantization(self.quantize)) if "tflite" in formats else ()
            object.__setattr__(self, "quantize", quantize)
        choices = ("report", "terminal")
        check_choices([self.converter_output], choices, "converter_output", 'converter_output="terminal"')
        gpu.check_mode(self.gpu_check)
        for name, minimum, flag in (
            ("num_threads", 1, "--num-threads"),
            ("latency_runs", 1, "--latency-runs"),
            ("latency_warmup", 0, None),
            ("max_verify_images", 1, None),
            ("top_k", 1, "--top-k"),
        ):
            check_count(name, getattr(self, name), minimum, flag)
        tflite.check_output(self.tflite_output)
        if self.int8_io not in tflite.INT8_IO_TYPES:
            raise ExportError(f"int8_io must be one of {tflite.INT8_IO_TYPES}. Received: {self.int8_io!r}")

    def modes(self, has_representative):
        """The TFLite modes to convert, and a note when the default left the calibrated ones out.

        Raises:
            ExportError: a calibrated mode was asked for without representative images.
        """
        if "tflite" not in self.formats:
            return (), None
        note = None
        modes = self.quantize
        if modes is None:
            modes = tuple(q for q in tflite.DEFAULT_MODES if q not in tflite.CALIBRATED_MODES or has_representative)
            if not has_representative:
                skipped = " and ".join(q for q in tflite.CALIBRATED_MODES if q in tflite.DEFAULT_MODES)
                note = f"{skipped} skipped: no representative data (pass --representative-data or export a workdir)"
        calibrated = [q for q in modes if q in tflite.CALIBRATED_MODES]
        if calibrated and not has_representative:
            raise ExportError(
                f"--quantize {','.join(calibrated)} needs representative images to calibrate, and none are available. "
                "Pass --representative-data PATH (an .npz with a uint8 'images' array or a folder of training "
                "images), export a training workdir (samples/calibration.npz), or use dynamic_int8."
            )
        return modes, note


@dataclasses.dataclass(frozen=True)
class ExportSource:
    """What an export reads: the model and what comes with it.

    Attributes:
        model: Keras model, float32 NHWC images in [-1, 1] at a static size -> logits (a `num_classes=0` model
            exports as an image embedder, export/kinds/embedder.py).
        labels: class names, one per output (default: the model's `class_names`, else "0", "1", ...).
        representative_images: uint8 images from the training data for int8/int8_matmul calibration.
        heldout: (images uint8, labels int or None) to verify on; default: the representative images
            (unlabelled), else seeded random images (parity only, no accuracy).
        name: what to call the model in the report (a path); default its class name.
        verification_set: a name for the held-out images in the report.
        metadata_name: the TFLite metadata's model name unless `ExportOptions.metadata` gives one (default
            "keras-vit " + the Keras model's name; an embedder's "keras-vit image embedder").
        default_out: where `export_path` writes when no `out` is given (set by `load_source`).
    """

    model: object
    labels: list = None
    representative_images: object = None
    heldout: tuple = None
    name: str = None
    verification_set: str = None
    metadata_name: str = None
    default_out: str = None

    @property
    def has_representative(self):
        return self.representative_images is not None and len(self.representative_images) > 0

    def verification_images(self, image_size, max_images):
        """The one rule for what every export verifies on: the held-out images, else the representative ones,
        else `RANDOM_VERIFICATION_IMAGES` seeded random images at `image_size`; at most `max_images` of them.

        Returns:
            A `VerificationSet`: the uint8 images, their labels (held-out labels only, else None), the set's name
            in the report, and where it came from ("held-out", "representative" or "random").
        """
        if self.heldout is not None:
            (images, truth), name, origin = self.heldout, self.verification_set or "held-out set", "held-out"
        elif self.has_representative:
            images, truth = self.representative_images, None
            name, origin = "representative images (no held-out set given)", "representative"
        else:
            rng = np.random.default_rng(0)
            images = rng.integers(0, 256, (RANDOM_VERIFICATION_IMAGES, *image_size, 3), dtype=np.uint8)
            truth, name, origin = None, "seeded random images (no data given)", "random"
        images = images[:max_images]
        return VerificationSet(images, None if truth is None else np.asarray(truth)[: len(images)], name, origin)


@dataclasses.dataclass(frozen=True)
class VerificationSet:
    """What an export verifies on (`ExportSource.verification_images`)."""

    images: object  # uint8, any size
    truth: object  # labels or None
    name: str  # the report's name for it
    origin: str  # "held-out", "representative" or "random"
