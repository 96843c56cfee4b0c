"""Crash-safe checkpoints: writing (atomically: a SIGKILL leaves the previous ones intact), rotating, listing and
restoring them; resume as a value (`find_resume`). The step counter is the whole data position."""

import dataclasses
import logging

import keras
import numpy as np

from keras_vit import files
from keras_vit.files import atomic_write
from keras_vit.weights import CheckpointError

from ..placement import processes
from . import checkpoint_file
from .checkpoint_file import NonFiniteStateError, listing, pair_by_path

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "NonFiniteStateError",
    "Resume",
    "find_resume",
]

logger = logging.getLogger("training")


@dataclasses.dataclass(frozen=True)
class Resume:
    """The checkpoint a run resumes from, read once from its folder (`find_resume`) and then passed by value.

    Attributes:
        path: the file.
        header: its JSON header (step, variable paths, schedule, run id, fingerprint, history).
        arrays: {name: array} of the file.
        steps: the steps of every checkpoint file in the folder (from their names), oldest first.
        skipped: unreadable files met on the way (newest first); the next good save removes them.
    """

    path: str
    header: dict
    arrays: dict
    steps: tuple = ()
    skipped: tuple = ()

    @property
    def step(self):
        return int(self.header["step"])

    @property
    def schedule(self):
        """The learning-rate schedule's config the checkpoint was written with."""
        return self.header["schedule"]

    @property
    def metric_paths(self):
        return self.header.get("metric_paths", [])


def find_resume(directory):
    """The newest readable checkpoint in `directory` as a `Resume`, or None when it holds none (see `load_latest`)."""
    return CheckpointManager(directory, None, None).load_latest()


