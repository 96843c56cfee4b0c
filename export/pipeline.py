"""The export job: convert, load every artifact back, verify it against Keras, then commit and report.

Nothing in the output directory changes until every requested artifact has been built and has passed its
budget: the whole directory (artifacts, then `report.json`, which lists every file with its size and sha256)
is built in a staging directory and then swapped in as a whole (`export.commit`), so after any sequence of
exports, interrupted or not, `out` holds exactly what its `report.json` lists.
"""

import dataclasses
import os

import numpy as np

from keras_vit import files
from keras_vit.models.vision_transformer import fixed_size_model

from . import commit, embedder, feature_maps, gpu, interchange, kinds, portable, preprocessing, tflite
from .errors import ExportError
from .flatbuffer import non_builtin_ops, read_ops
from .io import check_labels, load_image_set, load_keras_model, model_labels, read_labels
from .kinds import classifier as kind
from .kinds.classifier import BUDGETS, check_budget
from .options import DEFAULT_FORMATS, FORMATS, ExportOptions, ExportSource, check_formats  # noqa: F401  (export.*)
from .report import publish
from .runners import KerasRunner, SavedModelRunner, TFLiteRunner
from .runtime import dir_bytes, image_size, printed
from .saved_model import save_saved_model

# Why a classifier's report has no accuracy, by where its verification set came from.
_NO_ACCURACY = {
    "representative": "accuracy unavailable: no labelled held-out set; budgets use top-1 disagreement with Keras",
    "random": "accuracy unavailable: verified on random images; budgets use top-1 disagreement with Keras",
}


@dataclasses.dataclass(frozen=True)
class _Plan:
    """The model as it is converted, and what the export of it decided before touching `out`."""

    model: object  # at a fixed image size
    dynamic_model: object  # the dynamic_image_size=True model ONNX and OpenVINO keep, else None
    labels: list  # None for a model without a head (an embedder)
    modes: tuple  # the TFLite modes
    notes: tuple


@dataclasses.dataclass(frozen=True)
class _Verification:
    """The verification images in every form the artifacts are fed, and the Keras reference on them."""

    images: object  # uint8, any size: what the SavedModel's serving signature takes
    truth: object  # labels or None
    set_name: str
    note: str  # why there is no accuracy, or None
    x: object  # model space: float32 in [-1, 1] at the model's size
    pixels: object  # uint8 at the model's size: what an app feeds
    reference: dict  # the Keras outputs by name: {"logits": ...}
    keras: dict  # the report's Keras row


def export_model(source, out, options=None):
    """Exports a Keras classifier to SavedModel, TFLite, ONNX and OpenVINO, verifies every artifact, writes the report.

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
            write), before anything is written. A `num_classes=0` model exports as an embedder (export/embedder.py),
            a `keras_vit.feature_model` as feature maps (export/feature_maps.py).
        VerificationError: an artifact missed its budget; `out` is left as it was. `.report` holds the figures.
    """
    source = source if isinstance(source, ExportSource) else ExportSource(source)
    options = ExportOptions() if options is None else options
    _check_backend()
    out = os.fspath(out)
    kind = kinds.kind_of(source.model)
    if kind is kinds.feature_maps:  # keras_vit.feature_model: chosen blocks' outputs, by name
        return feature_maps.export_feature_maps(source, out, options)
    plan = _plan(source, options, kind)
    if kind is kinds.embedder:  # num_classes=0: a vector per image, for MediaPipe's ImageEmbedder
        return embedder.export_feature_model(
            source, plan.model, out, options, plan.modes, plan.notes, dynamic_model=plan.dynamic_model
        )
    # The lock on `out` is held from here to the commit; taking it undoes what killed exports left beside `out`.
    with commit.staged(out) as (target, staging):
        verification = _verify_on(source, plan, options)
        artifacts = [
            *_saved_model_artifacts(plan, verification, staging, out, options),
            *(_tflite_artifact(mode, source, plan, verification, staging, out, options) for mode in plan.modes),
            *_portable_artifacts(plan, verification, staging, out, options),
        ]
        return publish(_report(source, plan, verification, artifacts, out, options), staging, target, out)


