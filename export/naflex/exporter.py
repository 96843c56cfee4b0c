"""The files of a NaFlex model (`keras_vit.NaFlexViT`): its files in every format and the preprocessing beside them,
each file run by its own runtime on what the shipped preprocessing makes of wide, tall and square images and judged
against the Keras model as its kind (classifier, embedder) judges any file; the report in the export's one form."""

import types

import numpy as np

from keras_vit import files

from .. import commit
from ..errors import ExportError
from ..io import check_labels
from ..kinds import classifier, embedder
from ..runtime import median_ms
from ..tflite.flatbuffer import non_builtin_ops, read_ops
from . import app_preprocessing as preprocessing
from . import files as naflex_files
from . import tflite_preprocessing

FORMAT_NAMES = ("saved_model", "tflite", "onnx", "openvino")


def is_naflex(model):
    """Whether `model` takes NaFlex inputs (patches, mask, grid): a `keras_vit.NaFlexViT`."""
    return "max_num_patches" in (getattr(model, "options", None) or {})


OWNED = preprocessing.OWNED  # the files an export writes besides the kinds' (export/job.py claims them all)


def plan(source, options):
    """What a NaFlex model's export makes, checked before anything is written: its kind, labels and TFLite modes."""
    model = source.model
    kind = classifier if model.options["num_classes"] else embedder
    return types.SimpleNamespace(model=model, labels=_labels(source, model, kind), modes=_modes(options),
                                 l2_normalize=False, kind=kind, output=kind.output_names(model)[0],
                                 formats=[f for f in FORMAT_NAMES if f in options.formats])  # fmt: skip


def write(plan, source, staging, out, options):
    """Writes the preprocessing and every file of `plan` into `staging`, each verified; returns the report (export/
    job.py publishes it)."""
    for name, data in preprocessing.files_of(plan.model).items():
        commit.write_staged(staging / name, data)
    shipped = preprocessing.load(staging / preprocessing.MODULE)  # every file is fed what the app's copy makes
    v = _verification(plan, source, options, shipped)
    v.app = _app_tflite(plan, v, staging, options) if "tflite" in plan.formats else None
    artifacts = []
    for fmt in plan.formats:
        for mode in plan.modes if fmt == "tflite" else (None,):
            artifacts.append(_ENTRIES[fmt](plan, v, staging, out, options, mode))
    return _report(plan, source, v, artifacts, out, options)


def _labels(source, model, kind):
    if kind is not classifier:
        return None
    labels = source.labels if source.labels is not None else getattr(model, "class_names", None)
    count = model.options["num_classes"]
    return check_labels(labels, count) if labels is not None else [str(i) for i in range(count)]


def _modes(options):
    modes = options.quantize or ("float32", "float16")
    other = [m for m in modes if m not in naflex_files.TFLITE_MODES]
    if other and "tflite" in options.formats:
        raise ExportError(
            f"--quantize {','.join(other)} is not offered for a NaFlex model (it has no calibration feed yet); use "
            f"{','.join(naflex_files.TFLITE_MODES)}."
        )
    return tuple(modes)


def _verification(plan, source, options, shipped):
    """The verification images cut wide, tall and square, their feeds and the Keras reference on them."""
    import tensorflow as tf

    model = plan.model
    side = [g * model.options["patch_size"] for g in model.options["position_grid"]]
    chosen = source.verification_images(tuple(side), options.max_verify_images)
    images, aspects = preprocessing.verification_images(chosen.images)
    feeds = [shipped.inputs(image) for image in images]
    batch = {k: np.concatenate([f[k] for f in feeds]) for k in naflex_files.INPUTS}
    call = tf.function(lambda x: model(x, training=False))
    reference = call(batch).numpy()
    truth = chosen.truth if plan.kind.LABELLED else None
    named = {plan.output: reference}
    latency = median_ms(lambda: call(feeds[0]).numpy(), options.latency_runs, options.latency_warmup)
    keras_row = {"threads": "tf-default", "latency_ms": latency, **plan.kind.keras_fields(named, truth, source)}
    note = plan.kind.NO_ACCURACY.get(chosen.origin) if plan.kind.LABELLED else None
    return types.SimpleNamespace(feeds=feeds, aspects=np.asarray(aspects), reference=reference, truth=truth,
                                 keras=keras_row, set_name=chosen.name, note=note, images=images)  # fmt: skip


