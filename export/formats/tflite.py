"""The TFLite (LiteRT) format: `<stem>_<mode>.tflite` and its `.json` sidecar per mode, run by LiteRT's interpreter
and judged against Keras; every file's ops are read back (non-builtin ones fail it), and a single-output file (a
classifier's, an embedder's) is judged both fed as an app feeds it and with the project's preprocessing, each held
to the kind's budget, and run on LiteRT's GPU accelerator (export/gpu.py).

What a file holds is the export's one description (`plan.description`, export/description.py), rendered twice per
file: as the TFLite metadata MediaPipe reads (export/metadata.py: a classifier's with its labels, an embedder's
feature vector, none for feature maps) and as the `.json` sidecar (`sidecar`, here). What differs by kind beyond that
is how the file is converted (export/tflite.py, export/embedder.py, export/feature_maps_artifacts.py) and the
checks beyond the shared ones.
"""

import numpy as np

from keras_vit import files

from .. import commit, embedder, gpu, runtime, tflite
from .. import feature_maps_artifacts as artifacts
from .. import metadata as tflite_metadata
from ..description import INPUT
from ..entry import record
from ..flatbuffer import non_builtin_ops, read_ops
from ..runners import SIGNATURE, TFLiteRunner

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
    build, judge = _BY_KIND[kind.NAME]
    name = f"{kind.STEM}_{mode}.tflite"
    with runtime.printed(options.converter_output) as output:
        flatbuffer = tflite_metadata.attach(build(plan, mode, options), plan.description, mode)
    commit.write_staged(staging / name, flatbuffer)
    runner = TFLiteRunner(flatbuffer, num_threads=options.num_threads, by_signature=kind.NAME == "feature_maps")
    info = sidecar(plan.description, runner, mode, options)
    commit.write_staged((staging / name).with_suffix(".json"), files.json_bytes(info))
    budget, ops = kind.BUDGETS[mode], read_ops(flatbuffer)
    found, failures, fields = judge(plan, v, runner, info, staging / name, budget, options)
    failures += [f"non-builtin ops {non_builtin_ops(ops)}"] if non_builtin_ops(ops) else []
    fields.update(ops=ops, non_builtin_ops=non_builtin_ops(ops), converter_output=output[0].splitlines())
    return record(plan, v, options, name, NAME, mode, out, len(flatbuffer), found, runner, budget, failures,
                  **fields)  # fmt: skip


def _on_gpu(plan, v, runner, path, budget, options):
    return gpu.check_artifact(path, runner, v.pixels, v.reference, v.truth, plan.kind, budget, options.gpu_check)


def _fed_both_ways(plan, v, runner, budget):
    """A single-output file judged by its kind's figures and budget both ways: as an app runs it (the figures
    reported) and with the project's own preprocessing (float (x - 127.5) / 127.5, quantized here for a uint8 or
    int16 input). Returns (the app's figures, the misses of both, the entry's fields: how it was fed, the project's
    figures)."""
    kind = plan.kind
    app = kind.figures(runner.outputs_from_pixels(v.pixels), v.reference, v.truth)
    project = kind.figures(runner.outputs(v.x), v.reference, v.truth)
    failures = [
        *kind.check_budget(app, budget),
        *(f"project preprocessing: {f}" for f in kind.check_budget(project, budget)),
    ]
    return app, failures, {"fed_as": _fed_as(np.dtype(runner.input["dtype"])), "project_preprocessing": project}


def sidecar(description, runner, mode, options):
    """The `.json` beside a `.tflite` file: `description` (export/description.py) as this file holds it, with what
    the file says of its own tensors (`runner`, the file opened in LiteRT) and of its mode.

    Its form is the kind's (a classifier's names its labels and its one output's quantization, an embedder's the
    vector's size and normalisation, feature maps' where TFLite put each named output); every one states the
    format, the mode, the preprocessing and the input.
    """
    return {"format": NAME, **_SIDECARS[description.kind](description, runner, mode, options)}


def _tensor(detail):
    """A tensor as the sidecar states it: name, dtype, shape (-1 for an open dimension), quantization."""
    scale, zero_point = detail["quantization"]
    return {"name": detail["name"], "dtype": np.dtype(detail["dtype"]).name, "shape": _ints(detail["shape_signature"]),
            "quantization": {"scale": float(scale), "zero_point": int(zero_point)} if scale else None}  # fmt: skip


def _ints(shape):
    return [int(d) for d in shape]