def _check_backend():
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ExportError(
            f"Export converts with TensorFlow and needs Keras' TensorFlow backend; this process runs "
            f"{keras.backend.backend()!r}. Save the model (`model.save('model.keras')`) and run "
            f"`python -m export model.keras` (the CLI uses TensorFlow whatever KERAS_BACKEND says)."
        )


def _plan(source, options, kind):
    """The model at a fixed size, its labels (None for an embedder), the TFLite modes and the notes so far."""
    notes = []
    model = fixed_size_model(source.model)
    dynamic = None if model is source.model else source.model  # ONNX and OpenVINO keep an open image size
    if dynamic is not None:
        size = "x".join(str(d) for d in model.config.image_size)
        notes.append(
            f"exported at {size}, the model's image_size: it was built with dynamic_image_size=True, and TFLite "
            "and the metadata need one input size (the SavedModel's serving signature resizes to it; ONNX and "
            "OpenVINO keep the open size)"
        )
    modes, note = options.modes(source.has_representative)
    notes += [note] if note else []
    if kind is kinds.embedder:
        return _Plan(model, dynamic, None, modes, tuple(notes))
    if len(model.output_shape) != 2:
        raise ExportError(f"Expected a classifier with logits shaped (batch, classes); output is {model.output_shape}.")
    num_classes = int(model.output_shape[-1])
    labels = source.labels if source.labels is not None else getattr(model, "class_names", None)
    labels = check_labels(labels, num_classes) if labels is not None else [str(i) for i in range(num_classes)]
    return _Plan(model, dynamic, labels, modes, tuple(notes))


def _verify_on(source, plan, options):
    """The verification set (`ExportSource.verification_images`) and the Keras reference on it."""
    size = image_size(plan.model)
    chosen = source.verification_images(size, options.max_verify_images)
    images, truth, note = chosen.images, chosen.truth, _NO_ACCURACY.get(chosen.origin)
    x = preprocessing.to_model_space(images, size)
    runner = KerasRunner(plan.model, plan.labels)
    reference = runner.outputs(x)
    keras_row = {
        "threads": runner.threads,
        "latency_ms": runner.latency_ms(x[:1], options.latency_runs, options.latency_warmup),
        "top1_accuracy": None if truth is None else float((reference["logits"].argmax(-1) == truth).mean()),
        "file_bytes": files.size(source.name) if source.name and files.isfile(source.name) else None,
    }
    pixels = preprocessing.app_pixels(images, size)
    return _Verification(images, truth, chosen.name, note, x, pixels, reference, keras_row)


def _entry(name, fmt, mode, out, size, figures, timing, budget, failures, **fields):
    """One artifact's report entry, complete: its figures, latency, budget and every failure found."""
    return {
        "name": name,
        "format": fmt,
        "quantization": mode,
        "path": files.join(out, name),  # where it is once committed
        "file_bytes": int(size),
        **figures,
        **timing,
        **fields,
        "budget": budget,
        "failures": list(failures),
        "passed": not failures,
    }


def _timing(runner, v, options):
    return {"latency_ms": runner.latency_ms(v.x[:1], options.latency_runs, options.latency_warmup),
            "threads": runner.threads}  # fmt: skip


def _saved_model_artifacts(plan, v, staging, out, options):
    if "saved_model" not in options.formats:
        return []
    path = save_saved_model(plan.model, staging / "saved_model", plan.labels, top_k=options.top_k)
    commit.fault_point("saved_model staged")
    runner = SavedModelRunner(path)
    figures = kind.figures(runner.outputs(v.x), v.reference, v.truth)
    timing = _timing(runner, v, options)
    # The signature users call: raw uint8 images in, resize and scaling inside the graph.
    served = kind.figures(runner.outputs_from_images(v.images), v.reference, v.truth)
    budget = BUDGETS["saved_model"]
    failures = check_budget(figures, budget) + [f"serving_default: {f}" for f in check_budget(served, budget)]
    return [_entry("saved_model", "saved_model", None, out, dir_bytes(path), figures, timing, budget, failures,
                   serving_default_max_abs_logit_diff=served["max_abs_logit_diff"])]  # fmt: skip


