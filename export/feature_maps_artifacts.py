"""The files of a feature-map export: the SavedModel and TFLite conversions of a `keras_vit.feature_model`, every
output named.

Every output has a name that stays fixed from the Keras model to every file: `encoderblock_{i}` for block i's patch
tokens (or map) and `encoderblock_{i}_prefix` for its prefix tokens, from the `TokenSplit` layer that gives it
(`keras_vit.feature_model` names it `encoderblock_{i}_features`). Both files are built from one function that
returns a dict keyed by those names, so the SavedModel's signatures and the TFLite signature `serving_default` hold
them as output names. TFLite orders a subgraph's outputs by its own rule (the subgraph's output list need not follow
the model's order), so export/runners.py reads every output through the signature's name -> tensor map, never by
position; the per-output comparison and budgets are the kind's (export/kinds/feature_maps.py).
"""

from . import tflite
from .kinds.feature_maps import output_names
from .runtime import named_call
from .saved_model import serving_module


def frozen_function(model, names, dynamic_batch=False):
    """The model at batch 1 (or an open batch), variables frozen into constants, returning {name: output}."""
    return tflite.freeze(model, named_call(model, names), dynamic_batch)


def convert(model, mode, representative_images=None, dynamic_batch=False):
    """The feature model as a TFLite flatbuffer (bytes) in `mode`, builtin ops only, its outputs named by its
    signature (`output_names`); no TFLite metadata (MediaPipe Tasks have no task that reads feature maps)."""
    function = frozen_function(model, output_names(model), dynamic_batch)
    return tflite.convert_function(model, function, mode, representative_images)


def save_saved_model(model, path):
    """Writes the feature model as a SavedModel at `path` (which must not exist; the export stages it).

    `serving_default(images)`: uint8 RGB images (batch, any H, any W, 3), resized (bilinear) and scaled to [-1, 1]
    inside, as the classifiers' SavedModel does; `model_space(images)`: float32 images in [-1, 1] at the model's
    size. Both return {name: output} for every `output_names` entry.
    """
    import tensorflow as tf

    module, signatures = serving_module(model, named_call(model, output_names(model)))
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path
