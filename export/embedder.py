"""Image embedders on device: a head-less model exported to TFLite as a feature vector for MediaPipe's ImageEmbedder.

A keras_vit model built with `num_classes=0` (or a pretrained one loaded without its head, whose output is the
pooled features or its `pre_logits` layer) outputs one vector per image. `python -m export` writes it as
`embedder_<mode>.tflite`: the same conversions as the classifiers (export/tflite.py), an output named `embedding`,
and TFLite metadata of the embedder form (the input normalisation, an output with FeatureProperties and a
description that states whether the vector is L2-normalised and how the model is quantised; no labels), which
MediaPipe Tasks' `ImageEmbedder` reads unchanged. Each file is verified against the Keras features by the cosine
similarity of every image's two vectors, with a budget per mode (`BUDGETS`).
"""

import numpy as np

from keras_vit import files

from . import commit, gpu, preprocessing, tflite
from . import metadata as tflite_metadata
from .errors import ExportError
from .flatbuffer import non_builtin_ops, read_ops
from .runners import KerasRunner, TFLiteRunner

OUTPUT = "embedding"
# The least cosine similarity between an image's TFLite and Keras vectors, and the largest difference of their
# norms relative to the Keras norm, over the verification set (measured margins in docs/mobile.md).
BUDGETS = {
    "float32": {"min_cosine": 0.9999, "max_rel_norm_diff": 1e-4},
    "float16": {"min_cosine": 0.999, "max_rel_norm_diff": 1e-2},
    "dynamic_int8": {"min_cosine": 0.995, "max_rel_norm_diff": 0.05},
    "int8": {"min_cosine": 0.99, "max_rel_norm_diff": 0.1},
    "int8_matmul": {"min_cosine": 0.99, "max_rel_norm_diff": 0.05},
}
QUANTIZATION_WORDS = {
    "float32": "float32 weights and activations",
    "float16": "float16 weights, float32 activations",
    "dynamic_int8": "int8 weights, float32 activations (dynamic range)",
    "int8": "int8 weights and activations (full integer, calibrated), float32 input and output",
    "int8_matmul": "calibrated int8 matmuls and convolutions, float32 LayerNorm/GELU/softmax",
}