def _tflite_artifact(mode, source, plan, v, staging, out, options):
    metadata = {"name": source.metadata_name or f"keras-vit {plan.model.name}", **(options.metadata or {})}
    with printed(options.converter_output) as output:
        flatbuffer = tflite.convert(plan.model, mode, source.representative_images, options.dynamic_batch,
                                    options.int8_io, output=options.tflite_output, labels=plan.labels,
                                    metadata=metadata)  # fmt: skip
    name = f"model_{mode}.tflite"
    commit.write_staged(staging / name, flatbuffer)
    info = tflite.sidecar(plan.model, plan.labels, flatbuffer, mode, options.dynamic_batch, options.int8_io,
                          options.tflite_output)  # fmt: skip
    commit.write_staged((staging / name).with_suffix(".json"), files.json_bytes(info))
    runner = TFLiteRunner(flatbuffer, num_threads=options.num_threads)
    # Budgets hold both ways: as an app runs the model (the figures reported) and with the project's own
    # preprocessing (float (x - 127.5) / 127.5, quantized here for a uint8 input).
    app = kind.figures(runner.outputs_from_pixels(v.pixels), v.reference, v.truth)
    project = kind.figures(runner.outputs(v.x), v.reference, v.truth)
    timing, budget, ops = _timing(runner, v, options), BUDGETS[mode], read_ops(flatbuffer)
    on_gpu = gpu.check_artifact(staging / name, runner, v.pixels, v.reference, v.truth, kind, budget,
                                options.gpu_check)  # fmt: skip
    failures = [
        *check_budget(app, budget),
        *(f"project preprocessing: {f}" for f in check_budget(project, budget)),
        *on_gpu["failures"],
        *([f"non-builtin ops {non_builtin_ops(ops)}"] if non_builtin_ops(ops) else []),
    ]
    return _entry(name, "tflite", mode, out, len(flatbuffer), app, timing, budget, failures,
                  fed_as=_fed_as(np.dtype(runner.input["dtype"])), project_preprocessing=project,
                  converter_output=output[0].splitlines(),
                  # The metadata as read back from the file; its labels are the report's own, so not repeated.
                  metadata={k: val for k, val in runner.metadata.items() if k != "labels"},
                  ops=ops, non_builtin_ops=non_builtin_ops(ops), gpu=on_gpu,
                  io={"input": info["input"], "output": info["output"]})  # fmt: skip


def _fed_as(dtype):
    if dtype == np.uint8:
        return "raw uint8 pixels"
    return "float32 pixels normalised as MediaPipe does: x * (2 / 255) - 1" + (
        "" if dtype == np.float32 else f", quantized to {dtype.name}"
    )


def _portable_artifacts(plan, v, staging, out, options):
    entries = []
    for fmt in (f for f in options.formats if f in portable.FORMATS):
        with printed(options.converter_output) as output:
            name, size, runner = interchange.write(fmt, plan.dynamic_model or plan.model, plan.labels,
                                                image_size(plan.model), staging, options.num_threads)  # fmt: skip
        figures = kind.figures(runner.outputs(v.x), v.reference, v.truth)
        timing, budget = _timing(runner, v, options), BUDGETS["float32"]
        fields, failures = portable.check(runner, v.x, v.reference, budget, plan.dynamic_model)
        entries.append(_entry(name, fmt, "float32", out, size, figures, timing, budget,
                              check_budget(figures, budget) + failures, converter_output=output[0].splitlines(),
                              **fields))  # fmt: skip
    return entries


