"""Optimisers, learning-rate schedules and losses of the recipes; `keras_weight_decay` converts big_vision's weight
decay convention to Keras'."""

import itertools
import math
import warnings

import keras

from . import ema


def keras_weight_decay(decoupled_wd, peak_learning_rate):
    """big_vision's `wd` (multiplied by the schedule) -> Keras AdamW's `weight_decay` (multiplied by the lr).

    Keras' `AdamW` decays each weight by `learning_rate(t) * weight_decay * w` per step; big_vision (and the AugReg
    configs) decay by `wd * lr(t) / lr_peak * w`. They agree when `weight_decay = wd / lr_peak`: big_vision's ViT-S/16
    baseline (lr 1e-3, wd 1e-4) is Keras `weight_decay=0.1`, the "0.1" the AugReg paper reports, so papers' values in
    that style (the ViT paper's 0.3 / 0.03 / 0.1 too) are already Keras values.
    """
    if peak_learning_rate <= 0:
        raise ValueError(f"peak_learning_rate must be positive. Received: {peak_learning_rate}")
    return decoupled_wd / peak_learning_rate


@keras.saving.register_keras_serializable(package="training")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak` over `warmup_steps`, then cosine, linear or no decay to 0 at `total_steps`.

    Args:
        peak: learning rate at the end of the warm-up.
        total_steps: steps of the whole run.
        warmup_steps: steps of the linear warm-up.
        decay: "cosine", "linear" or "constant".
        knots: ((step, progress), ...) where a run's length was changed on resume (`extend`): the decay's
            progress (0 at the end of the warm-up, 1 at `total_steps`) runs linearly between the knots, so the
            learning rate stays continuous at each one. Empty for an unchanged run.
    """

    def __init__(self, peak, total_steps, warmup_steps=0, decay="cosine", knots=()):
        if decay not in ("cosine", "linear", "constant"):
            raise ValueError(f"Unknown decay {decay!r}. Use 'cosine', 'linear' or 'constant'.")
        if warmup_steps >= total_steps and total_steps > 0 and warmup_steps > 0:
            raise ValueError(
                f"warmup_steps ({warmup_steps}) must be smaller than the total steps ({total_steps}); lower "
                f"warmup_steps or train longer."
            )
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.knots = tuple((int(step), float(progress)) for step, progress in knots)

    def progress_at(self, step):
        """The decay's progress at an integer `step` (plain Python; what `extend` continues from)."""
        points = [(self.warmup_steps, 0.0), *self.knots, (self.total_steps, 1.0)]
        if step <= points[0][0]:
            return 0.0
        for (s0, p0), (s1, p1) in itertools.pairwise(points):
            if step <= s1:
                return p0 + (p1 - p0) * (step - s0) / max(s1 - s0, 1)
        return 1.0

    def extend(self, step, total_steps):
        """This schedule with its remaining decay stretched (or squeezed) from `step` to a new `total_steps`.

        The learning rate at `step` is unchanged and the decay keeps its shape, now reaching 0 at `total_steps`:
        what a resumed run needs when its length changes on purpose. During the warm-up only the length changes.
        """
        if total_steps <= step:
            raise ValueError(
                f"The new schedule must end after the restored step {step}. Received: total_steps="
                f"{total_steps}; train more epochs."
            )
        if step <= self.warmup_steps:
            if total_steps <= self.warmup_steps:
                raise ValueError(
                    f"The new schedule ({total_steps} steps) would end within the warm-up of "
                    f"{self.warmup_steps} steps the run was started with; train more epochs."
                )
            return WarmupDecay(self.peak, total_steps, self.warmup_steps, self.decay, self.knots)
        knots = [(s, p) for s, p in self.knots if s < step] + [(step, self.progress_at(step))]
        return WarmupDecay(self.peak, total_steps, self.warmup_steps, self.decay, knots)

    def _progress(self, step):
        if not self.knots:
            return keras.ops.clip((step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 0.0, 1.0)
        points = [(self.warmup_steps, 0.0), *self.knots, (self.total_steps, 1.0)]
        progress = keras.ops.zeros_like(step)
        for (s0, p0), (s1, p1) in itertools.pairwise(points):
            piece = p0 + (p1 - p0) * keras.ops.clip((step - s0) / max(s1 - s0, 1), 0.0, 1.0)
            progress = keras.ops.where(step >= s0, piece, progress)
        return progress

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = max(self.warmup_steps, 1)
        # Step t uses (t + 1) / warmup during warm-up, so the very first update is not a wasted zero step.
        warm = self.peak * keras.ops.minimum((step + 1.0) / warmup, 1.0)
        progress = self._progress(step)
        if self.decay == "cosine":
            decayed = self.peak * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        elif self.decay == "linear":
            decayed = self.peak * (1.0 - progress)
        else:
            decayed = self.peak * keras.ops.ones_like(progress)
        if self.warmup_steps <= 0:
            return decayed
        return keras.ops.where(step < self.warmup_steps, warm, decayed)

    def get_config(self):
        config = {
            "peak": self.peak,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
        }
        if self.knots:  # absent for an unchanged run, so its saved config is what it always was
            config["knots"] = [list(knot) for knot in self.knots]
        return config


@keras.saving.register_keras_serializable(package="training")
class PerUpdate(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule` read at the optimiser step, for an optimiser that accumulates gradients over `accum_steps` calls.

    Keras' `gradient_accumulation_steps` counts `iterations` per micro-step when it asks a schedule for the
    learning rate (its own `iterations` property and Adam's bias correction count updates); this wrapper makes
    the schedule see `micro_step // accum_steps`, the count every other part of the trainer uses.
    """

    def __init__(self, schedule, accum_steps):
        if isinstance(schedule, dict):
            schedule = keras.saving.deserialize_keras_object(schedule)
        self.schedule = schedule
        self.accum_steps = int(accum_steps)

    def __call__(self, step):
        return self.schedule(keras.ops.floor_divide(step, self.accum_steps))

    def get_config(self):
        return {"schedule": keras.saving.serialize_keras_object(self.schedule), "accum_steps": self.accum_steps}


def make_schedule(config, total_steps):
    """The learning-rate schedule of a `TrainConfig` for a run of `total_steps` steps."""
    warmup = config.warmup_steps
    if warmup >= total_steps:
        # A shortened run (--epochs 1) keeps a proportionate warm-up rather than failing.
        warmup = total_steps // 10
        warnings.warn(
            f"warmup_steps={config.warmup_steps} >= the run's {total_steps} steps; using {warmup}.", stacklevel=2
        )
    return WarmupDecay(config.learning_rate, total_steps, warmup, config.schedule)


def make_optimizer(config, total_steps, schedule=None):
    """The optimizer of a `TrainConfig`: AdamW (decoupled decay, Keras convention) or SGD with momentum.

    `schedule` replaces `make_schedule(config, total_steps)` (a resumed run's schedule from its checkpoint).
    With `config.ema_decay` it also keeps the moving average of the weights (`training.ema`).
    With `config.accum_steps > 1` the optimiser accumulates (Keras' `gradient_accumulation_steps`): it averages
    the gradients of `accum_steps` calls, then clips the mean, decays the weights and updates, once; `schedule`
    and `total_steps` count those updates.
    """
    schedule = schedule or make_schedule(config, total_steps)
    accum = config.accum_steps if config.accum_steps > 1 else None
    common = dict(
        learning_rate=PerUpdate(schedule, accum) if accum else schedule,
        global_clipnorm=config.global_clipnorm,
        gradient_accumulation_steps=accum,
    )
    if config.ema_decay is not None:
        common.update(use_ema=True, ema_momentum=config.ema_decay)
        return ema.hold_until_the_end(ema.once_per_update(_optimizer(config, common)))
    return _optimizer(config, common)


def _optimizer(config, common):
    """AdamW or SGD with the `common` arguments."""
    if config.optimizer == "adamw":
        optimizer = keras.optimizers.AdamW(
            weight_decay=config.weight_decay, beta_1=config.beta_1, beta_2=config.beta_2, **common
        )
        # No decay of biases, LayerNorm scales, the class token and position embeddings (1-D or token tables),
        # as in the reference implementations, which decay only the kernels.
        optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta", "cls", "pos_embedding"])
        return optimizer
    if config.weight_decay:
        raise ValueError(
            f"optimizer='sgd' has no decoupled weight decay here (the paper fine-tunes without any). Received "
            f"weight_decay={config.weight_decay}; set it to 0 or use optimizer='adamw'."
        )
    return keras.optimizers.SGD(momentum=config.momentum, **common)


def make_loss(config):
    """Softmax or sigmoid cross-entropy on one-hot (possibly mixed) targets, with label smoothing."""
    if config.loss == "sigmoid":
        # AugReg's sigmoid cross-entropy sums over classes; Keras' mean over classes would scale the loss by 1/K.
        return SummedSigmoidCrossEntropy(label_smoothing=config.label_smoothing)
    return keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=config.label_smoothing)


@keras.saving.register_keras_serializable(package="training")
class SummedSigmoidCrossEntropy(keras.losses.Loss):
    """Per-example sum over classes of the sigmoid cross-entropy (big_vision's `sigmoid_xent`)."""

    def __init__(self, label_smoothing=0.0, name="sigmoid_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        y_true = keras.ops.cast(y_true, y_pred.dtype)
        if self.label_smoothing:
            y_true = y_true * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        per_class = keras.ops.binary_crossentropy(y_true, y_pred, from_logits=True)
        return keras.ops.sum(per_class, axis=-1)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}
