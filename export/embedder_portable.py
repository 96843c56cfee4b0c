"""ONNX and OpenVINO image embedders: a head-less model (`num_classes=0`, its vector the pooled features or the
`pre_logits` layer) as `embedder.onnx` and `embedder.xml` + `embedder.bin`.

The conversion is the classifiers' (export/onnx.py, export/openvino.py: Keras' own `model.export`); the output is
named `embedding`, and the file's output document (ONNX `metadata_props` `keras_vit.output`, OpenVINO rt_info
`keras_vit/output`) says it is a feature vector: `"meaning": "embedding"`, its `dimensions`, `l2_normalized`, float32;
there are no labels. Each file is run by its own runtime (onnxruntime; OpenVINO with the float32 precision hint)
and compared with the Keras features: every image's cosine similarity and norm, held to the float32 TFLite
embedder's budget (`embedder.BUDGETS["float32"]`), at batches 1 and 3 (the batch stays open) and, for a model
built with `dynamic_image_size=True`, at a second image size.
"""

from . import interchange, portable
from .kinds import embedder as kind
from .kinds.embedder import BUDGETS, OUTPUT, check_budget, compare, expected_vectors, figures
from .onnx import inspect

NAMES = {"onnx": "embedder.onnx", "openvino": "embedder.xml"}
MODE = "float32"


def normalized_model(model):
    """`model` with its vectors L2-normalised, as a functional model over the same layers (weights shared)."""
    import keras

    inputs = keras.Input(model.input_shape[1:], name=portable.INPUT_NAME)
    return keras.Model(inputs, keras.ops.normalize(model(inputs), axis=-1, order=2), name=f"{model.name}_l2")


def write(fmt, model, description, staging, num_threads=1):
    """Converts a head-less `model` to `fmt` with `description` (export/description.py) in the file, writes it into
    `staging` and opens it; returns (name, bytes, runner)."""
    source = normalized_model(model) if description.l2_normalized else model
    return interchange.write(fmt, source, description, staging, num_threads, name=NAMES[fmt])


def artifact(fmt, model, description, staging, x, reference, num_threads=1, runs=50, warmup=5, dynamic_model=None):
    """Writes and verifies one embedder file; returns its report entry.

    `model` is what is converted (the `dynamic_image_size=True` model where there is one), `description` what the
    file holds (its vectors L2-normalised or not), `x` the model-space verification images at its `image_size` and
    `reference` the Keras features on them by name, {"embedding": vectors} (not normalised).
    """
    l2_normalize = description.l2_normalized
    name, size, runner = write(fmt, model, description, staging, num_threads)
    expected = {OUTPUT: expected_vectors(reference[OUTPUT], l2_normalize)}
    budget = BUDGETS[MODE]
    found = figures(runner.outputs(x), expected)
    entry = {"name": name, "format": fmt, "kind": "embedder", "quantization": MODE, "path": str(staging / name),
             "file_bytes": int(size), **found, "latency_ms": runner.latency_ms(x[:1], runs, warmup),
             "threads": runner.threads, "budget": budget, "failures": check_budget(found, budget),
             "dimensions": int(expected[OUTPUT].shape[-1]), "l2_normalized": bool(l2_normalize)}  # fmt: skip
    entry["input_shape"] = [n if d is None else d for n, d in zip(("batch", "height", "width", "channels"),
                                                                    runner.input_shape)]  # fmt: skip
    entry["dynamic_batch"] = _batches(runner, x, expected, budget, entry["failures"])
    entry["dynamic_image_size"] = None
    if dynamic_model is not None:
        entry["dynamic_image_size"] = _other_size(runner, x, dynamic_model, l2_normalize, budget, entry["failures"])
    entry["output_contract"] = runner.contract["output"]
    entry["contract_in_file"] = runner.contract_in_file
    entry["failures"] += _contract_failures(runner, entry)
    entry.update(_details(runner, x, expected))
    entry["passed"] = not entry["failures"]
    return entry


def _batches(runner, x, expected, budget, failures):
    runs, found = portable.batch_runs(runner, x, expected, budget, kind)
    failures += found
    if runs is None:
        return None
    return {"batches": list(portable.DYNAMIC_BATCHES), "min_cosine": min((f["min_cosine"] for f in runs), default=1.0)}


def _other_size(runner, x, dynamic_model, l2_normalize, budget, failures):
    """The first images at `portable.second_size`, against the dynamic Keras model at that size."""
    if not runner.dynamic_image_size:
        failures.append("the model was built with dynamic_image_size=True but the file's image size is fixed")
        return None
    size, bigger = portable.second_size(runner, x[: portable.DYNAMIC_SIZE_IMAGES], dynamic_model)
    expected = expected_vectors(dynamic_model(bigger, training=False), l2_normalize)
    found = compare(runner.run(bigger), expected)
    failures += [f"at {size[0]}x{size[1]}: {f}" for f in check_budget(found, budget)]
    return {"size": list(size), "images": len(bigger), "min_cosine": found["min_cosine"],
            "max_rel_norm_diff": found["max_rel_norm_diff"]}  # fmt: skip


def _contract_failures(runner, entry):
    out = runner.contract["output"] or {}
    if not runner.contract_in_file or runner.output_kind != "embedding":
        return ["the input contract and the feature-vector output document are missing from the file"]
    said = (out.get("dimensions"), out.get("l2_normalized"))
    if said != (entry["dimensions"], entry["l2_normalized"]):
        return [f"the file says {said[0]} values, l2_normalized={said[1]}; the vectors have {entry['dimensions']}, "
                f"l2_normalized={entry['l2_normalized']}"]  # fmt: skip
    return []


def _details(runner, x, expected):
    """The runtime, op set and ops; for OpenVINO also the plugin's default precision's figures (not budgeted)."""
    if runner.kind == "onnx":
        return {"runtime_version": runner.runtime_version, **inspect(runner.data)}
    default = runner.at_default_precision()
    found = figures(default.outputs(x), expected)
    return {"runtime_version": runner.runtime_version, "device": runner.device,
            "inference_precision": runner.inference_precision, "ops": runner.ops(),
            "default_precision": {"inference_precision": default.inference_precision,
                                  **{k: found[k] for k in ("min_cosine", "max_rel_norm_diff")}}}  # fmt: skip
