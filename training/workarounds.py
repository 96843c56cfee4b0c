"""Work-arounds for Keras 3.15 under tf.distribute: `fit` under MultiWorkerMirroredStrategy (keras-team/keras#20585)
and gradient clipping with several replicas (`clip_after_all_reduce`, at the end).

Keras' TensorFlow trainer fails twice under MultiWorkerMirroredStrategy, and both places are patched here, on
the model instance only (nothing global is changed):

1. Before its first step it builds the model symbolically from one input batch (`_maybe_symbolic_build`).
   That batch is a `PerReplica` value, which Keras reduces with `strategy.reduce("MEAN", batch, axis=None)`; under
   multi-worker that is a cross-worker collective over a nested structure and fails ("Attempt to convert a value
   (PerReplica...) to a Tensor"). The build only needs shapes and dtypes: we give it this worker's first local
   replica batch instead.
2. After every step it reduces the step's logs with `strategy.reduce("MEAN", value, axis=0)` whenever the
   strategy is multi-worker, but the logs are scalars ("Invalid reduction dimension 0 for input with 0
   dimensions"). We return the logs as 1-element vectors; the mean over axis 0 then gives the scalar back (the
   values are already synchronised metric results, identical on every replica).

`tests/test_training_distributed.py` runs two workers with and without this patch: it fails when the crash is
gone (delete this module then) or when the patch stops fixing it.
"""

import tensorflow as tf


def needs_local_batch_build(strategy):
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def use_local_batch_for_symbolic_build(model):
    """Patches `model` (this instance only) so its symbolic build uses the local replica's batch."""
    original = model._maybe_symbolic_build  # a private Keras method: the narrowest place to intervene
    strategy = model.distribute_strategy

    def local_batch(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    def maybe_symbolic_build(iterator=None, data_batch=None):
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = tf.nest.map_structure(local_batch, next(it))
                break
        return original(iterator=None, data_batch=data_batch)

    model._maybe_symbolic_build = maybe_symbolic_build
    model.train_step = _logs_as_vectors(model.train_step)
    model.test_step = _logs_as_vectors(model.test_step)
    return model


def _logs_as_vectors(step):
    def vector(value):
        if isinstance(value, (tf.Tensor, tf.Variable)) and value.shape.rank == 0:
            return tf.reshape(value, [1])
        return value

    def step_with_vector_logs(data):
        return tf.nest.map_structure(vector, step(data))

    return step_with_vector_logs


def clip_after_all_reduce(optimizer, strategy):
    """Makes `global_clipnorm` clip the replica-summed gradient, as on one device (Keras 3.15, all strategies).

    Keras' optimizer clips each replica's gradient (`_clip_gradients`) before the cross-replica sum in
    `_backend_update_step`, so with several replicas the clipped update differs from the one-device update (the
    paper's recipes clip at 1.0, so this matters on every TPU and multi-GPU run). With more than one replica we
    move the clipping after the sum: Keras' own clipping is switched off and `_backend_update_step` (private; this
    instance only) sums, clips by the global norm, then applies the update exactly as Keras does.
    `tests/test_training_distributed.py` checks Mirrored == default with clipping active.
    """
    norm = optimizer.global_clipnorm
    if not norm or strategy.num_replicas_in_sync <= 1:
        return optimizer
    import keras

    optimizer.global_clipnorm = None

    def backend_update_step(grads, trainable_variables, learning_rate):
        variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
        summed = optimizer._all_reduce_sum_gradients(list(zip(grads, variables)))
        clipped, _ = tf.clip_by_global_norm([g for g, _ in summed], norm)
        tf.__internal__.distribute.interim.maybe_merge_call(
            optimizer._distributed_tf_update_step,
            optimizer._distribution_strategy,
            list(zip(clipped, [v for _, v in summed])),
            learning_rate,
        )

    optimizer._backend_update_step = backend_update_step
    return optimizer