def _app_tflite(plan, v, staging, options):
    """Writes naflex_preprocessing.tflite and runs it on every verification image: its feeds, and whether they equal
    the shipped numpy preprocessing's bitwise."""
    data = tflite_preprocessing.flatbuffer(preprocessing.settings(plan.model))
    commit.write_staged(staging / tflite_preprocessing.NAME, data)
    runner = tflite_preprocessing.Runner(data, options.num_threads)
    feeds = [runner.inputs(image) for image in v.images]
    differing = sum(int((f[k] != s[k]).sum()) for f, s in zip(feeds, v.feeds) for k in naflex_files.INPUTS)
    latency = median_ms(lambda: runner.inputs(v.images[0]), options.latency_runs, options.latency_warmup)
    sizes = sorted({image.shape[:2] for image in v.images})
    return types.SimpleNamespace(feeds=feeds, differing=differing, bytes=len(data), latency_ms=latency,
                                 non_builtin_ops=non_builtin_ops(read_ops(data)),
                                 sizes=[list(s) for s in sizes])  # fmt: skip


def _fed_by_app(plan, v, runner, budget):
    """The .tflite file run on naflex_preprocessing.tflite's feeds and judged against Keras: (lines, failures)."""
    app = v.app
    outputs = np.concatenate([runner.run(feed) for feed in app.feeds])
    found = plan.kind.figures({plan.output: outputs}, {plan.output: v.reference}, v.truth)
    failures = [f"fed by {tflite_preprocessing.NAME}: {f}" for f in plan.kind.check_budget(found, budget)]
    if app.differing:  # its ops need no check here: `tflite_preprocessing.flatbuffer` refuses non-builtin ones
        differ = f"{app.differing} input values differ from {preprocessing.MODULE}'s"
        failures.append(f"{tflite_preprocessing.NAME}: {differ}")
    lines = [
        f"  {tflite_preprocessing.NAME}: {app.bytes} bytes, builtin ops only, {app.latency_ms:.2f} ms per image; "
        f"its inputs vs {preprocessing.MODULE}'s on {len(app.feeds)} images (wide, tall, square): "
        + ("bitwise equal" if not app.differing else f"{app.differing} values differ"),
        f"  fed by {tflite_preprocessing.NAME}: max |diff| vs Keras {float(np.abs(outputs - v.reference).max()):.2e}",
    ]
    return lines, failures


def _judge(plan, v, runner, options, name, fmt, mode, out, size, lines, budget_key, **fields):
    """The report entry of one file: its runtime's outputs on every feed against the Keras reference (a .tflite
    file's also on naflex_preprocessing.tflite's feeds)."""
    outputs = np.concatenate([runner.run(feed) for feed in v.feeds])
    kind = plan.kind
    found = kind.figures({plan.output: outputs}, {plan.output: v.reference}, v.truth)
    budget = kind.BUDGETS.get(budget_key, kind.BUDGETS["float32"])
    failures = kind.check_budget(found, budget)
    if fmt == "tflite" and v.app is not None:
        app_lines, app_failures = _fed_by_app(plan, v, runner, budget)
        lines, failures = [*lines, *app_lines], [*failures, *app_failures]
    by_aspect = {a: float(np.abs(outputs[v.aspects == a] - v.reference[v.aspects == a]).max())
                 for a in preprocessing.ASPECTS if (v.aspects == a).any()}  # fmt: skip
    lines = [*lines, "  max |diff| by aspect: " + ", ".join(f"{a} {d:.2e}" for a, d in by_aspect.items())]
    return {
        "name": name, "format": fmt, "kind": kind.NAME, "quantization": mode, "path": files.join(out, name),
        "file_bytes": int(size), **kind.entry_figures(found, plan), "max_abs_diff_by_aspect": by_aspect,
        "latency_ms": median_ms(lambda: runner.run(v.feeds[0]), options.latency_runs, options.latency_warmup),
        "threads": runner.threads, **fields, "lines": lines, "budget": budget, "failures": failures,
        "passed": not failures,
    }  # fmt: skip


def _saved_model(plan, v, staging, out, options, mode):
    from ..runtime import dir_bytes

    path = staging / "saved_model"
    naflex_files.write_saved_model(plan.model, plan.output, path)
    runner = naflex_files.SavedModelRunner(path)
    lines = ["  serving_default(patches, mask, grid), open batch: the inputs naflex_preprocessing.py makes"]
    return _judge(plan, v, runner, options, "saved_model", "saved_model", None, out, dir_bytes(path), lines,
                  "saved_model")  # fmt: skip


