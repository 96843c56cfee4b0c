"""Image embedders on device: a head-less model exported to TFLite as a feature vector for MediaPipe's ImageEmbedder.

A keras_vit model built with `num_classes=0` (or a pretrained one loaded without its head, whose output is the
pooled features or its `pre_logits` layer) outputs one vector per image. `python -m export` writes it as
`embedder_<mode>.tflite`: the same conversions as the classifiers (export/tflite.py), an output named `embedding`,
and TFLite metadata of the embedder form (the input normalisation, an output with FeatureProperties and a
description that states whether the vector is L2-normalised and how the model is quantised; no labels), which
MediaPipe Tasks' `ImageEmbedder` reads unchanged. Each file is verified against the Keras features by the cosine
similarity of every image's two vectors, with a budget per mode (`BUDGETS`).
"""

from . import metadata as tflite_metadata
from . import tflite
from .description import describe
from .errors import ExportError
from .kinds import embedder as kind
from .kinds.embedder import BUDGETS, OUTPUT, is_feature_model

__all__ = ["BUDGETS", "OUTPUT", "convert", "feature_model", "frozen_function", "is_feature_model"]


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


def convert(model, quantize="float32", representative_images=None, l2_normalize=False, metadata=None):
    """A head-less model as a TFLite embedder (bytes) with embedder metadata (export/metadata.py: `render`); see
    `tflite.convert` for the modes. `metadata`: descriptive fields (name, description, version, license, author),
    or False for the file without metadata."""
    from keras_vit.models.vision_transformer import fixed_size_model

    model = fixed_size_model(model)
    (quantize,) = tflite.check_quantization([quantize])
    if len(model.output_shape) != 2:
        raise ExportError(
            f"An embedder outputs one vector per image, (batch, features); this one {model.output_shape}."
        )
    function = frozen_function(model, l2_normalize)
    flatbuffer = tflite.convert_function(model, function, quantize, representative_images)
    if metadata is False:  # the export job attaches its own description's (export/formats/tflite.py)
        return flatbuffer
    described = describe(kind, model, l2_normalize=l2_normalize, metadata=metadata)
    return tflite_metadata.attach(flatbuffer, described, quantize)