def is_feature_model(model):
    """True for a keras_vit model without a classification head (`num_classes=0`): its output is features."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    if getattr(config, "num_classes", None) == 0:
        return True
    try:
        model.get_layer("head")
    except ValueError:
        return True
    return False


def feature_model(model):
    """The head-less copy of a keras_vit classifier: the same weights up to the pooled features (or `pre_logits`)."""
    from keras_vit.models.vision_transformer import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ExportError(f"feature_model takes a keras_vit model. Received: {type(model).__name__}.")
    headless = VisionTransformer.from_config({**model.get_config(), "num_classes": 0, "class_names": None})
    for layer in headless.layers:
        layer.set_weights(model.get_layer(layer.name).get_weights())
    return headless


def frozen_function(model, l2_normalize=False):
    """The model at batch 1, variables frozen, returning {"embedding": features} (L2-normalised if asked)."""
    import tensorflow as tf

    shape = (1, *model.input_shape[1:])

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="images")])
    def function(images):
        features = model(images, training=False)
        return {OUTPUT: tf.math.l2_normalize(features, axis=-1) if l2_normalize else features}

    return tflite.freeze_named(function)


def build_metadata(image_size, dim, quantize, l2_normalized, name="keras-vit image embedder", description=None,
                   version="1", license=None, author="keras-vit"):  # fmt: skip
    """The metadata FlatBuffer (bytes, identifier "M001") of an embedder: float32 image in, a `dim` vector out."""
    m = tflite_metadata._metadata_schema()
    height, width = (int(d) for d in image_size)
    norm = "L2-normalised (unit length)" if l2_normalized else "not L2-normalised (normalise it for cosine similarity)"
    if description is None:
        description = (
            f"Vision Transformer image embedder; input {height}x{width} RGB; output a {dim}-dimensional feature "
            f"vector, {norm}; quantisation: {QUANTIZATION_WORDS[quantize]}."
        )
    out = m.TensorMetadataT()
    out.name = OUTPUT
    out.description = f"Image feature vector of {dim} float32 values, {norm}. Quantisation: {quantize}."
    out.content = m.ContentT()
    out.content.contentPropertiesType = m.ContentProperties.FeatureProperties
    out.content.contentProperties = m.FeaturePropertiesT()
    out.stats = m.StatsT()
    if l2_normalized:
        out.stats.min, out.stats.max = [-1.0], [1.0]
    subgraph = m.SubGraphMetadataT()
    subgraph.inputTensorMetadata = [tflite_metadata.input_tensor_metadata(image_size, np.float32)]
    subgraph.outputTensorMetadata = [out]
    meta = m.ModelMetadataT()
    meta.name, meta.description, meta.version, meta.author, meta.license = name, description, version, author, license
    meta.subgraphMetadata = [subgraph]
    meta.minParserVersion = tflite_metadata.MIN_PARSER_VERSION
    return tflite_metadata._finish(meta, tflite_metadata.METADATA_IDENTIFIER)


def convert(model, quantize="float32", representative_images=None, l2_normalize=False, metadata=None):
    """A head-less model as a TFLite embedder (bytes) with embedder metadata; see `tflite.convert` for the modes."""
    from keras_vit.models.vision_transformer import fixed_size_model

    model = fixed_size_model(model)
    (quantize,) = tflite.check_quantization([quantize])
    if len(model.output_shape) != 2:
        raise ExportError(
            f"An embedder outputs one vector per image, (batch, features); this one {model.output_shape}."
        )
    function = frozen_function(model, l2_normalize)
    flatbuffer = tflite.convert_function(model, function, quantize, representative_images)
    dim = int(model.output_shape[-1])
    meta = build_metadata(model.input_shape[1:3], dim, quantize, l2_normalize, **dict(metadata or {}))
    return tflite_metadata.add_metadata(flatbuffer, meta, {})


def cosine(a, b):
    """Row-wise cosine similarity of two (N, D) arrays (float64)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-30)


def compare(outputs, reference):
    """Agreement of an artifact's vectors with the Keras vectors (both (N, D))."""
    outputs, reference = np.asarray(outputs, np.float64), np.asarray(reference, np.float64)
    if outputs.shape != reference.shape:
        raise ValueError(f"Shapes differ: artifact {outputs.shape} vs keras {reference.shape}.")
    similarity = cosine(outputs, reference)
    norms, ref_norms = np.linalg.norm(outputs, axis=-1), np.linalg.norm(reference, axis=-1)
    return {
        "images": len(outputs),
        "output": OUTPUT,
        "min_cosine": float(similarity.min()),
        "mean_cosine": float(similarity.mean()),
        "max_abs_diff": float(np.abs(outputs - reference).max()),
        "max_rel_norm_diff": float((np.abs(norms - ref_norms) / np.maximum(ref_norms, 1e-30)).max()),
        "mean_norm": float(norms.mean()),
    }


def check_budget(figures, budget):
    failures = []
    if not figures["min_cosine"] >= budget["min_cosine"]:
        failures.append(f"min cosine similarity with Keras = {figures['min_cosine']:.6f} < {budget['min_cosine']:g}")
    if not figures["max_rel_norm_diff"] <= budget["max_rel_norm_diff"]:
        failures.append(
            f"max relative norm difference = {figures['max_rel_norm_diff']:.3g} > {budget['max_rel_norm_diff']:g}"
        )
    return failures


def _judge(budget):
    def judge(outputs, reference):
        figures = compare(outputs, reference)
        return figures, check_budget(figures, budget)

    return judge


def sidecar(model, flatbuffer, quantize, l2_normalize):
    runner = TFLiteRunner(flatbuffer)
    return {
        "format": "tflite",
        "kind": "embedder",
        "quantization": quantize,
        "dimensions": int(model.output_shape[-1]),
        "l2_normalized": bool(l2_normalize),
        "preprocessing": preprocessing.describe(model.input_shape[1:3]),
        "input": {"dtype": np.dtype(runner.input["dtype"]).name, "shape": [int(d) for d in runner.input["shape"]]},
        "output": {"name": OUTPUT, "meaning": OUTPUT, "shape": [int(d) for d in runner.output["shape"]]},
        "metadata": True,
    }