def _tflite(plan, v, staging, out, options, mode):
    flatbuffer = naflex_files.tflite_bytes(plan.model, plan.output, mode)
    name = f"{plan.kind.STEM}_{mode}.tflite"
    commit.write_staged(staging / name, flatbuffer)
    ops, foreign = naflex_files.tflite_ops(flatbuffer)
    runner = naflex_files.TFLiteRunner(flatbuffer, options.num_threads)
    lines = [f"  ops ({sum(ops.values())}): {', '.join(f'{k} x{n}' for k, n in ops.items())}",
             f"  non-builtin ops: {', '.join(foreign) or 'none'}"]  # fmt: skip
    return _judge(plan, v, runner, options, name, "tflite", mode, out, len(flatbuffer), lines, mode, ops=ops,
                  non_builtin_ops=list(foreign))  # fmt: skip


def _onnx(plan, v, staging, out, options, mode):
    data = _onnx_data(plan)
    name = f"{plan.kind.STEM}.onnx"
    commit.write_staged(staging / name, data)
    runner = naflex_files.ONNXRunner(data, options.num_threads)
    lines = [f"  runtime onnxruntime {runner.version}, opset {naflex_files.OPSET}, open batch"]
    return _judge(plan, v, runner, options, name, "onnx", None, out, len(data), lines, "float32",
                  runtime_version=runner.version, opset=naflex_files.OPSET)  # fmt: skip


def _openvino(plan, v, staging, out, options, mode):
    xml, weights = naflex_files.openvino_files(_onnx_data(plan), plan.output)
    name = f"{plan.kind.STEM}.xml"
    commit.write_staged(staging / f"{plan.kind.STEM}.bin", weights)  # the weights first: no .xml without them
    commit.write_staged(staging / name, xml)
    runner = naflex_files.OpenVINORunner(xml, weights, options.num_threads)
    lines = [f"  runtime OpenVINO {runner.version} on CPU, inference precision f32"]
    return _judge(plan, v, runner, options, name, "openvino", None, out, len(xml) + len(weights), lines,
                  "float32", runtime_version=runner.version)  # fmt: skip


def _onnx_data(plan):
    """The ONNX bytes, made once per export (OpenVINO reads the same graph)."""
    if not hasattr(plan, "onnx"):
        settings = preprocessing.settings_json(plan.model)
        plan.onnx = naflex_files.onnx_bytes(plan.model, plan.output, {"naflex_preprocessing": settings})
    return plan.onnx


def _app_summary(app):
    return {"file_bytes": app.bytes, "latency_ms": app.latency_ms, "image_sizes": app.sizes,
            "differing_input_values": app.differing, "non_builtin_ops": app.non_builtin_ops}  # fmt: skip


_ENTRIES = {"saved_model": _saved_model, "tflite": _tflite, "onnx": _onnx, "openvino": _openvino}


def _report(plan, source, v, artifacts, out, options):
    options_words = plan.model.options
    return {
        "source": str(source.name) if source.name else type(plan.model).__name__,
        "out": str(out),
        "kind": plan.kind.NAME,
        "model": {
            "naflex": {k: options_words[k] for k in ("max_num_patches", "patch_size", "position_grid")},
            **plan.kind.describe_model(plan),
        },
        **({"labels": plan.labels, "tflite_output": plan.output} if plan.labels is not None else {}),
        "preprocessing": [
            preprocessing.MODULE,
            preprocessing.SETTINGS,
            *([tflite_preprocessing.NAME] if v.app is not None else []),
        ],
        **({"preprocessing_tflite": _app_summary(v.app)} if v.app is not None else {}),
        "verification": {
            "set": v.set_name + ", cut wide, tall and square in turn",
            "images": len(v.feeds),
            "labelled": v.truth is not None,
        },
        "latency_runs": options.latency_runs,
        "latency_warmup": options.latency_warmup,
        "keras": v.keras,
        "artifacts": artifacts,
        "notes": [
            f"NaFlex inputs: an app makes them with {preprocessing.MODULE} (inputs(image) for any uint8 RGB image; "
            f"settings in {preprocessing.SETTINGS}); every file was fed what it made",
            *(
                [
                    f"On a phone: {tflite_preprocessing.NAME} (one uint8 (1, H, W, 3) image, any H and W) makes the "
                    f"three inputs, then the model's .tflite runs on them"
                ]
                if v.app is not None
                else []
            ),
            *([v.note] if v.note else []),
        ],
        "passed": all(a["passed"] for a in artifacts),
    }
