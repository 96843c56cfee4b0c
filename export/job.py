"""The export job: plan once, verify once, then for each format and mode write, reopen, judge and record one file in a
staging directory; then the report (and `format_table`, its words), and the commit of the directory as a whole."""

import dataclasses
import os

from keras_vit import files
from keras_vit.models.vision_transformer import fixed_size_model

from . import commit, kinds
from .description import app_pixels, describe, to_model_space
from .errors import ExportError, VerificationError
from .formats import FORMATS, offered_formats, owned_names
from .keras_runner import KerasRunner
from .naflex import exporter as naflex
from .options import ExportOptions, ExportSource
from .runtime import image_size


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the export decided before touching `out`: one value, made once, that every format reads."""

    source: object  # the ExportSource
    kind: object  # the kind module (export/kinds/)
    model: object  # at a fixed image size
    dynamic_model: object  # the dynamic_image_size=True model ONNX and OpenVINO keep, else None
    labels: list  # a classifier's, else None
    formats: tuple  # the format values to write, in the registry's order
    modes: tuple  # the TFLite modes
    notes: tuple
    description: object  # what every file holds (export/description.py), rendered by each format
    l2_normalize: bool = False  # an embedder's vectors as written


@dataclasses.dataclass(frozen=True)
class Verification:
    """The verification images in every form the files are fed, and the Keras reference on them."""

    images: object  # uint8, any size: what the SavedModel's serving signature takes
    truth: object  # labels (a classifier's, where the set has them) or None
    set_name: str
    note: str  # why there is no accuracy, or None
    x: object  # model space: float32 in [-1, 1] at the model's size
    pixels: object  # uint8 at the model's size: what an app feeds
    reference: dict  # the Keras outputs by name
    keras: dict  # the report's Keras row


def export_model(source, out, options=None):
    """Exports a Keras model to SavedModel, TFLite, ONNX and OpenVINO, verifies every artifact, writes the report.

    A classifier exports in every format; a `num_classes=0` model as an image embedder (TFLite for MediaPipe's
    ImageEmbedder, ONNX, OpenVINO); a `keras_vit.feature_model` as feature maps (SavedModel, TFLite).

    Args:
        source: an `ExportSource` (the model, its labels, calibration and held-out images, names), or a bare
            Keras model (`ExportSource(model)`).
        out: output directory or URL, replaced as a whole once every artifact has passed: absent, empty, or
            an earlier export (anything else is refused). Afterwards it holds exactly what report.json lists.
        options: an `ExportOptions` (formats, TFLite modes, verification and report settings); default all formats.

    Returns:
        The report dict (also written to `out/report.json`).

    Raises:
        ExportError: invalid options or inputs (including an `out` that holds files an export does not
            write, or a request the kind of model cannot meet), before anything is written.
        VerificationError: an artifact missed its budget; `out` is left as it was. `.report` holds the figures.
    """
    source = source if isinstance(source, ExportSource) else ExportSource(source)
    options = ExportOptions() if options is None else options
    _check_backend()
    _check_not_quantized(source.model)
    out = os.fspath(out)
    flex = naflex.is_naflex(source.model)  # patches, mask and grid in: its own files and the preprocessing beside
    if not flex:
        _check_image_input(source.model)
    plan = naflex.plan(source, options) if flex else _plan(source, options)
    # The lock on `out` is held from here to the commit; taking it undoes what killed exports left beside `out`.
    with commit.staged(out, owned_names(kinds.KINDS) + naflex.OWNED) as (target, staging):
        if flex:
            return publish(naflex.write(plan, source, staging, out, options), staging, target, out)
        v = _verify_on(plan, options)
        artifacts = [
            fmt.entry(plan, mode, v, staging, out, options) for fmt in plan.formats for mode in fmt.modes(plan)
        ]
        return publish(_report(plan, v, artifacts, out, options), staging, target, out)


def _check_backend():
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ExportError(
            f"Export converts with TensorFlow and needs Keras' TensorFlow backend; this process runs "
            f"{keras.backend.backend()!r}. Save the model (`model.save('model.keras')`) and run "
            f"`python -m export model.keras` (the CLI uses TensorFlow whatever KERAS_BACKEND says)."
        )


def _check_not_quantized(model):
    """One line, before any conversion, for a model `model.quantize(...)` ran on: no format carries it faithfully."""
    layers = [layer for layer in model._flatten_layers() if getattr(layer, "quantization_mode", None) is not None]
    if layers:
        mode = layers[0].quantization_mode
        raise ExportError(
            f"{model.name} is Keras-quantized ({mode}, {len(layers)} layers such as {layers[0].path}): its {mode} "
            f"matmuls have no LiteRT kernel, and SavedModel, ONNX and OpenVINO miss the float budget on them. Export "
            f"the float model and let the exporter quantize: keras_vit.from_pretrained(FILE).save('float.keras') "
            f"reads the quantized file back as float weights, then `python -m export float.keras --quantize "
            f"dynamic_int8,int8`."
        )


def _check_image_input(model):
    """One line for a model whose input is neither one NHWC image batch nor a NaFlex model's patches, mask, grid."""
    shapes = model.input_shape if isinstance(model.input_shape, list) else [model.input_shape]
    if isinstance(model.input_shape, dict) or len(shapes) != 1 or len(shapes[0]) != 4:
        names = ", ".join(getattr(x, "name", "?") for x in model.inputs)
        raise ExportError(
            f"{model.name} takes {names}, not one batch of images: the exporter writes image models and "
            f"keras_vit.NaFlexViT models only. Export a keras_vit model (create_model, from_pretrained)."
        )