def export_feature_model(source, model, out, options, modes, notes=(), l2_normalize=False, dynamic_model=None):
    """`export_model` for a head-less model (`model`, `source.model` at a fixed size): `embedder_<mode>.tflite`
    + sidecar per mode (the SavedModel's signatures are a classifier's), each verified against the Keras features
    and run on the GPU check, and `embedder.onnx` / `embedder.xml` for "onnx" / "openvino" (export/embedder_portable.py,
    converted from `dynamic_model` where the model was built with dynamic_image_size=True); verified on the held-out
    images, else the representative ones, else seeded random images; committed as a whole like every export.
    Returns the report (also `out/report.json`).

    Raises:
        ExportError: no embedder format asked for. VerificationError: a file missed its budget.
    """
    from .pipeline import app_pixels
    from .portable import FORMATS as PORTABLE
    from .report import publish

    if not any(f == "tflite" or f in PORTABLE for f in options.formats):
        raise ExportError(
            f"This model outputs pooled features (num_classes=0, output {model.output_shape}), which export as image "
            "embedders (embedder_<mode>.tflite for MediaPipe's ImageEmbedder, embedder.onnx, embedder.xml); pass "
            "--formats tflite,onnx,openvino."
        )
    if "saved_model" in options.formats:
        notes = [
            *notes,
            "saved_model not written: a num_classes=0 model exports as TFLite, ONNX and OpenVINO image embedders only",
        ]
    images, set_name = _verification_images(source, model)
    images = images[: options.max_verify_images]
    image_size = tuple(int(d) for d in model.input_shape[1:3])
    x, pixels = preprocessing.to_model_space(images, image_size), app_pixels(images, image_size)
    keras_runner = KerasRunner(model)
    reference = keras_runner.outputs(x)
    expected = reference / np.linalg.norm(reference, axis=-1, keepdims=True) if l2_normalize else reference
    latency = keras_runner.latency_ms(x[:1], options.latency_runs, options.latency_warmup)
    keras_row = {"threads": keras_runner.threads, "top1_accuracy": None, "file_bytes": None, "latency_ms": latency}
    metadata = {**({"name": source.metadata_name} if source.metadata_name else {}), **(options.metadata or {})}
    with commit.staged(out) as (target, staging):
        tflite_modes = modes if "tflite" in options.formats else ()
        artifacts = [_artifact(model, mode, source.representative_images, l2_normalize, metadata, x, pixels, expected,
                               staging, out, options) for mode in tflite_modes]  # fmt: skip
        artifacts += [_portable_artifact(fmt, model, dynamic_model, image_size, staging, out, x, reference,
                                         l2_normalize, options)
                      for fmt in options.formats if fmt in PORTABLE]  # fmt: skip
        report = {
            "source": str(source.name) if source.name else type(model).__name__,
            "out": str(out),
            "kind": "embedder",
            "model": {
                "image_size": list(image_size),
                "dimensions": int(model.output_shape[-1]),
                "parameters": int(model.count_params()),
            },
            "verification": {"set": set_name, "images": len(x), "labelled": False},
            "latency_runs": options.latency_runs,
            "latency_warmup": options.latency_warmup,
            "keras": keras_row,
            "artifacts": artifacts,
            "notes": list(notes),
            "passed": all(a["passed"] for a in artifacts),
        }
        return publish(report, staging, target, out)


def _portable_artifact(fmt, model, dynamic_model, image_size, staging, out, x, reference, l2_normalize, options):
    """`embedder.onnx` or `embedder.xml`, staged and verified by its own runtime; its complete report entry."""
    from keras_vit import _startup

    from . import embedder_portable

    with _startup.captured_native_output() as printed:  # what tf2onnx and OpenVINO's frontend print
        entry = embedder_portable.artifact(
            fmt, dynamic_model or model, image_size, staging, x, reference, l2_normalize, options.num_threads,
            options.latency_runs, options.latency_warmup, dynamic_model,
        )  # fmt: skip
    return {**entry, "path": files.join(out, entry["name"]), "converter_output": printed[0].splitlines()}