def _report(source, plan, v, artifacts, out, options):
    return {
        "source": str(source.name) if source.name else type(source.model).__name__,
        "out": str(out),
        "model": {
            "image_size": list(image_size(plan.model)),
            "classes": len(plan.labels),
            "parameters": int(plan.model.count_params()),
        },
        "tflite_output": options.tflite_output if plan.modes else None,
        "labels": plan.labels,
        "verification": {"set": v.set_name, "images": len(v.x), "labelled": v.truth is not None},
        "latency_runs": options.latency_runs,
        "latency_warmup": options.latency_warmup,
        "keras": v.keras,
        "artifacts": artifacts,
        "notes": [*plan.notes, *([v.note] if v.note else [])],
        "passed": all(a["passed"] for a in artifacts),
    }


def load_source(path, labels=None, representative_data=None, heldout_data=None):
    """Resolves a `.keras` file or a training workdir into the `ExportSource` that `export_model` exports.

    The labels are `labels` (a file, one name per line, or a list) when given, else the model's own
    `class_names` (a pretrained model's label space, a training run's classes), else the `labels.txt` beside the
    model file (workdirs written before models carried their class names), else None ("0", "1", ...). The
    calibration and held-out images are the given files, else a workdir's `samples/calibration.npz` and
    `samples/heldout.npz`; the TFLite metadata's model name is the workdir's (or the .keras file's) name.
    """
    path = os.fspath(path)
    if files.isdir(path):
        model_file = files.join(path, "model.keras")
        if not files.isfile(model_file):
            raise ExportError(
                f"{str(path)!r} is a directory without model.keras, so it is not a training workdir. Pass a "
                ".keras file or a workdir written by `python -m training`."
            )
        workdir, named, default_out = path, files.basename(path), files.join(path, "export")
    else:
        named = os.path.splitext(files.basename(path))[0]
        model_file, workdir, default_out = path, None, files.join(files.dirname(path), named + "_export")
    model = load_keras_model(model_file)
    if isinstance(labels, (list, tuple)):
        label_list = list(labels)
    elif labels is not None:
        label_list = read_labels(os.fspath(labels))
    else:  # the model's own class_names, else (a workdir from before models carried them) labels.txt beside it
        label_list = model_labels(model, model_file)
    samples = (lambda name: files.join(workdir, "samples", name)) if workdir is not None else None
    representative = None
    if representative_data is not None:
        representative, _ = load_image_set(representative_data)
    elif samples is not None and files.isfile(samples("calibration.npz")):
        representative, _ = load_image_set(samples("calibration.npz"))
    heldout, set_name = None, None
    heldout_file = os.fspath(heldout_data) if heldout_data is not None else samples and samples("heldout.npz")
    if heldout_file is not None and (heldout_data is not None or files.isfile(heldout_file)):
        heldout, set_name = load_image_set(heldout_file), str(heldout_file)
    return ExportSource(model, label_list, representative, heldout, name=str(model_file), verification_set=set_name,
                        metadata_name=f"keras-vit {named}", default_out=default_out)  # fmt: skip


def export_path(path, out=None, labels=None, representative_data=None, heldout_data=None, options=None, **fields):
    """Exports a `.keras` file or a training workdir (`load_source`) with `options` (an `ExportOptions`), or with
    `ExportOptions(**fields)` (`fields` override the given options' fields).

    Output goes to `out`, by default `WORKDIR/export/` for a workdir and `<name>_export/` beside a file.
    """
    options = ExportOptions(**fields) if options is None else dataclasses.replace(options, **fields)
    source = load_source(path, labels=labels, representative_data=representative_data, heldout_data=heldout_data)
    return export_model(source, out if out is not None else source.default_out, options)


def export_workdir(workdir, out=None, options=None, **fields):
    """Exports a training workdir (model.keras, labels.txt, samples/) to `out` (default `WORKDIR/export`).

    The main job's export stage: SavedModel + TFLite float32/float16/dynamic_int8/int8/int8_matmul, each verified on
    `samples/heldout.npz`, the int8 modes calibrated on `samples/calibration.npz`. Returns the report dict.
    """
    workdir = os.fspath(workdir)
    if not files.isfile(files.join(workdir, "model.keras")):
        raise ExportError(f"{str(workdir)!r} has no model.keras; it is not a training workdir.")
    return export_path(workdir, out=out, options=options, **fields)
