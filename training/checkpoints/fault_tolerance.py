"""The fault-tolerance callback: checkpoints on schedule, stops on SIGTERM (after saving) and on a NaN loss, at the same
step on every worker; what a stopped run raises carries the settings that rescue it."""

import math
import signal
import threading

import keras
import numpy as np

from .checkpoint_file import NonFiniteStateError


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the last good checkpoint was kept.

    Attributes:
        step, value: where the loss stopped being finite, and what it was.
        last_saved: the step of the last good checkpoint; `directory`: where it is.
        rescue: the settings that continue the run from it at a tenth of its learning rate
            ({"rescue": True, "learning_rate": ..., "global_clipnorm": 1.0 when it had none}); a learning rate
            of None when the run's was not recorded.
    """

    def __init__(self, step, value, last_saved, directory, rescue):
        self.step, self.value, self.last_saved, self.directory, self.rescue = step, value, last_saved, directory, rescue
        settings = ", ".join(f"{key}={'...' if value is None else value}" for key, value in rescue.items())
        super().__init__(self.line(f"run it again with {settings}"))

    def __reduce__(self):  # picklable, as exceptions are (the arguments are not the message)
        return type(self), (self.step, self.value, self.last_saved, self.directory, self.rescue)

    def line(self, how_to_rerun):
        """The message, with `how_to_rerun` (the Python or the command-line form of `rescue`) in its place."""
        return (
            f"The training loss became {self.value} by step {self.step}; training stopped. The last good checkpoint "
            f"(step {self.last_saved}) is kept in {self.directory}. To continue from it with a lower learning rate, "
            f"{how_to_rerun} (recorded in the run's history); if it diverges again, check the data for NaN/Inf."
        )


class Preempted(RuntimeError):
    """The run received SIGTERM, saved a checkpoint and stopped; run the same command again to resume."""


def rescue_settings(fingerprint):
    """The settings that resume a run of this fingerprint from its last good checkpoint at a tenth of its rate."""
    rate = fingerprint.get("learning_rate")
    settings = {"rescue": True, "learning_rate": float(f"{rate / 10:.3g}") if isinstance(rate, (int, float)) else None}
    if "global_clipnorm" in fingerprint and fingerprint["global_clipnorm"] is None:
        settings["global_clipnorm"] = 1.0
    return settings


class FaultTolerance(keras.callbacks.Callback):
    """Checkpoints every `every` steps and at each epoch end; stops on SIGTERM (after saving) and on NaN loss.

    After `fit` returns, call `raise_if_stopped()`: it raises `NonFiniteLossError` or `Preempted`.

    Args:
        manager: the run's `training.checkpoints.checkpointing.CheckpointManager`.
        every: steps between checkpoints (0: epoch ends only).
        header: what every checkpoint's header records besides the state (schedule, run identity).
        agree: multi-worker runs (`Placement.stop_agreement()`): shares each step's stop flags between the
            workers, so a NaN loss or a SIGTERM on any one of them stops every one at the same step: all save (the
            chief writes) and leave `fit`, instead of the others waiting forever in their next collective.
        accum_steps: fit batches per optimiser step (gradient accumulation).
        resume_metrics_from: a mid-epoch resume's `Resume`: the interrupted epoch's row then counts its steps
            before the resume too.
    """

    def __init__(self, manager, every=0, header=None, agree=None, accum_steps=1, resume_metrics_from=None):
        super().__init__()
        self.manager = manager
        self.accum_steps = accum_steps
        self.every = every
        self.header = header or {}
        self.agree = agree
        self.bad_loss = None  # (step, value)
        self.preempted_at = None
        self.last_saved = None
        self._sigterm = threading.Event()
        self._previous_handler = None
        self._epoch_start = 0
        self.resume_metrics_from = resume_metrics_from
        self._mid_update = False

    # SIGTERM: only a flag in the handler; the save happens between steps, where the state is consistent.
    def _on_sigterm(self, signum, frame):
        self._sigterm.set()

    def on_train_begin(self, logs=None):
        self.last_saved = self.manager.step()
        saved = self.resume_metrics_from.metric_paths if self.resume_metrics_from is not None else []
        if len(saved) > len(self.model.metrics_variables):
            # Keras builds the compiled metrics in the first step (without a tf.distribute strategy), after
            # `on_epoch_begin`, which restores their sums: build them now with a zero-weight sample (the epoch's
            # reset clears it).
            zeros = np.zeros((1, self.manager.model.output_shape[-1]), "float32")  # the plain model's
            self.model.compute_metrics(zeros, zeros, zeros, sample_weight=np.zeros((1,), "float32"))
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

    def on_train_end(self, logs=None):
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None

    def on_epoch_begin(self, epoch, logs=None):
        # Within an epoch the step is counted from here, not read from the optimizer: under Keras' JAX trainer its
        # variables hold no value until the epoch ends (see `CheckpointManager.save`).
        self._epoch_start = self.manager.step()
        if self.resume_metrics_from is not None:  # a mid-epoch resume: Keras has just reset the metrics
            self.manager.restore_metrics(self.resume_metrics_from)
            self.resume_metrics_from = None

    def _step(self, batch):
        # `batch` is the index of the last fit batch run (steps_per_execution); with gradient accumulation a fit
        # batch is a micro-batch, and the step counts optimiser updates.
        return self._epoch_start + (batch + 1) // self.accum_steps

    def _save(self, step):
        if step != self.last_saved:
            try:
                self.manager.save(self.header)
            except NonFiniteStateError:
                self.bad_loss = (step, float("nan"))
                self.model.stop_training = True
                return
            self.last_saved = step

    def on_train_batch_end(self, batch, logs=None):
        self._mid_update = bool((batch + 1) % self.accum_steps)
        step = self._step(batch)
        loss = (logs or {}).get("loss")
        bad = loss is not None and not math.isfinite(float(loss))
        term = self._sigterm.is_set()
        if self.agree is not None:
            bad, term = (count > 0 for count in self.agree([int(bad), int(term)]))
        if bad:
            local = float(loss) if loss is not None else float("nan")
            self.bad_loss = (step, local if not math.isfinite(local) else float("nan"))
            self.model.stop_training = True
            return
        if self._mid_update:
            return  # mid-update: the accumulators hold a partial sum; checkpoints land on optimiser steps only
        if term:
            self._save(step)
            if self.bad_loss is not None:
                return
            self.preempted_at = step
            self.model.stop_training = True
            return
        # The last batch of an epoch is saved by `on_epoch_end`, after the loggers have written the epoch's row (the
        # trainer puts them first): a crash between the two then repeats the epoch's tail and rewrites its row,
        # instead of resuming after an epoch whose row was never written.
        last_of_epoch = batch + 1 >= ((self.params or {}).get("steps") or math.inf)
        if self.every and step - self.last_saved >= self.every and not last_of_epoch:
            self._save(step)

    def on_epoch_end(self, epoch, logs=None):
        # A callback that stops `fit` between the micro-batches of an update leaves a partial sum: not a step.
        if self.bad_loss is None and self.preempted_at is None and not self._mid_update:
            self._save(self.manager.step())

    def raise_if_stopped(self):
        if self.bad_loss is not None:
            step, value = self.bad_loss
            rescue = rescue_settings(self.header.get("fingerprint", {}))
            raise NonFiniteLossError(step, value, self.last_saved, self.manager.directory, rescue)
        if self.preempted_at is not None:
            raise Preempted(
                f"SIGTERM received: saved the checkpoint of step {self.preempted_at} in {self.manager.directory} "
                f"and stopped. Run the same command again to resume."
            )