def _plan(source, options):
    """The kind, the model at a fixed size, the formats and TFLite modes, the labels and the notes so far."""
    kind = kinds.kind_of(source.model)
    model = fixed_size_model(source.model)
    dynamic = None if model is source.model else source.model  # ONNX and OpenVINO keep an open image size
    notes = []
    if dynamic is not None:
        size = "x".join(str(d) for d in model.config.image_size)
        notes.append(
            f"exported at {size}, the model's image_size: it was built with dynamic_image_size=True, and TFLite "
            "and the metadata need one input size (the SavedModel's serving signature resizes to it; ONNX and "
            "OpenVINO keep the open size)"
        )
    offered = offered_formats(kind)
    labels, modes, kind_notes = kind.plan(source, options, model, offered)
    formats = tuple(FORMATS[name] for name in offered if name in options.formats)
    described = describe(kind, model, labels, dynamic is not None, tflite_output=options.tflite_output,
                         name=source.metadata_name or f"keras-vit {model.name}", metadata=options.metadata)  # fmt: skip
    return Plan(source, kind, model, dynamic, labels, formats, modes, (*notes, *kind_notes), described)


def _verify_on(plan, options):
    """The verification set (`ExportSource.verification_images`) and the Keras reference on it."""
    size = image_size(plan.model)
    chosen = plan.source.verification_images(size, options.max_verify_images)
    truth = chosen.truth if plan.kind.LABELLED else None
    x = to_model_space(chosen.images, size)
    runner = KerasRunner(plan.model, plan.labels)
    reference = runner.outputs(x)
    keras_row = {
        "threads": runner.threads,
        "latency_ms": runner.latency_ms(x[:1], options.latency_runs, options.latency_warmup),
        **plan.kind.keras_fields(reference, truth, plan.source),
    }
    note = plan.kind.NO_ACCURACY.get(chosen.origin) if plan.kind.LABELLED else None
    pixels = app_pixels(chosen.images, size)
    return Verification(chosen.images, truth, chosen.name, note, x, pixels, reference, keras_row)


def _report(plan, v, artifacts, out, options):
    source = plan.source
    return {
        "source": str(source.name) if source.name else type(source.model).__name__,
        "out": str(out),
        "kind": plan.kind.NAME,
        "model": {"image_size": list(image_size(plan.model)), **plan.kind.describe_model(plan)},
        **plan.kind.report_fields(plan, options),
        "verification": {"set": v.set_name, "images": len(v.x), "labelled": v.truth is not None},
        "latency_runs": options.latency_runs,
        "latency_warmup": options.latency_warmup,
        "keras": v.keras,
        "artifacts": artifacts,
        "notes": [*plan.notes, *([v.note] if v.note else [])],
        "passed": all(a["passed"] for a in artifacts),
    }


def publish(report, staging, target, out):
    """The last stage of every export: refuse a failed report, else list the staged files in it, write it last
    and commit the staging directory to `target` (`out` as `commit.claim` resolved it). Returns the report.

    Raises:
        VerificationError: an artifact missed its budget (`.report` holds the figures); nothing was committed.
    """
    if not report["passed"]:
        error = VerificationError(
            "Export verification failed; nothing in the output directory was changed.\n" + format_table(report)
        )
        error.report = report
        raise error
    # What the directory holds besides the report, each file with its size and checksum: after the commit `out`
    # holds exactly these files and report.json.
    report["files"] = commit.manifest(staging)
    commit.write_staged(staging / commit.REPORT, files.json_bytes(report))
    commit.commit(staging, target)
    report["report_path"] = files.join(out, commit.REPORT)
    return report


def size(n):
    """A byte count as the tables print it."""
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def format_table(report):
    """A readable table, one row per artifact (plus the Keras reference), and each artifact's budget and notes."""
    kind = kinds.named(report["kind"])
    keras = report["keras"]
    header = ("artifact", "size", *kind.HEADER, "latency ms", "threads", "status")
    rows = [("keras (reference)", size(keras.get("file_bytes")), *kind.keras_cells(report),
             f"{keras['latency_ms']:.3f}", str(keras["threads"]), "")]  # fmt: skip
    for a in report["artifacts"]:
        rows.append((a["name"], size(a["file_bytes"]), *kind.cells(a), f"{a['latency_ms']:.3f}", str(a["threads"]),
                     "ok" if a["passed"] else "FAIL"))  # fmt: skip
    out = [f"Export of {report['source']}{kind.TITLE}  ->  {report['out']}", kind.verified(report), "",
           *table(header, rows), "", *kind.preamble(report)]  # fmt: skip
    for a in report["artifacts"]:
        # A NaFlex export's entries carry their own lines (export/naflex/exporter.py); the formats word the others'.
        out += [_budget_line(a), *(a["lines"] if "lines" in a else FORMATS[a["format"]].lines(a, kind))]
    out += [f"note: {note}" for note in report.get("notes", [])]
    out.append(f"status: {'PASSED' if report['passed'] else 'FAILED'}")
    return "\n".join(out)


def _budget_line(a):
    budget = ", ".join(f"{k} {v:g}" for k, v in a["budget"].items())
    if "logit_scale" in a and any("_rel_" in k for k in a["budget"]):  # what a classifier's limits are relative to
        budget += f" (logit scale {a['logit_scale']:.3g})"
    return f"{a['name']}: budget {budget}" + ("" if a["passed"] else f"; FAILED: {'; '.join(a['failures'])}")


def table(header, rows):
    """The lines of a plain-text table: the header, a rule, the rows, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()

    return [line(header), line(["-" * w for w in widths]), *[line(r) for r in rows]]
