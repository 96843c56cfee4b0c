"""Work-arounds for Keras 3.15 under tf.distribute: `fit` under MultiWorkerMirroredStrategy (keras-team/keras#20585),
clipping with several replicas, gradient accumulation; each pinned by a test that fails once Keras fixes it."""

import tensorflow as tf


def needs_local_batch_build(strategy):
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def use_local_batch_for_symbolic_build(model):
    """Patches `model` (this instance only) so its symbolic build uses the local replica's batch.

    Keras' TensorFlow trainer fails twice under MultiWorkerMirroredStrategy: (1) before its first step it builds the
    model from one `PerReplica` batch reduced with `strategy.reduce("MEAN", batch, axis=None)`, a cross-worker
    collective over a nested structure that fails; the build needs only shapes, so it gets this worker's first
    replica batch. (2) After every step it reduces the scalar logs along axis 0; they are returned as 1-element
    vectors, whose mean gives the scalar back (the values are identical on every replica).
    `tests/training/test_distributed.py` fails when the crash is gone (delete this then) or the patch stops fixing it.
    """
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
    `tests/training/test_distributed.py` checks Mirrored == default with clipping active.
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


def uses_merge_call(strategy):
    """Whether `strategy` is a real tf.distribute strategy (the default one runs `merge_call` functions directly)."""
    return type(strategy).__name__ != "_DefaultDistributionStrategy"


def accumulate_across_replicas(optimizer, strategy):
    """Makes Keras' `gradient_accumulation_steps` run under a tf.distribute strategy (Keras 3.15).

    Keras decides between "accumulate" and "update" with a `tf.cond` in replica context whose branches call
    `merge_call` (the gradient all-reduce, the weight decay, the accumulator update); tf.distribute refuses that
    ("`merge_call` called while defining a new graph or a tf.function") under Mirrored, MultiWorkerMirrored and TPU
    strategies. Here (this instance only) each micro-step's gradient is summed over the replicas first, outside any
    condition, and one `merge_call` makes the decision in cross-replica context, where the branches only update
    variables: add the sum to the accumulators, or average them, clip the mean by `global_clipnorm` (after the sum
    over replicas, as `clip_after_all_reduce` does), decay the weights and apply the update, as Keras does on one
    device, and then the moving average of the weights where `use_ema` asks for it, as Keras does. The cost is one
    all-reduce per micro-step instead of one per update. `tests/training/test_accum.py`
    checks Mirrored on two logical CPUs against one batch on one device, and that Keras still fails without this.
    """
    steps = optimizer.gradient_accumulation_steps
    if not steps:
        return optimizer
    norm = optimizer.global_clipnorm
    optimizer.global_clipnorm = None
    import keras

    def backend_apply_gradients(grads, trainable_variables):
        variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
        summed = optimizer._all_reduce_sum_gradients(list(zip(grads, variables)))
        accumulators = [optimizer._accumulated_gradients[optimizer._get_variable_index(v)] for v in trainable_variables]
        tf.__internal__.distribute.interim.maybe_merge_call(
            _decide, strategy, [g for g, _ in summed], variables, [a.value for a in accumulators]
        )
        if optimizer.use_ema:  # as Keras' own `_backend_apply_gradients` ends: the average, after every micro-step
            optimizer._update_model_variables_moving_average(optimizer._trainable_variables)

    def _decide(distribution, grads, variables, accumulators):
        # After the all-reduce every replica holds the same sum: the first one's stands for all.
        grads = [distribution.experimental_local_results(g)[0] for g in grads]
        sums = [g + tf.convert_to_tensor(a) for g, a in zip(grads, accumulators)]
        is_update = tf.equal((optimizer._iterations + 1) % steps, 0)
        # No tf.cond: updating mirrored variables inside one fails here too (an unfed placeholder). The update runs
        # on every micro-step and is kept only on the last one; everything it changes is read first and restored.
        changed = variables + [v.value for v in optimizer.variables if _updated_by_step(optimizer, v)]
        before = [tf.identity(tf.convert_to_tensor(v)) for v in changed]
        mean = [s / steps for s in sums]
        if norm:
            mean, _ = tf.clip_by_global_norm(mean, norm)
        learning_rate = optimizer.learning_rate
        if optimizer.weight_decay is not None:
            for variable in variables:
                if optimizer._use_weight_decay(variable):
                    decay = tf.cast(optimizer.weight_decay, variable.dtype) * tf.cast(learning_rate, variable.dtype)
                    distribution.extended.update(variable, lambda v, d: v.assign_sub(v * d), args=(decay,))
        optimizer._distributed_tf_update_step(distribution, list(zip(mean, variables)), learning_rate)
        for variable, value in zip(changed, before):
            distribution.extended.update(variable, lambda v, old: v.assign(tf.where(is_update, v, old)), args=(value,))
        for a, s in zip(accumulators, sums):
            distribution.extended.update(a, lambda v, s: v.assign(tf.where(is_update, tf.zeros_like(s), s)), args=(s,))

    optimizer._backend_apply_gradients = backend_apply_gradients
    return optimizer


def _updated_by_step(optimizer, variable):
    """An optimizer slot (moment, momentum) that `update_step` writes; not the counters or the accumulators."""
    skip = [optimizer._iterations, *optimizer._accumulated_gradients]
    if isinstance(getattr(optimizer, "_learning_rate", None), type(optimizer._iterations)):
        skip.append(optimizer._learning_rate)
    return all(variable is not other for other in skip)


def fit_steps_per_execution(strategy, steps_per_execution, accum_steps):
    """Keras `fit` steps per execution for `steps_per_execution` optimiser steps of `accum_steps` micro-batches.

    Whole updates per execution keep the callbacks on update boundaries. Under (MultiWorker)MirroredStrategy,
    though, Keras 3.15's multi-step loop fails whenever the step has a `merge_call` ("You must feed a value for
    placeholder tensor 'while/cond/Placeholder'", with or without accumulation), so there each micro-batch keeps
    its own execution and the checkpoint callback waits for the update boundary (`FaultTolerance`).
    """
    if accum_steps > 1 and isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    ):
        return steps_per_execution
    return steps_per_execution * accum_steps
