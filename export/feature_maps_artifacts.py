"""The files of a feature-map export and the runtimes that read them back: the named outputs, the SavedModel and
TFLite conversions, a runner for each, and the per-output comparison with Keras.

Every output has a name that stays fixed from the Keras model to every file: `encoderblock_{i}` for block i's patch
tokens (or map) and `encoderblock_{i}_prefix` for its prefix tokens, from the `TokenSplit` layer that gives it
(`keras_vit.feature_model` names it `encoderblock_{i}_features`). Both files are built from one function that
returns a dict keyed by those names, so the SavedModel's signatures and the TFLite signature `serving_default` hold
them as output names. TFLite orders a subgraph's outputs by its own rule (the subgraph's output list need not follow
the model's order), so the runners read every output through the signature's name -> tensor map, never by position.
"""

import numpy as np

from keras_vit import _startup

from . import preprocessing, tflite
from .errors import ExportError
from .kinds.feature_maps import PREFIX_SUFFIX, check_budget, compare, describe_outputs, output_layers, output_names
from .runtime import invoke, median_ms

SIGNATURE = "serving_default"
MODEL_SPACE = "model_space"
INPUT = "images"

__all__ = ["PREFIX_SUFFIX", "check_budget", "compare", "describe_outputs", "output_layers", "output_names"]


def named_call(model, names):
    """A function of float32 model-space images returning {name: output} (the TF graph both files are built from)."""

    def call(images):
        outputs = model(images, training=False)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        return dict(zip(names, outputs))

    return call


def frozen_function(model, names, dynamic_batch=False):
    """The model at batch 1 (or an open batch), variables frozen into constants, returning {name: output}."""
    import tensorflow as tf

    call = named_call(model, names)
    shape = (None if dynamic_batch else 1, *model.input_shape[1:])

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name=INPUT)])
    def function(images):
        return call(images)

    return tflite.freeze_named(function)


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

    names = output_names(model)
    height, width, channels = model.input_shape[1:]
    call = named_call(model, names)
    module = tf.Module()
    module.model = model

    @tf.function(input_signature=[tf.TensorSpec((None, height, width, channels), tf.float32, name=INPUT)])
    def model_space(images):
        return call(images)

    @tf.function(input_signature=[tf.TensorSpec((None, None, None, channels), tf.uint8, name=INPUT)])
    def serving(images):
        return call(preprocessing.model_space_in_graph(images, (height, width)))

    module.serving, module.model_space = serving, model_space
    signatures = {SIGNATURE: serving.get_concrete_function(), MODEL_SPACE: model_space.get_concrete_function()}
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path


def _batches(x, step):
    return [x[i : i + step] for i in range(0, len(x), step)]


def _gather(batches):
    """[{name: array}] -> {name: concatenated array}."""
    return {name: np.concatenate([np.asarray(b[name]) for b in batches]) for name in batches[0]}


class KerasFeatureMaps:
    """The Keras reference: the feature model through one traced function, {name: array} per call."""

    threads = "tf-default"

    def __init__(self, model):
        import tensorflow as tf

        self.names = output_names(model)
        self._call = tf.function(named_call(model, self.names))

    def outputs(self, x, batch_size=64):
        return _gather([{k: v.numpy() for k, v in self._call(b).items()} for b in _batches(x, batch_size)])

    def latency_ms(self, x1, runs, warmup):
        return median_ms(lambda: [v.numpy() for v in self._call(x1).values()], runs, warmup)


class SavedModelFeatureMaps:
    """A written feature-map SavedModel, reloaded: `model_space` for model-space images, `serving_default` for
    raw uint8 ones; outputs by signature name."""

    threads = "tf-default"

    def __init__(self, path):
        import tensorflow as tf

        self.loaded = tf.saved_model.load(str(path))  # held: the signatures' variables live with it
        missing = {SIGNATURE, MODEL_SPACE} - set(self.loaded.signatures)
        if missing:
            raise ExportError(f"{str(path)!r} lacks the signatures {sorted(missing)}; re-export it with export/.")
        self.model_space = self.loaded.signatures[MODEL_SPACE]
        self.serving = self.loaded.signatures[SIGNATURE]
        self.names = sorted(self.model_space.structured_outputs)

    def outputs(self, x, batch_size=64):
        return _gather([{k: v.numpy() for k, v in self.model_space(images=b).items()} for b in _batches(x, batch_size)])

    def outputs_from_images(self, images, batch_size=64):
        """`serving_default` on raw uint8 images (N, H, W, 3), or a list of them of any sizes (one call each)."""
        images = preprocessing.check_images(images)
        one_size = len({image.shape for image in images}) == 1
        batches = [np.stack(b) for b in _batches(images, batch_size)] if one_size else [i[None] for i in images]
        return _gather([{k: v.numpy() for k, v in self.serving(images=b).items()} for b in batches])

    def latency_ms(self, x1, runs, warmup):
        return median_ms(lambda: [v.numpy() for v in self.model_space(images=x1).values()], runs, warmup)


class TFLiteFeatureMaps:
    """A feature-map flatbuffer in LiteRT's interpreter; each output read through its signature name."""

    def __init__(self, flatbuffer, num_threads=1):
        from ai_edge_litert.interpreter import Interpreter

        with _startup.native_lines_dropped(_startup.LITERT_NOTICES):
            self.interpreter = Interpreter(model_content=bytes(flatbuffer), num_threads=int(num_threads))
        self.threads = int(num_threads)
        signatures = self.interpreter.get_signature_list()
        if SIGNATURE not in signatures or signatures[SIGNATURE]["inputs"] != [INPUT]:
            raise ExportError(
                f"The TFLite model has no signature {SIGNATURE!r} with one input {INPUT!r} (found {signatures}); "
                "feature-map files name their outputs through it. Re-export the model with export/."
            )
        runner = self.interpreter.get_signature_runner(SIGNATURE)
        self.input = runner.get_input_details()[INPUT]
        # name -> the output tensor's index in the interpreter: the mapping every read below goes through.
        self.output_details = runner.get_output_details()
        del runner  # it holds the interpreter's internals, and LiteRT refuses to run while anything else does
        self.names = sorted(self.output_details)
        if self.input["dtype"] != np.float32 or any(d["dtype"] != np.float32 for d in self.output_details.values()):
            raise ExportError("Feature-map TFLite files have float32 input and outputs; this one does not.")
        self.image_size = tuple(int(d) for d in self.input["shape"][1:3])
        self.dynamic_batch = int(self.input["shape_signature"][0]) == -1
        self.interpreter.allocate_tensors()
        self.batch = int(self.input["shape"][0])

    def positions(self):
        """{name: position in the subgraph's output list}: where TFLite put each named output."""
        order = [d["index"] for d in self.interpreter.get_output_details()]
        return {name: order.index(d["index"]) for name, d in self.output_details.items()}

    def _invoke(self, x):
        invoke(self, x)
        return {name: self.interpreter.get_tensor(d["index"]) for name, d in self.output_details.items()}

    def outputs(self, x, batch_size=64):
        x = np.asarray(x, np.float32)
        return _gather([self._invoke(b) for b in _batches(x, batch_size if self.dynamic_batch else 1)])

    def latency_ms(self, x1, runs, warmup):
        return median_ms(lambda: self._invoke(np.asarray(x1, np.float32)), runs, warmup)