class CheckpointManager:
    """Saves and restores (model, optimizer) state in `directory`, keeping the newest `keep` files.

    Not `keras.callbacks.BackupAndRestore`, which restores epochs but not batches, writes in place and ignores
    SIGTERM. A file is written beside its final name and renamed over it (`os.replace`), or to a URL in one write.

    Each file holds the arrays under `model/NNNNN` and `optimizer/NNNNN`, and a JSON header with the step, the
    variable paths of both groups (restore matches by path, so a reordering cannot mix weights up, and a mismatch
    is named) and a SHA-256 of every array (a file that reads but does not match it is treated as unreadable).
    """

    def __init__(self, directory, model, optimizer, keep=2, write=True, skipped=(), fitted=None):
        self.directory = directory
        self.model = model
        # The model `fit` runs (`training.device_input.DeviceInput` over `model`, or `model`): it holds the step's
        # running metrics and, on JAX, the training state during an epoch; the weights saved are `model`'s.
        self.fitted = model if fitted is None else fitted
        self.optimizer = optimizer
        self.keep = keep
        self.write = write  # False on the non-chief workers of a multi-worker run
        self.skipped = list(skipped)  # unreadable checkpoints met by `load_latest` (or a `Resume`), newest first
        self.restored_path = None

    def _variables(self):
        return {"model": list(self.model.variables), "optimizer": list(self.optimizer.variables)}

    def step(self):
        """The optimiser step: updates applied (with gradient accumulation, Keras counts micro-steps // accum)."""
        return int(keras.ops.convert_to_numpy(self.optimizer.iterations))

    def save(self, extra=None):
        """Writes the checkpoint of the current step (only where `write`); returns its path."""
        # Keras' JAX trainer keeps the training state outside the variables during an epoch (they read None);
        # its public sync puts it back. The TensorFlow trainer has no such method and nothing to sync.
        sync = getattr(self.fitted, "jax_state_sync", None)
        if sync is not None:
            sync()
        step = self.step()
        path = files.join(self.directory, checkpoint_file.file_name(step))
        # The epoch's running metric sums (loss and accuracy totals and counts): a resume in mid-epoch restores them,
        # so the epoch's logged row covers all its steps, not only those after the resume. Read on every worker:
        # under MultiWorkerMirroredStrategy reading a metric (a sync-on-read variable) is a collective.
        metrics = list(getattr(self.fitted, "metrics_variables", ()))
        metric_values = [np.asarray(variable.numpy()) for variable in metrics]
        # Variables split over several processes' devices (fsdp) are gathered on every process: a collective.
        gathered = {
            id(variable): processes.gather(variable.value)
            for variables in self._variables().values()
            for variable in variables
            if processes.spans_processes(variable.value)
        }
        if not self.write:
            return path
        arrays = {f"metrics/{i:05d}": value for i, value in enumerate(metric_values)}
        for group, variables in self._variables().items():
            for i, variable in enumerate(variables):
                value = gathered[id(variable)] if id(variable) in gathered else np.asarray(variable.numpy())
                arrays[f"{group}/{i:05d}"] = value
                if value.dtype.kind == "f" and not np.isfinite(value).all():  # weights and optimizer moments
                    raise NonFiniteStateError(f"{variable.path} holds NaN/Inf at step {step}; not saved.")
        header = {"step": step, "paths": {g: [v.path for v in vs] for g, vs in self._variables().items()}}
        header["metric_paths"] = [v.path for v in metrics]  # apart from "paths": what `restore` must fit
        header.update(extra or {})
        arrays = checkpoint_file.sealed(arrays, header)
        atomic_write(path, lambda f: np.savez(f, **arrays))
        files.fsync_directory(self.directory)
        self._rotate(step)
        return path

    def _rotate(self, step):
        """Deletes all but the newest `keep` checkpoints up to `step` (just written, so good), and the files
        `load_latest` found unreadable. Files of later steps are none of those: they are left alone, and never
        counted among the `keep`, so a bad file of a higher step cannot push the good ones out."""
        written = files.join(self.directory, checkpoint_file.file_name(step))  # may have replaced a skipped file
        bad = set(self.skipped) - {written}
        for path in bad:
            if files.exists(path):
                files.remove(path)
        self.skipped = []
        # The temporary files of writes killed before their rename (atomic_write leaves them then): only the chief
        # writes here, and its own write is complete, so none is in use.
        for stale in files.glob(files.join(self.directory, ".ckpt-*.tmp")):
            files.remove(stale)
        good = [p for p in self.checkpoints() if p not in bad and checkpoint_file.step_of(p) <= step]
        for old in good[: -self.keep]:
            files.remove(old)

    def checkpoints(self):
        """Checkpoint paths, oldest first."""
        paths = [p for p in files.glob(files.join(self.directory, "ckpt-*.npz")) if checkpoint_file.NAME.search(p)]
        return sorted(paths, key=checkpoint_file.step_of)

    read = staticmethod(checkpoint_file.read)  # (header, arrays) of one file; raises if damaged

    def load_latest(self):
        """The newest readable checkpoint as a `Resume`, or None when the directory holds none.

        Unreadable files (truncated, damaged, not a checkpoint) are skipped with a warning naming each; they are
        remembered in `skipped` and removed once a newer good checkpoint has been written. Needs no model.

        Raises:
            CheckpointError: checkpoint files exist but none of them can be read.
        """
        self.skipped = []
        paths = self.checkpoints()
        for path in reversed(paths):
            try:
                header, arrays = self.read(path)
            except checkpoint_file.DAMAGE as err:  # truncated, damaged or not a checkpoint: try an older one
                logger.warning("Skipping unreadable checkpoint %s (%s: %s)", path, type(err).__name__, err)
                self.skipped.append(path)
                continue
            except Exception as err:
                # A permission or network error says nothing about the file: it is not marked damaged (so never
                # deleted by the next save), and the run stops instead of falling back to an older step.
                message = " ".join(str(err).split())  # gfile errors span lines
                raise CheckpointError(
                    f"Cannot read checkpoint {path} ({type(err).__name__}: {message}); that is an access problem, "
                    f"not damage, so no checkpoint was skipped or marked for deletion. Fix the access (permissions, "
                    f"network, credentials) and run the same command again."
                ) from err
            steps = tuple(checkpoint_file.step_of(p) for p in paths)
            return Resume(path, header, arrays, steps=steps, skipped=tuple(self.skipped))
        if paths:
            raise CheckpointError(
                f"{self.directory} holds {len(paths)} checkpoint file(s) and none can be read (newest: {paths[-1]}); "
                f"the run will not silently start again from step 0. Move the checkpoints directory away (or use "
                f"a new --workdir) to start afresh, or restore a good checkpoint file into it."
            )
        return None

    def restore(self, resume):
        """Assigns a `Resume` to the model and optimizer, matching variables by path; returns its header."""
        path, header, arrays = resume.path, resume.header, resume.arrays
        for group, variables in self._variables().items():
            saved_paths = header["paths"][group]
            pairs, missing, unused = pair_by_path(saved_paths, [v.path for v in variables])
            if missing or unused:
                raise CheckpointError(
                    f"Checkpoint {path} does not fit this run's {group} variables: missing from it: "
                    f"{listing(missing) or 'none'}; in it but not in the run: {listing(unused) or 'none'}. It was "
                    f"written by a different model or optimizer configuration: use a new --workdir, or the "
                    f"configuration that wrote it."
                )
            values = [arrays[f"{group}/{pairs[j]:05d}"] for j in range(len(variables))]
            for j, (value, variable) in enumerate(zip(values, variables)):
                if tuple(value.shape) != tuple(variable.shape):
                    raise CheckpointError(
                        f"Checkpoint {path}: {saved_paths[pairs[j]]} has shape {value.shape}, the run's "
                        f"{variable.path} has {tuple(variable.shape)}. Use a new --workdir for a different model."
                    )
            for value, variable in zip(values, variables):
                variable.assign(value)
        self.restored_path = path
        return header

    def restore_metrics(self, resume):
        """Assigns a checkpoint's running metric sums to the model's metrics; returns whether they fitted.

        Called at the start of the epoch a mid-epoch resume continues (after Keras has reset the metrics). A file
        without them, or with metrics of another compile, leaves the metrics as they are, with a warning: the
        epoch's logged row then covers only the steps after the resume (the weights are right either way).
        """
        path, arrays = resume.path, resume.arrays
        variables = list(getattr(self.fitted, "metrics_variables", ()))
        saved = resume.metric_paths
        pairs, missing, unused = pair_by_path(saved, [v.path for v in variables])
        values = [arrays[f"metrics/{pairs[j]:05d}"] for j in range(len(variables)) if j in pairs]
        if missing or unused or any(tuple(x.shape) != tuple(v.shape) for x, v in zip(values, variables)):
            logger.warning(
                "Checkpoint %s holds other running metrics (%s) than this run (%s); this epoch's log row covers "
                "only the steps after the resume.",
                path,
                listing(saved) or "none",
                listing([v.path for v in variables]) or "none",
            )
            return False
        for value, variable in zip(values, variables):
            variable.assign(value)
        return True

    def restore_latest(self):
        """Restores the newest readable checkpoint; returns its header, or None when there is none.

        The optimizer must be built (`optimizer.build(model.trainable_variables)`) before this is called. The
        file restored is `restored_path` afterwards.

        Raises:
            CheckpointError: checkpoints exist but none is readable, or the newest readable one does not fit.
        """
        loaded = self.load_latest()
        return None if loaded is None else self.restore(loaded)
