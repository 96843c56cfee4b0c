"""Feature maps on export: a `keras_vit.feature_model` (chosen blocks' outputs, one or many) to SavedModel and TFLite.

`export.export_model` hands a feature model here. It writes `saved_model/` (signatures `serving_default` for raw
uint8 images and `model_space`, each returning every output by name) and `feature_maps_<mode>.tflite` with its
`.json` sidecar (the outputs' names, what each holds, and where TFLite put it), for the LiteRT interpreter or
CompiledModel: no TFLite metadata, since MediaPipe Tasks have no task that reads feature maps. Every file is
reloaded by the runtime that will run it and each named output compared with the Keras model's output of that name
on the same images (`BUDGETS`); the export directory is then committed as a whole, as every export is.
A model whose one output is a pooled vector (`num_classes=0`) is an image embedder (export/embedder.py) instead.
"""

from keras_vit import files

from . import commit, preprocessing, runtime
from . import feature_maps_artifacts as artifacts
from .errors import ExportError
from .flatbuffer import non_builtin_ops, read_ops
from .kinds import feature_maps as kind
from .kinds.feature_maps import BUDGETS, MODES, REFUSED, is_feature_maps
from .report import publish
from .runners import KerasRunner, SavedModelRunner, TFLiteRunner

__all__ = ["BUDGETS", "MODES", "REFUSED", "export_feature_maps", "is_feature_maps", "sidecar", "tflite_modes"]


def tflite_modes(options, has_representative):
    """The TFLite modes to convert and the notes on what was left out.

    Raises:
        ExportError: a mode that feature maps are not exported in, named with the reason and what to use.
    """
    if options.quantize is not None:
        for mode in options.quantize:
            if mode not in MODES:
                raise ExportError(
                    f"Feature maps export as TFLite {', '.join(MODES)}; {mode} is not offered: {REFUSED[mode]} "
                    "(e.g. --quantize float32,dynamic_int8)."
                )
    modes, note = options.modes(has_representative)
    notes = [note] if note else []
    left_out = [m for m in modes if m not in MODES]
    notes += [f"{m} not written for feature maps: {REFUSED[m]}" for m in left_out]
    return tuple(m for m in modes if m in MODES), notes


def _check(model, options):
    """The notes on the formats not written; raises for a request that cannot be met."""
    if any(d is None for d in model.input_shape[1:]):
        raise ExportError(
            f"Feature maps export at one image size; this feature model's input is {model.input_shape} "
            "(dynamic_image_size=True). Build it from the fixed-size model: keras_vit.feature_model("
            "keras_vit.models.vision_transformer.fixed_size_model(model), ...)."
        )
    if not {"saved_model", "tflite"} & set(options.formats):
        raise ExportError(
            "A feature-map model exports as saved_model and tflite only; --formats asks for "
            f"{','.join(options.formats)}. Pass --formats saved_model,tflite."
        )
    if options.gpu_check == "require":
        raise ExportError(
            "--gpu-check require checks single-output classifier and embedder files; feature-map files are not run "
            "on the GPU check. Pass --gpu-check auto or off."
        )
    others = [f for f in options.formats if f not in ("saved_model", "tflite")]
    notes = [f"{', '.join(others)} not written: a feature-map model exports as saved_model and tflite"] * bool(others)
    if "tflite" in options.formats and options.gpu_check == "auto":
        notes.append("GPU check not run: it checks single-output files")
    return notes


def export_feature_maps(source, out, options):
    """`export_model` for a feature model (`is_feature_maps`): `saved_model/` and `feature_maps_<mode>.tflite` +
    `.json` per mode, each output verified by name against the Keras model on the held-out images, else the
    representative ones, else seeded random images; committed as a whole. Returns the report (also report.json).

    Raises:
        ExportError: a request feature maps cannot meet (before anything is written). VerificationError: a file
            missed its budget; `out` is left as it was.
    """
    model = source.model
    notes = _check(model, options)
    modes, mode_notes = tflite_modes(options, source.has_representative)
    verification = source.verification_images(runtime.image_size(model), options.max_verify_images)
    images, set_name = verification.images, verification.name
    x = preprocessing.to_model_space(images, runtime.image_size(model))
    keras_runner = KerasRunner(model)
    reference = keras_runner.outputs(x)
    latency = keras_runner.latency_ms(x[:1], options.latency_runs, options.latency_warmup)
    keras_row = {"threads": keras_runner.threads, "latency_ms": latency}
    with commit.staged(out) as (target, staging):
        entries = _saved_model_entry(model, images, x, reference, staging, out, options)
        entries += [_tflite_entry(model, mode, source, x, reference, staging, out, options) for mode in modes]
        report = {
            "source": str(source.name) if source.name else type(model).__name__,
            "out": str(out),
            "kind": "feature_maps",
            "model": {
                "image_size": list(runtime.image_size(model)),
                "parameters": int(model.count_params()),
                "outputs": kind.describe_outputs(model),
            },
            "verification": {"set": set_name, "images": len(x), "labelled": False},
            "latency_runs": options.latency_runs,
            "latency_warmup": options.latency_warmup,
            "keras": keras_row,
            "artifacts": entries,
            "notes": [*notes, *mode_notes],
            "passed": all(a["passed"] for a in entries),
        }
        return publish(report, staging, target, out)


