"""The TFLite (LiteRT) format: `<stem>_<mode>.tflite` and its `.json` sidecar per mode, converted, reopened with
LiteRT, judged against Keras (a one-output file also fed as an app feeds it and run on the GPU), and its table lines."""

import numpy as np

from keras_vit import files

from .. import commit, runtime
from ..runtime import record
from . import converter, gpu
from . import metadata as tflite_metadata
from .flatbuffer import non_builtin_ops, read_ops
from .runner import TFLiteRunner
from .sidecar import sidecar

NAME = "tflite"
KINDS = ("classifier", "embedder", "feature_maps")  # the kinds of model it writes
OWNED = (r"{stem}_[A-Za-z0-9_]+\.(tflite|json)",)  # the names it writes at the top of `out` (regular expressions)
SUFFIXES = (".tflite",)  # the files `load_runner` opens with it


def open(path, num_threads=1):
    """The runner of a written file (`load_runner`): its sidecar, else its metadata, says what it holds."""
    return TFLiteRunner(path=path, num_threads=num_threads)


def modes(plan):
    return plan.modes


def entry(plan, mode, v, staging, out, options):
    """Converts `plan.model` in `mode`, stages the file and its sidecar, reloads and judges it; its report entry."""
    kind, d = plan.kind, plan.description
    name = f"{kind.STEM}_{mode}.tflite"
    with runtime.printed(options.converter_output) as output:
        built = converter.convert_described(plan.model, d, mode, plan.source.representative_images,
                                  options.dynamic_batch and kind.OPEN_BATCH,
                                  options.int8_io if kind.INTEGER_IO else "float32")  # fmt: skip
        flatbuffer = tflite_metadata.attach(built, d, mode)
    commit.write_staged(staging / name, flatbuffer)
    runner = TFLiteRunner(flatbuffer, num_threads=options.num_threads, by_signature=len(d.outputs) > 1)
    info = sidecar(d, runner, mode, options)
    commit.write_staged((staging / name).with_suffix(".json"), files.json_bytes(info))
    budget, ops = kind.BUDGETS[mode], read_ops(flatbuffer)
    if len(d.outputs) > 1:  # judged once, on model-space input: the app feeding and the GPU run read one output
        found = kind.figures(runner.outputs(v.x), v.reference)
        failures, fields = kind.check_budget(found, budget), {"io": info["outputs"]}
    else:
        found, failures, fields = _one_output(plan, v, runner, info, staging / name, budget, options)
    failures += [f"non-builtin ops {non_builtin_ops(ops)}"] if non_builtin_ops(ops) else []
    fields.update(ops=ops, non_builtin_ops=non_builtin_ops(ops), converter_output=output[0].splitlines())
    return record(plan, v, options, name, NAME, mode, out, len(flatbuffer), found, runner, budget, failures,
                  **fields)  # fmt: skip


def _one_output(plan, v, runner, info, path, budget, options):
    """A one-output file judged by its kind's figures and budget both ways, as an app runs it (the figures
    reported) and with the project's own preprocessing, and on the GPU (export/tflite/gpu.py)."""
    kind = plan.kind
    app = kind.figures(runner.outputs_from_pixels(v.pixels), v.reference, v.truth)
    project = kind.figures(runner.outputs(v.x), v.reference, v.truth)
    failures = [
        *kind.check_budget(app, budget),
        *(f"project preprocessing: {f}" for f in kind.check_budget(project, budget)),
    ]
    fields = {"fed_as": _fed_as(np.dtype(runner.input["dtype"])), "project_preprocessing": project}
    on_gpu = gpu.check_artifact(path, runner, v.pixels, v.reference, v.truth, kind, budget, options.gpu_check)
    if plan.labels is None:
        fields.update(metadata=runner.metadata, gpu=on_gpu)
    else:  # the metadata as read back from the file; its labels are the report's own, so not repeated
        fields.update(metadata={k: val for k, val in runner.metadata.items() if k != "labels"}, gpu=on_gpu,
                      io={"input": info["input"], "output": info["output"]})  # fmt: skip
    return app, failures + on_gpu["failures"], fields


def _fed_as(dtype):
    if dtype == np.uint8:
        return "raw uint8 pixels"
    return "float32 pixels normalised as MediaPipe does: x * (2 / 255) - 1" + (
        "" if dtype == np.float32 else f", quantized to {dtype.name}"
    )


def lines(a, kind):
    """A TFLite entry's lines in the export table, below its budget line (`kind` words its figures)."""
    out = []
    if "project_preprocessing" in a:
        out.append(f"  fed as an app feeds it ({a['fed_as']}): figures above; with the project's preprocessing: "
                   f"{kind.words(a['project_preprocessing'])}")  # fmt: skip
    if "metadata" in a:
        out.append(_metadata_line(a["metadata"]))
    out.append(f"  ops ({sum(a['ops'].values())}): {', '.join(f'{k} x{n}' for k, n in a['ops'].items())}")
    out.append(f"  non-builtin ops: {', '.join(a['non_builtin_ops']) or 'none'}")
    if "gpu" in a:
        out.append(gpu.describe(a["gpu"]))
    return out


def _metadata_line(meta):
    if not meta:
        return "  metadata: none"
    labels = meta["output"]["labels_file"]
    return (f"  metadata: {meta['name']!r} v{meta['version']}, input normalisation mean {meta['input']['mean']} "
            f"std {meta['input']['std']}, output {meta['output']['name']}"
            + (f", labels in {labels}" if labels else ""))  # fmt: skip