def _verification_images(source, model):
    if source.heldout is not None:
        return source.heldout[0], source.verification_set or "held-out set"
    if source.has_representative:
        return source.representative_images, "representative images"
    size = tuple(int(d) for d in model.input_shape[1:3])
    images = np.random.default_rng(0).integers(0, 256, (32, *size, 3), dtype=np.uint8)
    return images, "seeded random images (no data given)"


def _artifact(model, mode, representative_images, l2_normalize, metadata, x, pixels, expected, staging, out, options):
    """One `embedder_<mode>.tflite`, staged with its sidecar, and its complete report entry."""
    flatbuffer = convert(model, mode, representative_images, l2_normalize, metadata)
    name = f"embedder_{mode}.tflite"
    commit.write_staged(staging / name, flatbuffer)
    info = sidecar(model, flatbuffer, mode, l2_normalize)
    commit.write_staged((staging / name).with_suffix(".json"), files.json_bytes(info))
    runner = TFLiteRunner(flatbuffer, num_threads=options.num_threads)
    budget = BUDGETS[mode]
    figures = compare(runner.outputs_from_pixels(pixels), expected)
    latency = runner.latency_ms(x[:1], options.latency_runs, options.latency_warmup)
    ops = read_ops(flatbuffer)
    on_gpu = gpu.check_artifact(staging / name, runner, pixels, expected, None, OUTPUT, budget, options.gpu_check,
                                judge=_judge(budget))  # fmt: skip
    failures = check_budget(figures, budget) + on_gpu["failures"]
    return {"name": name, "format": "tflite", "kind": "embedder", "quantization": mode,
            "path": files.join(out, name), "file_bytes": len(flatbuffer), **figures, "latency_ms": latency,
            "threads": runner.threads, "budget": budget, "failures": failures, "ops": ops,
            "dimensions": info["dimensions"], "l2_normalized": bool(l2_normalize),
            "non_builtin_ops": non_builtin_ops(ops), "metadata": tflite_metadata.read_metadata(flatbuffer),
            "gpu": on_gpu, "passed": not failures}  # fmt: skip


def format_table(report):
    """The printed summary of an embedder export (`report.format_table` hands embedder reports here)."""
    from .report import _size, table

    header = ("artifact", "size", "dims", "min cos", "mean cos", "max|diff|", "norm diff", "latency ms", "threads",
              "status")  # fmt: skip
    keras = report["keras"]
    rows = [("keras (reference)", "-", str(report["model"]["dimensions"]), "-", "-", "-", "-",
             f"{keras['latency_ms']:.3f}", str(keras["threads"]), "")]  # fmt: skip
    for a in report["artifacts"]:
        rows.append((a["name"], _size(a["file_bytes"]), str(a["dimensions"]), f"{a['min_cosine']:.6f}",
                     f"{a['mean_cosine']:.6f}", f"{a['max_abs_diff']:.2e}", f"{a['max_rel_norm_diff']:.2e}",
                     f"{a['latency_ms']:.3f}", str(a["threads"]), "ok" if a["passed"] else "FAIL"))  # fmt: skip
    v = report["verification"]
    out = [f"Export of {report['source']} (image embedder)  ->  {report['out']}",
           f"Verified on {v['images']} images from {v['set']}: cosine similarity of each image's vector with Keras'.",
           "", *table(header, rows), ""]  # fmt: skip
    for a in report["artifacts"]:
        budget = ", ".join(f"{k} {v:g}" for k, v in a["budget"].items())
        out.append(f"{a['name']}: budget {budget}" + ("" if a["passed"] else f"; FAILED: {'; '.join(a['failures'])}"))
        if a["format"] != "tflite":
            from .embedder_portable import describe

            out.extend(describe(a))
            continue
        out.append(f"  metadata: {a['metadata']['description']}")
        out.append(f"  ops ({sum(a['ops'].values())}): {', '.join(f'{k} x{n}' for k, n in a['ops'].items())}")
        out.append(gpu.describe(a["gpu"]))
    out += [f"note: {note}" for note in report.get("notes", [])]
    out.append(f"status: {'PASSED' if report['passed'] else 'FAILED'}")
    return "\n".join(out)
