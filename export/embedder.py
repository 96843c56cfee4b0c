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

from . import metadata as tflite_metadata
from . import preprocessing, tflite
from .errors import ExportError
from .kinds.embedder import BUDGETS, OUTPUT, is_feature_model
from .runners import TFLiteRunner

__all__ = ["BUDGETS", "OUTPUT", "build_metadata", "convert", "feature_model",
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

    def outputs(images):
        features = model(images, training=False)
        return {OUTPUT: tf.math.l2_normalize(features, axis=-1) if l2_normalize else features}

    return tflite.freeze(model, outputs)


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
