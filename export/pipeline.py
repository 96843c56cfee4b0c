"""The export job: convert, load every artifact back, verify it against Keras, then commit and report.

Nothing in the output directory changes until every requested artifact has been built and has passed its
budget: the whole directory (artifacts, then `report.json`, which lists every file with its size and sha256)
is built in a staging directory and then swapped in as a whole (`export.commit`), so after any sequence of
exports, interrupted or not, `out` holds exactly what its `report.json` lists.
"""

import contextlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from keras_vit import _startup, files
from keras_vit.models.vision_transformer import fixed_size_model

from . import commit, embedder, gpu, portable, preprocessing, tflite
from .errors import ExportError, VerificationError, check_choices, check_count
from .flatbuffer import non_builtin_ops, read_ops
from .io import check_labels, load_image_set, load_keras_model, model_labels, read_labels
from .report import format_table
from .runners import KerasRunner, SavedModelRunner, TFLiteRunner
from .saved_model import save_saved_model
from .verify import BUDGETS, check_budget, compare

FORMATS = ("saved_model", "tflite", *portable.FORMATS)
DEFAULT_FORMATS = FORMATS
RANDOM_VERIFICATION_IMAGES = 32


def check_formats(formats):
    """Validates a list (or comma-separated string) of formats; returns a list."""
    return check_choices(formats, FORMATS, "format(s)", "--formats saved_model,tflite")