def _entry(name, fmt, mode, out, size, outputs, latency, threads, budget, failures, **fields):
    return {"name": name, "format": fmt, "kind": "feature_maps", "quantization": mode, "path": files.join(out, name),
            "file_bytes": int(size), **kind.summary(outputs), "outputs": outputs, "latency_ms": latency,
            "threads": threads, **fields, "budget": budget, "failures": list(failures),
            "passed": not failures}  # fmt: skip


def _saved_model_entry(model, images, x, reference, staging, out, options):
    if "saved_model" not in options.formats:
        return []
    path = artifacts.save_saved_model(model, staging / "saved_model")
    commit.fault_point("saved_model staged")
    runner = SavedModelRunner(path)
    budget = BUDGETS["saved_model"]
    figures = kind.figures(runner.outputs(x), reference)
    # The signature users call with raw pixels: resize and scaling inside the graph, the same outputs by name.
    served = kind.figures(runner.outputs_from_images(images), reference)
    failures = kind.check_budget(figures, budget)
    failures += [f"serving_default: {f}" for f in kind.check_budget(served, budget)]
    size = runtime.dir_bytes(path)
    latency = runner.latency_ms(x[:1], options.latency_runs, options.latency_warmup)
    return [_entry("saved_model", "saved_model", None, out, size, figures, latency, runner.threads, budget, failures,
                   serving_default=served, signatures=[artifacts.SIGNATURE, artifacts.MODEL_SPACE])]  # fmt: skip


def _tflite_entry(model, mode, source, x, reference, staging, out, options):
    with runtime.printed(options.converter_output) as printed:
        flatbuffer = artifacts.convert(model, mode, source.representative_images, options.dynamic_batch)
    name = f"feature_maps_{mode}.tflite"
    commit.write_staged(staging / name, flatbuffer)
    runner = TFLiteRunner(flatbuffer, num_threads=options.num_threads, by_signature=True)
    info = sidecar(model, runner, mode)
    commit.write_staged((staging / name).with_suffix(".json"), files.json_bytes(info))
    budget, ops = BUDGETS[mode], read_ops(flatbuffer)
    figures = kind.figures(runner.outputs(x), reference)
    failures = kind.check_budget(figures, budget)
    failures += [f"non-builtin ops {non_builtin_ops(ops)}"] if non_builtin_ops(ops) else []
    latency = runner.latency_ms(x[:1], options.latency_runs, options.latency_warmup)
    return _entry(name, "tflite", mode, out, len(flatbuffer), figures, latency, runner.threads, budget, failures,
                  ops=ops, non_builtin_ops=non_builtin_ops(ops), io=info["outputs"],
                  converter_output=printed[0].splitlines())  # fmt: skip


def sidecar(model, runner, mode):
    """The `.json` beside a feature-map `.tflite`: preprocessing, the input, and each output in the model's order
    with what it holds and where TFLite put it (its signature name is the key to read it by)."""
    described, positions = kind.describe_outputs(model), runner.positions()
    outputs = [
        {"name": name, "meaning": described[name], "shape": [int(d) for d in detail["shape_signature"]],
         "tensor": detail["name"], "tensor_index": int(detail["index"]), "subgraph_output": positions[name]}
        for name, detail in ((n, runner.output_details[n]) for n in kind.output_names(model))
    ]  # fmt: skip
    return {
        "format": "tflite",
        "kind": "feature_maps",
        "quantization": mode,
        "dynamic_batch": runner.dynamic_batch,
        "signature": artifacts.SIGNATURE,
        "preprocessing": preprocessing.describe(runtime.image_size(model)),
        "input": {
            "name": artifacts.INPUT,
            "dtype": "float32",
            "shape": [int(d) for d in runner.input["shape_signature"]],
        },
        "outputs": outputs,
    }
