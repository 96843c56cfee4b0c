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

from . import commit, embedder_portable, gpu, preprocessing, runtime, tflite
from . import metadata as tflite_metadata
from .errors import ExportError
from .flatbuffer import non_builtin_ops, read_ops
from .kinds import embedder as kind
from .kinds.embedder import BUDGETS, OUTPUT, check_budget, expected_vectors, figures, is_feature_model
from .portable import FORMATS as PORTABLE
from .report import publish
from .runners import KerasRunner, TFLiteRunner

__all__ = ["BUDGETS", "OUTPUT", "build_metadata", "convert", "export_feature_model", "feature_model",
           "frozen_function", "is_feature_model", "sidecar"]  # fmt: skip

QUANTIZATION_WORDS = {
    "float32": "float32 weights and activations",
    "float16": "float16 weights, float32 activations",
    "dynamic_int8": "int8 weights, float32 activations (dynamic range)",
    "int8": "int8 weights and activations (full integer, calibrated), float32 input and output",
    "int8_matmul": "calibrated int8 matmuls and convolutions, float32 LayerNorm/GELU/softmax",
}


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
    m = tflite_metadata.metadata_schema()
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
    return tflite_metadata.finish(meta, tflite_metadata.METADATA_IDENTIFIER)


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
        "output": {
            "name": OUTPUT,
            "meaning": OUTPUT,
            "shape": [int(d) for d in runner.output_details[OUTPUT]["shape"]],
        },
        "metadata": True,
    }


def _shape(detail):
    return [int(d) for d in detail["shape"]]


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
    image_size = runtime.image_size(model)
    verification = source.verification_images(image_size, options.max_verify_images)
    images, set_name = verification.images, verification.name
    x, pixels = preprocessing.to_model_space(images, image_size), preprocessing.app_pixels(images, image_size)
    keras_runner = KerasRunner(model)
    reference = keras_runner.outputs(x)
    expected = {OUTPUT: expected_vectors(reference[OUTPUT], l2_normalize)}
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
    with runtime.printed("report") as printed:  # what tf2onnx and OpenVINO's frontend print
        entry = embedder_portable.artifact(
            fmt, dynamic_model or model, image_size, staging, x, reference, l2_normalize, options.num_threads,
            options.latency_runs, options.latency_warmup, dynamic_model,
        )  # fmt: skip
    return {**entry, "path": files.join(out, entry["name"]), "converter_output": printed[0].splitlines()}


def _artifact(model, mode, representative_images, l2_normalize, metadata, x, pixels, expected, staging, out, options):
    """One `embedder_<mode>.tflite`, staged with its sidecar, and its complete report entry."""
    flatbuffer = convert(model, mode, representative_images, l2_normalize, metadata)
    name = f"embedder_{mode}.tflite"
    commit.write_staged(staging / name, flatbuffer)
    info = sidecar(model, flatbuffer, mode, l2_normalize)
    commit.write_staged((staging / name).with_suffix(".json"), files.json_bytes(info))
    runner = TFLiteRunner(flatbuffer, num_threads=options.num_threads)
    budget = BUDGETS[mode]
    found = figures(runner.outputs_from_pixels(pixels), expected)
    latency = runner.latency_ms(x[:1], options.latency_runs, options.latency_warmup)
    ops = read_ops(flatbuffer)
    on_gpu = gpu.check_artifact(staging / name, runner, pixels, expected, None, kind, budget, options.gpu_check)
    failures = check_budget(found, budget) + on_gpu["failures"]
    return {"name": name, "format": "tflite", "kind": "embedder", "quantization": mode,
            "path": files.join(out, name), "file_bytes": len(flatbuffer), **found, "latency_ms": latency,
            "threads": runner.threads, "budget": budget, "failures": failures, "ops": ops,
            "dimensions": info["dimensions"], "l2_normalized": bool(l2_normalize),
            "non_builtin_ops": non_builtin_ops(ops), "metadata": tflite_metadata.read_metadata(flatbuffer),
            "gpu": on_gpu, "passed": not failures}  # fmt: skip