def _classifier_sidecar(d, runner, mode, options):
    # No "kind": a classifier's sidecar was written before kinds were named.
    output = dict(_tensor(runner.output_details[runner.output_kind]), meaning=d.tflite_output)
    return {
        "quantization": mode,
        "int8_io": options.int8_io if mode == "int8" else None,
        "dynamic_batch": bool(options.dynamic_batch),
        "labels": list(d.labels),
        "preprocessing": d.preprocessing,
        "input": _tensor(runner.input),
        "output": output,
        "metadata": runner.metadata is not None,
    }


def _embedder_sidecar(d, runner, mode, options):
    (out,) = d.outputs
    return {
        "kind": d.kind,
        "quantization": mode,
        "dimensions": d.dimensions,
        "l2_normalized": d.l2_normalized,
        "preprocessing": d.preprocessing,
        "input": {"dtype": np.dtype(runner.input["dtype"]).name, "shape": _ints(runner.input["shape"])},
        "output": {"name": out.name, "meaning": out.meaning, "shape": _ints(runner.output_details[out.name]["shape"])},
        "metadata": runner.metadata is not None,
    }


def _feature_maps_sidecar(d, runner, mode, options):
    """Each output in the model's order with what it holds and where TFLite put it (its signature name is the key
    to read it by)."""
    positions = runner.positions()
    outputs = [
        {"name": o.name, "meaning": o.meaning, "shape": _ints(detail["shape_signature"]), "tensor": detail["name"],
         "tensor_index": int(detail["index"]), "subgraph_output": positions[o.name]}
        for o, detail in ((o, runner.output_details[o.name]) for o in d.outputs)
    ]  # fmt: skip
    return {
        "kind": d.kind,
        "quantization": mode,
        "dynamic_batch": runner.dynamic_batch,
        "signature": SIGNATURE,
        "preprocessing": d.preprocessing,
        "input": {"name": INPUT, "dtype": d.dtype, "shape": _ints(runner.input["shape_signature"])},
        "outputs": outputs,
    }


_SIDECARS = {"classifier": _classifier_sidecar, "embedder": _embedder_sidecar, "feature_maps": _feature_maps_sidecar}


# ---- a classifier: probabilities (or logits) with its labels and MediaPipe's classifier metadata


def _classifier_file(plan, mode, options):
    return tflite.convert(plan.model, mode, plan.source.representative_images, options.dynamic_batch,
                          options.int8_io, output=options.tflite_output, labels=plan.labels,
                          metadata=False)  # fmt: skip


def _classifier_judged(plan, v, runner, info, path, budget, options):
    app, failures, fields = _fed_both_ways(plan, v, runner, budget)
    on_gpu = _on_gpu(plan, v, runner, path, budget, options)
    # The metadata as read back from the file; its labels are the report's own, so not repeated.
    fields.update(metadata={k: val for k, val in runner.metadata.items() if k != "labels"}, gpu=on_gpu,
                  io={"input": info["input"], "output": info["output"]})  # fmt: skip
    return app, failures + on_gpu["failures"], fields


def _fed_as(dtype):
    if dtype == np.uint8:
        return "raw uint8 pixels"
    return "float32 pixels normalised as MediaPipe does: x * (2 / 255) - 1" + (
        "" if dtype == np.float32 else f", quantized to {dtype.name}"
    )


# ---- an image embedder: its vector, with MediaPipe's ImageEmbedder metadata


def _embedder_file(plan, mode, options):
    return embedder.convert(plan.model, mode, plan.source.representative_images, plan.l2_normalize, metadata=False)


def _embedder_judged(plan, v, runner, info, path, budget, options):
    app, failures, fields = _fed_both_ways(plan, v, runner, budget)
    on_gpu = _on_gpu(plan, v, runner, path, budget, options)
    fields.update(metadata=runner.metadata, gpu=on_gpu)
    return app, failures + on_gpu["failures"], fields


# ---- feature maps: every output by name, no metadata (no MediaPipe task reads them); judged once, on model-space
# input: the app feeding and the GPU run read one output, and these files have several (left out by design)


def _feature_maps_file(plan, mode, options):
    return artifacts.convert(plan.model, mode, plan.source.representative_images, options.dynamic_batch)


def _feature_maps_judged(plan, v, runner, info, path, budget, options):
    found = plan.kind.figures(runner.outputs(v.x), v.reference)
    return found, plan.kind.check_budget(found, budget), {"io": info["outputs"]}


# What differs by kind: the file's conversion, the checks beyond the shared ones.
_BY_KIND = {
    "classifier": (_classifier_file, _classifier_judged),
    "embedder": (_embedder_file, _embedder_judged),
    "feature_maps": (_feature_maps_file, _feature_maps_judged),
}
KINDS = tuple(_BY_KIND)  # the kinds of model it writes
