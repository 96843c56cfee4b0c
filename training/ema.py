"""The moving average of the weights (`TrainConfig.ema_decay`): Keras' own `use_ema` slots, evaluated beside the raw
weights at the end of a run, and the one `ema_export` names left in the model that is saved and exported."""

import dataclasses

import keras

AVERAGE_SUFFIX = "_average"  # Keras' name for the average of a weight (BaseOptimizer.build: `add_optimizer_variables`)


def hold_until_the_end(optimizer):
    """Stops Keras' `fit` from writing the average over the weights as it returns (this optimizer instance only).

    Keras 3.15's `fit` ends, on every backend, with `optimizer.finalize_variable_values(model.trainable_weights)`,
    which with `use_ema` replaces each weight by its average. The trainer calls `fit` more than once in a run (a
    mid-epoch resume finishes its epoch in a call of its own), so the next call would go on training from the
    average, and a resumed run would differ from an uninterrupted one (on JAX the weight would even share the
    average's buffer, which the next jitted step donates: the process crashes). Here that call does nothing;
    `evaluate_both` writes the average, once, after training. `tests/training/test_ema.py` checks that Keras still
    makes the call.
    """
    optimizer.finalize_variable_values = _leave_the_weights
    return optimizer


def _leave_the_weights(var_list):
    del var_list


def once_per_update(optimizer):
    """With gradient accumulation, updates the average once per optimiser step, as without (this instance only).

    Keras 3.15 updates the average after every micro-batch, so with `accum_steps` A the decay would act A times per
    step (and a step's new weights would enter the average at a different rate than without accumulation). Here
    the average moves on the micro-batch that applies the update only: the same average as `accum_steps=1`.
    `tests/training/test_ema.py` compares the two.
    """
    steps = optimizer.gradient_accumulation_steps
    if not steps:
        return optimizer
    ops = keras.ops

    def update_average(trainable_variables):
        is_update = ops.equal((optimizer._iterations + 1) % steps, 0)  # the counter moves after this call
        first = ops.equal(optimizer.iterations, 0)  # the first update starts the average at the weights
        for variable, average in zip(trainable_variables, optimizer._model_variables_moving_average):
            if average is None:
                continue
            # Tensors, not Variables: Keras' JAX `ops.where` hands its arguments to `jnp.where` unconverted, and
            # JAX (0.10) refuses a Variable's `__jax_array__` while tracing.
            current, kept = variable.value, average.value
            momentum = (1 - ops.cast(first, variable.dtype)) * optimizer.ema_momentum
            moved = momentum * kept + (1 - momentum) * current
            average.assign(ops.where(is_update, moved, kept))

    optimizer._update_model_variables_moving_average = update_average  # private: the narrowest place
    return optimizer


def average_paths(optimizer_paths):
    """The paths of the averaged weights among a checkpoint's (or an optimizer's) optimizer variable paths."""
    return [path for path in optimizer_paths if path.endswith(AVERAGE_SUFFIX)]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The raw and the averaged weights on the held-out split, and which of them the model was left holding.

    Attributes:
        decay: the run's `ema_decay`.
        raw, average: {"top1", "top5", "loss"} of each.
        exported: "average" or "raw", as `ema_export` chose.
    """

    decay: float
    raw: dict
    average: dict
    exported: str

    @property
    def better(self):
        """Which is better, "average" or "raw": the higher held-out top-1, the lower loss on a tie."""
        average, raw = ((f["top1"], -f["loss"]) for f in (self.average, self.raw))
        return "average" if average >= raw else "raw"

    @property
    def exported_figures(self):
        return self.average if self.exported == "average" else self.raw

    def to_dict(self):
        """metrics.json's "ema" entry."""
        return {**dataclasses.asdict(self), "better": self.better}

    def line(self):
        """The run's summary line for the two weight sets."""
        names = {"average": "the average", "raw": "the raw weights"}
        return (
            f"moving average of the weights (ema_decay={self.decay:g}): held-out top-1 {self.average['top1']:.4f} "
            f"(loss {self.average['loss']:.4f}) against {self.raw['top1']:.4f} (loss {self.raw['loss']:.4f}) for "
            f"the raw weights: {names[self.better]} {'is' if self.better == 'average' else 'are'} better; "
            f"model.keras holds {names[self.exported]} (ema_export={self.exported == 'average'})"
        )


def evaluate_both(model, evaluate, decay, export_average):
    """Evaluates the raw weights, then the average; leaves `model` holding the ones `export_average` names.

    Args:
        model: the trained model, compiled with an optimizer that keeps the average (`use_ema`).
        evaluate: a function of no arguments that evaluates `model` and returns its {"top1", "top5", "loss"}.
        decay: the run's `ema_decay` (for the record).
        export_average: whether the model keeps the average (True) or gets its raw weights back (False).

    Returns:
        A `Comparison`.
    """
    weights = model.trainable_variables
    raw = _figures(evaluate())
    kept = [keras.ops.copy(variable.value) for variable in weights] if not export_average else None
    optimizer = model.optimizer
    type(optimizer).finalize_variable_values(optimizer, weights)  # Keras' own swap (`hold_until_the_end` held it)
    average = _figures(evaluate())
    if kept is not None:
        for variable, value in zip(weights, kept):
            variable.assign(value)
    return Comparison(decay=decay, raw=raw, average=average, exported="average" if export_average else "raw")


def _figures(results):
    return {key: float(results[key]) for key in ("top1", "top5", "loss")}
