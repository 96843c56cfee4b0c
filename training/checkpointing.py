"""Crash-safe checkpoints as Keras callbacks: atomic writes, step-exact resume, SIGTERM and NaN handling.

A checkpoint is one `.npz` file, `checkpoints/ckpt-<step>.npz`, holding every model variable (weights and the
dropout RNG states), every optimizer variable (its step counter, moments) and a small JSON header. It is written
to a temporary file in the same directory and renamed over the final name (`os.replace`), or to a URL
(`gs://...`) in one object write, so a SIGKILL at any moment leaves the previous checkpoints intact. The step counter is the whole data position, because the input
pipeline (`training.data.train_dataset`) is a pure function of the step. `keras.callbacks.BackupAndRestore` is
not used: it restores epochs but not batches, writes in place, and does not handle SIGTERM.
"""

import json
import logging
import math
import re
import signal
import threading

import keras
import numpy as np

from keras_vit import files
from keras_vit.files import atomic_write

logger = logging.getLogger("training")
_NAME = re.compile(r"ckpt-(\d+)\.npz$")


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the last good checkpoint was kept."""


class NonFiniteStateError(FloatingPointError):
    """A model variable is NaN or infinite; such a state is never written as a checkpoint."""


class Preempted(RuntimeError):
    """The run received SIGTERM, saved a checkpoint and stopped; run the same command again to resume."""


def checkpoint_steps(directory):
    """The steps of the checkpoints in `directory` (from their names; nothing is read), oldest first."""
    return [int(_NAME.search(p).group(1)) for p in CheckpointManager(directory, None, None).checkpoints()]


class CheckpointManager:
    """Saves and restores (model, optimizer) state in `directory`, keeping the newest `keep` files."""

    def __init__(self, directory, model, optimizer, keep=2, write=True):
        self.directory = directory
        self.model = model
        self.optimizer = optimizer
        self.keep = keep
        self.write = write  # False on the non-chief workers of a multi-worker run

    def _variables(self):
        return {"model": list(self.model.variables), "optimizer": list(self.optimizer.variables)}

    def step(self):
        return int(np.asarray(self.optimizer.iterations.numpy()))

    def save(self, extra=None):
        """Writes the checkpoint of the current step (only where `write`); returns its path."""
        # Keras' JAX trainer keeps the training state outside the variables during an epoch (they read None);
        # its public sync puts it back. The TensorFlow trainer has no such method and nothing to sync.
        sync = getattr(self.model, "jax_state_sync", None)
        if sync is not None:
            sync()
        step = self.step()
        path = files.join(self.directory, f"ckpt-{step:08d}.npz")
        if not self.write:
            return path
        arrays = {}
        for group, variables in self._variables().items():
            for i, variable in enumerate(variables):
                arrays[f"{group}/{i:05d}"] = value = np.asarray(variable.numpy())
                if group == "model" and value.dtype.kind == "f" and not np.isfinite(value).all():
                    raise NonFiniteStateError(f"{variable.path} holds NaN/Inf at step {step}; not saved.")
        header = {"step": step, "paths": {g: [v.path for v in vs] for g, vs in self._variables().items()}}
        header.update(extra or {})
        arrays["header"] = np.frombuffer(json.dumps(header).encode("utf-8"), np.uint8)
        atomic_write(path, lambda f: np.savez(f, **arrays))
        for old in self.checkpoints()[: -self.keep]:
            files.remove(old)
        return path

    def checkpoints(self):
        """Checkpoint paths, oldest first."""
        paths = [p for p in files.glob(files.join(self.directory, "ckpt-*.npz")) if _NAME.search(p)]
        return sorted(paths, key=lambda p: int(_NAME.search(p).group(1)))

    def restore_latest(self):
        """Restores the newest readable checkpoint; returns its header, or None when there is none.

        The optimizer must be built (`optimizer.build(model.trainable_variables)`) before this is called.
        """
        for path in reversed(self.checkpoints()):
            try:
                with files.load_numpy(path) as archive:
                    header = json.loads(archive["header"].tobytes().decode("utf-8"))
                    values = {k: archive[k] for k in archive.files if k != "header"}
            except Exception as err:  # a file from elsewhere, a full disk: fall back to an older one
                logger.warning("Skipping unreadable checkpoint %s (%s: %s)", path, type(err).__name__, err)
                continue
            for group, variables in self._variables().items():
                if len(header["paths"][group]) != len(variables):
                    raise ValueError(
                        f"Checkpoint {path} holds {len(header['paths'][group])} {group} variables but this run has "
                        f"{len(variables)}: it was written by a different model or optimizer configuration. Use a "
                        f"new --workdir, or the configuration that wrote it."
                    )
                for i, variable in enumerate(variables):
                    value = values[f"{group}/{i:05d}"]
                    if tuple(value.shape) != tuple(variable.shape):
                        raise ValueError(
                            f"Checkpoint {path}: {header['paths'][group][i]} has shape {value.shape}, the run's "
                            f"{variable.path} has {tuple(variable.shape)}. Use a new --workdir for a different model."
                        )
                    variable.assign(value)
            return header
        return None


class FaultTolerance(keras.callbacks.Callback):
    """Checkpoints every `every` steps and at each epoch end; stops on SIGTERM (after saving) and on NaN loss.

    After `fit` returns, call `raise_if_stopped()`: it raises `NonFiniteLossError` or `Preempted`.
    """

    def __init__(self, manager, every=0, header=None):
        super().__init__()
        self.manager = manager
        self.every = every
        self.header = header or {}
        self.bad_loss = None  # (step, value)
        self.preempted_at = None
        self.last_saved = None
        self._sigterm = threading.Event()
        self._previous_handler = None
        self._epoch_start = 0

    # SIGTERM: only a flag in the handler; the save happens between steps, where the state is consistent.
    def _on_sigterm(self, signum, frame):
        self._sigterm.set()

    def on_train_begin(self, logs=None):
        self.last_saved = self.manager.step()
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

    def _step(self, batch):
        return self._epoch_start + batch + 1  # `batch` is the index of the last batch run (steps_per_execution)

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
        step = self._step(batch)
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.bad_loss = (step, float(loss))
            self.model.stop_training = True
            return
        if self._sigterm.is_set():
            self._save(step)
            if self.bad_loss is not None:
                return
            self.preempted_at = step
            self.model.stop_training = True
            return
        if self.every and step - self.last_saved >= self.every:
            self._save(step)

    def on_epoch_end(self, epoch, logs=None):
        if self.bad_loss is None and self.preempted_at is None:
            self._save(self.manager.step())

    def raise_if_stopped(self):
        if self.bad_loss is not None:
            step, value = self.bad_loss
            raise NonFiniteLossError(
                f"The training loss became {value} by step {step}; training stopped. The last good checkpoint "
                f"(step {self.last_saved}) is kept in {self.manager.directory}. Lower the learning rate, check the "
                f"data for NaN/Inf, keep global_clipnorm, then run again (it resumes from that checkpoint)."
            )
        if self.preempted_at is not None:
            raise Preempted(
                f"SIGTERM received: saved the checkpoint of step {self.preempted_at} in {self.manager.directory} "
                f"and stopped. Run the same command again to resume."
            )