def _dir_bytes(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def export_model(
    model,
    out,
    labels=None,
    formats=DEFAULT_FORMATS,
    quantize=None,
    representative_images=None,
    heldout=None,
    dynamic_batch=False,
    int8_io="float32",
    num_threads=1,
    latency_runs=50,
    latency_warmup=5,
    max_verify_images=512,
    top_k=5,
    source=None,
    verification_set=None,
    tflite_output="probabilities",
    metadata=None,
    converter_output="report",
    gpu_check="auto",
):
    """Exports a Keras classifier to SavedModel, TFLite, ONNX and OpenVINO, verifies every artifact, writes the report.

    Args:
        model: Keras model, float32 NHWC images in [-1, 1] at a static size -> logits.
        out: output directory or URL, replaced as a whole once every artifact has passed: absent, empty, or
            an earlier export (anything else is refused). Afterwards it holds exactly what report.json lists.
        labels: class names, one per output (default: the model's `class_names`, else "0", "1", ...).
        formats: subset of ("saved_model", "tflite", "onnx", "openvino"); default all four. ONNX and OpenVINO
            are float32 files that keep the batch (and a dynamic_image_size=True model's height and width) open.
        quantize: TFLite modes, subset of ("float32", "float16", "dynamic_int8", "int8", "int8_matmul",
            "int8_int16", "int4_weights"); None means the first five, with the calibrated ones ("int8",
            "int8_matmul") left out (and a note) when there are no representative images.
        representative_images: uint8 images from the training data for int8/int8_matmul calibration.
        heldout: (images uint8, labels int or None) to verify on; default: the representative images
            (unlabelled), else seeded random images (parity only, no accuracy).
        dynamic_batch: TFLite batch dimension left open (default batch 1).
        int8_io: "float32" or "uint8" input/output tensors for the full-integer model.
        num_threads: LiteRT interpreter threads for verification and latency.
        latency_runs, latency_warmup: batch-1 latency is the median of `latency_runs` calls after warm-up.
        max_verify_images: verify on at most this many images.
        top_k: classes returned by the SavedModel's serving signature.
        source: what to call the model in the report (a path).
        verification_set: a name for the verification images in the report.
        tflite_output: "probabilities" (the TFLite models end in a softmax, what MediaPipe and the Task
            Library expect) or "logits".
        metadata: descriptive fields of the TFLite metadata: a dict with any of name, description, version,
            license, author (defaults in `export.metadata.build_metadata`).
        converter_output: "report" keeps what the TFLite converter prints (from C++, on file descriptors 1 and
            2: dozens of lines per model) in each artifact's "converter_output" in report.json; "terminal"
            lets it through.
        gpu_check: "auto" runs every .tflite on LiteRT's GPU accelerator where a Vulkan driver exists and reports
            the verdict (export/gpu.py); "require" also fails the export on no driver, a fallback or a miss; "off".

    Returns:
        The report dict (also written to `out/report.json`).

    Raises:
        ExportError: invalid options or inputs (including an `out` that holds files an export does not
            write), before anything is written. A `num_classes=0` model exports as an embedder (export/embedder.py).
        VerificationError: an artifact missed its budget; `out` is left as it was. `.report` holds the figures.
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ExportError(
            f"Export converts with TensorFlow and needs Keras' TensorFlow backend; this process runs "
            f"{keras.backend.backend()!r}. Save the model (`model.save('model.keras')`) and run "
            f"`python -m export model.keras` (the CLI uses TensorFlow whatever KERAS_BACKEND says)."
        )
    formats = check_formats(formats)
    check_choices([converter_output], ("report", "terminal"), "converter_output", 'converter_output="terminal"')
    gpu.check_mode(gpu_check)
    for name, value, minimum, flag in (
        ("num_threads", num_threads, 1, "--num-threads"),
        ("latency_runs", latency_runs, 1, "--latency-runs"),
        ("latency_warmup", latency_warmup, 0, None),
        ("max_verify_images", max_verify_images, 1, None),
        ("top_k", top_k, 1, "--top-k"),
    ):
        check_count(name, value, minimum, flag)
    notes = []
    fixed = fixed_size_model(model)
    dynamic_model = None  # ONNX and OpenVINO keep an open image size; the rest need one
    if fixed is not model:
        model, dynamic_model = fixed, model
        size = "x".join(str(d) for d in model.config.image_size)
        notes.append(
            f"exported at {size}, the model's image_size: it was built with dynamic_image_size=True, and TFLite "
            "and the metadata need one input size (the SavedModel's serving signature resizes to it; ONNX and "
            "OpenVINO keep the open size)"
        )
    has_representative = representative_images is not None and len(representative_images) > 0
    if quantize is None:
        quantize = [q for q in tflite.DEFAULT_MODES if q not in tflite.CALIBRATED_MODES or has_representative]
        if not has_representative and "tflite" in formats:
            skipped = " and ".join(q for q in tflite.CALIBRATED_MODES if q in tflite.DEFAULT_MODES)
            notes.append(f"{skipped} skipped: no representative data (pass --representative-data or export a workdir)")
    quantize = tflite.check_quantization(quantize) if "tflite" in formats else []
    calibrated = [q for q in quantize if q in tflite.CALIBRATED_MODES]
    if calibrated and not has_representative:
        raise ExportError(
            f"--quantize {','.join(calibrated)} needs representative images to calibrate, and none are available. Pass "
            "--representative-data PATH (an .npz with a uint8 'images' array or a folder of training images), "
            "export a training workdir (samples/calibration.npz), or use dynamic_int8."
        )
    tflite.check_output(tflite_output)
    if int8_io not in tflite.INT8_IO_TYPES:
        raise ExportError(f"int8_io must be one of {tflite.INT8_IO_TYPES}. Received: {int8_io!r}")
    if embedder.is_feature_model(model):  # num_classes=0: a vector per image, for MediaPipe's ImageEmbedder
        return embedder.export_feature_model(
            model, out, formats, quantize, heldout, representative_images, num_threads=num_threads,
            latency_runs=latency_runs, latency_warmup=latency_warmup, max_verify_images=max_verify_images,
            source=source, set_name=verification_set, metadata=metadata, gpu_check=gpu_check, notes=notes,
        )  # fmt: skip
    if len(model.output_shape) != 2:
        raise ExportError(f"Expected a classifier with logits shaped (batch, classes); output is {model.output_shape}.")
    num_classes = int(model.output_shape[-1])
    if labels is None:
        labels = getattr(model, "class_names", None)
    labels = check_labels(labels, num_classes) if labels is not None else [str(i) for i in range(num_classes)]
    image_size = tuple(int(d) for d in model.input_shape[1:3])
    out = os.fspath(out)
    # The lock on `out` is held from here to the commit; taking it undoes what killed exports left beside `out`.
    with commit.claim(out) as target:
        commit.check_target(target)

        # The verification set: held-out first, then calibration images, then seeded noise (parity only).
        if heldout is not None:
            images, truth = heldout
            set_name = verification_set or "held-out set"
        elif has_representative:
            images, truth = representative_images, None
            set_name = "representative images (no held-out set given)"
            notes.append("accuracy unavailable: no labelled held-out set; budgets use top-1 disagreement with Keras")
        else:
            rng = np.random.default_rng(0)
            images = rng.integers(0, 256, (RANDOM_VERIFICATION_IMAGES, *image_size, 3), dtype=np.uint8)
            truth, set_name = None, "seeded random images (no data given)"
            notes.append("accuracy unavailable: verified on random images; budgets use top-1 disagreement with Keras")
        images = images[:max_verify_images]
        truth = None if truth is None else np.asarray(truth)[: len(images)]
        x = preprocessing.to_model_space(images, image_size)
        # What an app feeds: uint8 pixels at the model's size (images of another size resized here, as the app's
        # own resize would; MediaPipe's resize differs from tf.image.resize, see docs/mobile.md).
        pixels = np.clip(np.round(preprocessing.resize_pixels(images, image_size)), 0, 255).astype(np.uint8)
        keras_runner = KerasRunner(model, labels)
        reference = keras_runner.logits(x)
        keras_row = {
            "threads": keras_runner.threads,
            "latency_ms": keras_runner.latency_ms(x[:1], latency_runs, latency_warmup),
            "top1_accuracy": None if truth is None else float((reference.argmax(-1) == truth).mean()),
            "file_bytes": files.size(source) if source and files.isfile(source) else None,
        }

        staging = commit.staging_dir(target)
        artifacts = []
        try:
            if "saved_model" in formats:
                path = save_saved_model(model, staging / "saved_model", labels, top_k=top_k)
                commit.fault_point("saved_model staged")
                runner = SavedModelRunner(path)
                figures = compare(runner.logits(x), reference, truth)
                entry = _entry(
                    "saved_model", "saved_model", None, path, _dir_bytes(path), figures, runner, x, latency_runs,
                    latency_warmup,
                )  # fmt: skip
                # The signature users call: raw uint8 images in, resize and scaling inside the graph.
                served = compare(runner.logits_from_images(images), reference, truth)
                entry["serving_default_max_abs_logit_diff"] = served["max_abs_logit_diff"]
                entry["failures"] += [f"serving_default: {f}" for f in check_budget(served, entry["budget"])]
                entry["passed"] = not entry["failures"]
                artifacts.append(entry)
            keep = converter_output == "report"
            for mode in quantize:
                with _startup.captured_native_output() if keep else contextlib.nullcontext([""]) as printed:
                    flatbuffer = tflite.convert(
                        model, mode, representative_images, dynamic_batch, int8_io, output=tflite_output, labels=labels,
                        metadata={"name": f"keras-vit {model.name}", **(metadata or {})},
                    )  # fmt: skip
                name = f"model_{mode}.tflite"
                path = staging / name
                commit.write_staged(path, flatbuffer)
                info = tflite.sidecar(model, labels, flatbuffer, mode, dynamic_batch, int8_io, tflite_output)
                commit.write_staged(path.with_suffix(".json"), (json.dumps(info, indent=2) + "\n").encode("utf-8"))
                runner = TFLiteRunner(flatbuffer, num_threads=num_threads)
                # Budgets hold both ways: as an app runs the model (the figures reported) and with the project's
                # own preprocessing (float (x - 127.5) / 127.5, quantized here for a uint8 input).
                app = compare(runner.outputs_from_pixels(pixels), reference, truth, tflite_output)
                project = compare(runner.outputs(x), reference, truth, tflite_output)
                entry = _entry(
                    name, "tflite", mode, path, len(flatbuffer), app, runner, x, latency_runs, latency_warmup
                )
                dtype = np.dtype(runner.input["dtype"])
                entry["fed_as"] = (
                    "raw uint8 pixels" if dtype == np.uint8
                    else "float32 pixels normalised as MediaPipe does: x * (2 / 255) - 1"
                    + ("" if dtype == np.float32 else f", quantized to {dtype.name}")
                )  # fmt: skip
                entry["project_preprocessing"] = project
                entry["converter_output"] = printed[0].splitlines()
                entry["failures"] += [f"project preprocessing: {f}" for f in check_budget(project, entry["budget"])]
                entry["passed"] = not entry["failures"]
                # The metadata as read back from the file; its labels are the report's own, so not repeated.
                entry["metadata"] = {k: v for k, v in runner.metadata.items() if k != "labels"}
                entry["ops"] = read_ops(flatbuffer)
                entry["non_builtin_ops"] = non_builtin_ops(entry["ops"])
                entry["gpu"] = gpu.check_artifact(
                    path, runner, pixels, reference, truth, tflite_output, entry["budget"], gpu_check
                )
                entry["failures"] += entry["gpu"]["failures"]
                entry["passed"] = not entry["failures"]
                entry["io"] = {"input": info["input"], "output": info["output"]}
                if entry["non_builtin_ops"]:
                    entry["failures"].append(f"non-builtin ops {entry['non_builtin_ops']}")
                    entry["passed"] = False
                artifacts.append(entry)
            for fmt in (f for f in formats if f in portable.FORMATS):
                with _startup.captured_native_output() if keep else contextlib.nullcontext([""]) as printed:
                    name, size, runner = portable.write(
                        fmt, dynamic_model or model, labels, image_size, staging, num_threads
                    )
                figures = compare(runner.outputs(x), reference, truth)
                entry = _entry(name, fmt, "float32", staging / name, size, figures, runner, x, latency_runs,
                               latency_warmup)  # fmt: skip
                entry["converter_output"] = printed[0].splitlines()
                artifacts.append(portable.check(entry, runner, x, reference, dynamic_model))

            report = {
                "source": str(source) if source else type(model).__name__,
                "out": str(out),
                "model": {
                    "image_size": list(image_size),
                    "classes": num_classes,
                    "parameters": int(model.count_params()),
                },
                "tflite_output": tflite_output if quantize else None,
                "labels": labels,
                "verification": {"set": set_name, "images": len(x), "labelled": truth is not None},
                "latency_runs": latency_runs,
                "latency_warmup": latency_warmup,
                "keras": keras_row,
                "artifacts": artifacts,
                "notes": notes,
                "passed": all(a["passed"] for a in artifacts),
            }
            if not report["passed"]:
                error = VerificationError(
                    "Export verification failed; nothing in the output directory was changed.\n" + format_table(report)
                )
                error.report = report
                raise error
            for a in artifacts:  # the paths the artifacts will have once committed
                a["path"] = files.join(out, a["name"])
            # What the directory holds besides the report, each file with its size and checksum: after the commit
            # `out` holds exactly these files and report.json.
            report["files"] = commit.manifest(staging)
            commit.write_staged(staging / commit.REPORT, (json.dumps(report, indent=2) + "\n").encode("utf-8"))
            commit.commit(staging, target)
            report["report_path"] = files.join(out, commit.REPORT)
            return report
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _entry(name, fmt, mode, path, size, figures, runner, x, runs, warmup):
    budget = BUDGETS["saved_model" if fmt == "saved_model" else mode]
    failures = check_budget(figures, budget)
    return {
        "name": name,
        "format": fmt,
        "quantization": mode,
        "path": str(path),
        "file_bytes": int(size),
        **figures,
        "latency_ms": runner.latency_ms(x[:1], runs, warmup),
        "threads": runner.threads,
        "budget": budget,
        "failures": failures,
        "passed": not failures,
    }


def load_source(path, labels=None, representative_data=None, heldout_data=None):
    """Resolves a `.keras` file or a training workdir into what `export_model` needs.

    The labels are `labels` (a file, one name per line, or a list) when given, else the model's own
    `class_names` (a pretrained model's label space, a training run's classes), else the `labels.txt` beside the
    model file (workdirs written before models carried their class names), else None ("0", "1", ...).

    Returns:
        dict with `model`, `labels`, `representative_images`, `heldout`, `source`, `default_out`,
        `verification_set`.
    """
    path = os.fspath(path)
    if files.isdir(path):
        model_file = files.join(path, "model.keras")
        if not files.isfile(model_file):
            raise ExportError(
                f"{str(path)!r} is a directory without model.keras, so it is not a training workdir. Pass a "
                ".keras file or a workdir written by `python -m training`."
            )
        workdir = path
        default_out = files.join(path, "export")
    else:
        stem = os.path.splitext(files.basename(path))[0]
        model_file, workdir, default_out = path, None, files.join(files.dirname(path), stem + "_export")
    model = load_keras_model(model_file)

    if isinstance(labels, (list, tuple)):
        label_list = list(labels)
    elif labels is not None:
        label_list = read_labels(os.fspath(labels))
    else:  # the model's own class_names, else (a workdir from before models carried them) labels.txt beside it
        label_list = model_labels(model, model_file)

    representative = None
    if representative_data is not None:
        representative, _ = load_image_set(representative_data)
    elif workdir is not None and files.isfile(files.join(workdir, "samples", "calibration.npz")):
        representative, _ = load_image_set(files.join(workdir, "samples", "calibration.npz"))

    heldout, set_name = None, None
    heldout_file = os.fspath(heldout_data) if heldout_data is not None else (
        files.join(workdir, "samples", "heldout.npz") if workdir is not None else None
    )  # fmt: skip
    if heldout_file is not None and (heldout_data is not None or files.isfile(heldout_file)):
        images, truth = load_image_set(heldout_file)
        heldout, set_name = (images, truth), str(heldout_file)
    return {
        "model": model,
        "labels": label_list,
        "representative_images": representative,
        "heldout": heldout,
        "source": str(model_file),
        "default_out": default_out,
        "verification_set": set_name,
    }


def export_path(path, out=None, labels=None, representative_data=None, heldout_data=None, **options):
    """Exports a `.keras` file or a training workdir; see `export_model` for `options`.

    Output goes to `out`, by default `WORKDIR/export/` for a workdir and `<name>_export/` beside a file.
    """
    src = load_source(path, labels=labels, representative_data=representative_data, heldout_data=heldout_data)
    # The TFLite metadata's model name: the workdir's (or the .keras file's) name unless one is given.
    named = files.basename(path) if files.isdir(path) else os.path.splitext(files.basename(path))[0]
    options["metadata"] = {"name": f"keras-vit {named}", **(options.get("metadata") or {})}
    return export_model(
        src["model"],
        out if out is not None else src["default_out"],
        labels=src["labels"],
        representative_images=src["representative_images"],
        heldout=src["heldout"],
        source=src["source"],
        verification_set=src["verification_set"],
        **options,
    )


def export_workdir(workdir, out=None, **options):
    """Exports a training workdir (model.keras, labels.txt, samples/) to `out` (default `WORKDIR/export`).

    The main job's export stage: SavedModel + TFLite float32/float16/dynamic_int8/int8/int8_matmul, each verified on
    `samples/heldout.npz`, the int8 modes calibrated on `samples/calibration.npz`. Returns the report dict.
    """
    workdir = os.fspath(workdir)
    if not files.isfile(files.join(workdir, "model.keras")):
        raise ExportError(f"{str(workdir)!r} has no model.keras; it is not a training workdir.")
    return export_path(workdir, out=out, **options)
