"""The TFLite (LiteRT) format: `<stem>_<mode>.tflite` and its `.json` sidecar per mode, run by LiteRT's interpreter
and judged against Keras; every file's ops are read back (non-builtin ones fail it), and a single-output file is
also fed as an app feeds it and run on LiteRT's GPU accelerator (export/gpu.py).

What differs by kind is how the file is built (its outputs and metadata) and described: a classifier's carries
its labels and MediaPipe's classifier metadata (export/tflite.py), an embedder's the ImageEmbedder metadata
(export/embedder.py), feature maps none, their outputs named by the file's signature (export/feature_maps.py).
"""

import numpy as np

from keras_vit import files

from .. import commit, embedder, feature_maps, gpu, runtime, tflite
from .. import feature_maps_artifacts as artifacts
from ..entry import record
from ..flatbuffer import non_builtin_ops, read_ops
from ..metadata import read_metadata
from ..runners import TFLiteRunner

NAME = "tflite"
OWNED = (r"{stem}_[A-Za-z0-9_]+\.(tflite|json)",)  # the names it writes at the top of `out` (regular expressions)
SUFFIXES = (".tflite",)  # the files `load_runner` opens with it


def open(path, num_threads=1):
    """The runner of a written file (`load_runner`): its sidecar, else its metadata, says what it holds."""
    return TFLiteRunner(path=path, num_threads=num_threads)


def modes(plan):
    return plan.modes


def entry(plan, mode, v, staging, out, options):
    """Converts `plan.model` in `mode`, stages the file and its sidecar, reloads and judges it; its report entry."""
    kind = plan.kind
    build, describe, judge = _BY_KIND[kind.NAME]
    name = f"{kind.STEM}_{mode}.tflite"
    with runtime.printed(options.converter_output) as output:
        flatbuffer = build(plan, mode, options)
    commit.write_staged(staging / name, flatbuffer)
    runner = TFLiteRunner(flatbuffer, num_threads=options.num_threads, by_signature=kind.NAME == "feature_maps")
    info = describe(plan, flatbuffer, runner, mode, options)
    commit.write_staged((staging / name).with_suffix(".json"), files.json_bytes(info))
    budget, ops = kind.BUDGETS[mode], read_ops(flatbuffer)
    found, failures, fields = judge(plan, v, runner, info, staging / name, budget, options)
    failures += [f"non-builtin ops {non_builtin_ops(ops)}"] if non_builtin_ops(ops) else []
    fields.update(ops=ops, non_builtin_ops=non_builtin_ops(ops), converter_output=output[0].splitlines())
    return record(plan, v, options, name, NAME, mode, out, len(flatbuffer), found, runner, budget, failures,
                  **fields)  # fmt: skip


def _on_gpu(plan, v, runner, path, budget, options):
    return gpu.check_artifact(path, runner, v.pixels, v.reference, v.truth, plan.kind, budget, options.gpu_check)


# ---- a classifier: probabilities (or logits) with its labels and MediaPipe's classifier metadata


def _classifier_file(plan, mode, options):
    metadata = {"name": plan.source.metadata_name or f"keras-vit {plan.model.name}", **(options.metadata or {})}
    return tflite.convert(plan.model, mode, plan.source.representative_images, options.dynamic_batch,
                          options.int8_io, output=options.tflite_output, labels=plan.labels,
                          metadata=metadata)  # fmt: skip


def _classifier_sidecar(plan, flatbuffer, runner, mode, options):
    return tflite.sidecar(plan.model, plan.labels, flatbuffer, mode, options.dynamic_batch, options.int8_io,
                          options.tflite_output)  # fmt: skip


def _classifier_judged(plan, v, runner, info, path, budget, options):
    kind = plan.kind
    # Budgets hold both ways: as an app runs the model (the figures reported) and with the project's own
    # preprocessing (float (x - 127.5) / 127.5, quantized here for a uint8 input).
    app = kind.figures(runner.outputs_from_pixels(v.pixels), v.reference, v.truth)
    project = kind.figures(runner.outputs(v.x), v.reference, v.truth)
    on_gpu = _on_gpu(plan, v, runner, path, budget, options)
    failures = [
        *kind.check_budget(app, budget),
        *(f"project preprocessing: {f}" for f in kind.check_budget(project, budget)),
        *on_gpu["failures"],
    ]
    fields = {"fed_as": _fed_as(np.dtype(runner.input["dtype"])), "project_preprocessing": project,
              # The metadata as read back from the file; its labels are the report's own, so not repeated.
              "metadata": {k: val for k, val in runner.metadata.items() if k != "labels"}, "gpu": on_gpu,
              "io": {"input": info["input"], "output": info["output"]}}  # fmt: skip
    return app, failures, fields


def _fed_as(dtype):
    if dtype == np.uint8:
        return "raw uint8 pixels"
    return "float32 pixels normalised as MediaPipe does: x * (2 / 255) - 1" + (
        "" if dtype == np.float32 else f", quantized to {dtype.name}"
    )


# ---- an image embedder: its vector, with MediaPipe's ImageEmbedder metadata


def _embedder_file(plan, mode, options):
    metadata = {**({"name": plan.source.metadata_name} if plan.source.metadata_name else {}),
                **(options.metadata or {})}  # fmt: skip
    return embedder.convert(plan.model, mode, plan.source.representative_images, plan.l2_normalize, metadata)


def _embedder_sidecar(plan, flatbuffer, runner, mode, options):
    return embedder.sidecar(plan.model, flatbuffer, mode, plan.l2_normalize)


def _embedder_judged(plan, v, runner, info, path, budget, options):
    found = plan.kind.figures(runner.outputs_from_pixels(v.pixels), v.reference)
    on_gpu = _on_gpu(plan, v, runner, path, budget, options)
    failures = plan.kind.check_budget(found, budget) + on_gpu["failures"]
    return found, failures, {"metadata": read_metadata(runner.flatbuffer), "gpu": on_gpu}


# ---- feature maps: every output by name, no metadata (no MediaPipe task reads them)


def _feature_maps_file(plan, mode, options):
    return artifacts.convert(plan.model, mode, plan.source.representative_images, options.dynamic_batch)


def _feature_maps_sidecar(plan, flatbuffer, runner, mode, options):
    return feature_maps.sidecar(plan.model, runner, mode)


def _feature_maps_judged(plan, v, runner, info, path, budget, options):
    found = plan.kind.figures(runner.outputs(v.x), v.reference)
    return found, plan.kind.check_budget(found, budget), {"io": info["outputs"]}


# What differs by kind: the file, its sidecar, the checks beyond the shared ones.
_BY_KIND = {
    "classifier": (_classifier_file, _classifier_sidecar, _classifier_judged),
    "embedder": (_embedder_file, _embedder_sidecar, _embedder_judged),
    "feature_maps": (_feature_maps_file, _feature_maps_sidecar, _feature_maps_judged),
}
KINDS = tuple(_BY_KIND)  # the kinds of model it writes
