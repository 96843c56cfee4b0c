"""The `.json` sidecar beside each `.tflite` file: the export's description as that file holds it."""

import numpy as np

from ..description import INPUT, SIGNATURE


def sidecar(description, runner, mode, options):
    """The `.json` beside a `.tflite` file: `description` (export/description.py) as this file holds it, with what
    the file says of its own tensors (`runner`, the file opened in LiteRT) and of its mode.

    Its form follows the description's outputs: scores with labels name the labels and the output's quantization,
    one vector its size and normalisation, several outputs where TFLite put each one.
    """
    d = description
    form = _scores if d.labels is not None else _vector if len(d.outputs) == 1 else _named
    return {"format": "tflite", "kind": d.kind, **form(d, runner, mode, options)}


def _tensor(detail):
    """A tensor as the sidecar states it: name, dtype, shape (-1 for an open dimension), quantization."""
    scale, zero_point = detail["quantization"]
    return {"name": detail["name"], "dtype": np.dtype(detail["dtype"]).name, "shape": _ints(detail["shape_signature"]),
            "quantization": {"scale": float(scale), "zero_point": int(zero_point)} if scale else None}  # fmt: skip


def _ints(shape):
    return [int(d) for d in shape]


def _scores(d, runner, mode, options):
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


def _vector(d, runner, mode, options):
    (out,) = d.outputs
    return {
        "quantization": mode,
        "dimensions": d.dimensions,
        "l2_normalized": d.l2_normalized,
        "preprocessing": d.preprocessing,
        "input": {"dtype": np.dtype(runner.input["dtype"]).name, "shape": _ints(runner.input["shape"])},
        "output": {"name": out.name, "meaning": out.meaning, "shape": _ints(runner.output_details[out.name]["shape"])},
        "metadata": runner.metadata is not None,
    }


def _named(d, runner, mode, options):
    """Each output in the model's order with what it holds and where TFLite put it (its signature name is the key
    to read it by)."""
    positions = runner.positions()
    outputs = [
        {"name": o.name, "meaning": o.meaning, "shape": _ints(detail["shape_signature"]), "tensor": detail["name"],
         "tensor_index": int(detail["index"]), "subgraph_output": positions[o.name]}
        for o, detail in ((o, runner.output_details[o.name]) for o in d.outputs)
    ]  # fmt: skip
    return {
        "quantization": mode,
        "dynamic_batch": runner.dynamic_batch,
        "signature": SIGNATURE,
        "preprocessing": d.preprocessing,
        "input": {"name": INPUT, "dtype": d.dtype, "shape": _ints(runner.input["shape_signature"])},
        "outputs": outputs,
    }
