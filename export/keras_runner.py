"""`KerasRunner`: the Keras model run as every exported file is run, its outputs named as its kind names them."""

from . import kinds
from .description import to_model_space
from .runtime import batches, check_batch, gather, median_ms, named_call


class KerasRunner:
    """Runs a Keras model through one traced `tf.function` (what serving the model in TF would do), its outputs
    named as its kind names them."""

    kind = "keras"
    threads = "tf-default"

    def __init__(self, model, labels=None):
        import tensorflow as tf

        self.model = model
        self.image_size = tuple(model.input_shape[1:3])
        self.labels = labels
        self.names = kinds.kind_of(model).output_names(model)
        self.output_kind = self.names[0]
        self._call = tf.function(named_call(model, self.names))

    def outputs(self, x, batch_size=64):
        x = check_batch(x, self.image_size, "The Keras model")
        return gather([{k: v.numpy() for k, v in self._call(b).items()} for b in batches(x, batch_size)])

    def latency_ms(self, x1, runs=50, warmup=5):
        return median_ms(lambda: [v.numpy() for v in self._call(x1).values()], runs, warmup)

    def outputs_from_images(self, images):
        return self.outputs(to_model_space(images, self.image_size))
