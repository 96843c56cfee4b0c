"""Crash-safe checkpoints as Keras callbacks: atomic writes, step-exact resume, SIGTERM and NaN handling.

A checkpoint is one `.npz` file, `checkpoints/ckpt-<step>.npz`, holding every model variable (weights and the
dropout RNG states), every optimizer variable (its step counter, moments) and a small JSON header. It is written
to a temporary file in the same directory and renamed over the final name (`os.replace`), or to a URL
(`gs://...`) in one object write, so a SIGKILL at any moment leaves the previous checkpoints intact. The step
counter is the whole data position, because the input pipeline (`training.data.train_dataset`) is a pure function
of the step. `keras.callbacks.BackupAndRestore` is not used: it restores epochs but not batches, writes in place,
and does not handle SIGTERM.
"""

import dataclasses
import hashlib
import json
import logging
import math
import re
import signal
import struct
import threading
import zipfile
import zlib

import keras
import numpy as np

from keras_vit import files, weights
from keras_vit.files import atomic_write

logger = logging.getLogger("training")
_NAME = re.compile(r"ckpt-(\d+)\.npz$")


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the last good checkpoint was kept."""


class NonFiniteStateError(FloatingPointError):
    """A model or optimizer variable is NaN or infinite; such a state is never written as a checkpoint."""


class Preempted(RuntimeError):
    """The run received SIGTERM, saved a checkpoint and stopped; run the same command again to resume."""


class CheckpointError(weights.CheckpointError):
    """Checkpoints exist but none can be restored into this run (all unreadable, or written by another model)."""


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
        """The learning-rate schedule's config the checkpoint was written with (None in older files)."""
        return self.header.get("schedule")

    @property
    def metric_paths(self):
        return self.header.get("metric_paths", [])


def find_resume(directory):
    """The newest readable checkpoint in `directory` as a `Resume`, or None when it holds none (see `load_latest`)."""
    return CheckpointManager(directory, None, None).load_latest()


# Header format 2: the SHA-256 covers the header too (paths, step, schedule, run id, fingerprint, history).
_FORMAT = 2


def _checksum(arrays, header=None):
    """SHA-256 over `header` (a dict; its own "sha256" left out; None for format-1 files, which covered only their
    arrays) and the names, dtypes, shapes and bytes of `arrays` (a dict), in name order."""
    digest = hashlib.sha256()
    if header is not None:
        covered = {k: v for k, v in header.items() if k != "sha256"}
        digest.update(json.dumps(covered, sort_keys=True).encode("utf-8") + b"\0")
    for key in sorted(arrays):
        value = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


# What reading a damaged file raises: a bad or truncated zip, an array cut short, a header that is not JSON or fails
# its checksum (ValueError). Anything else (PermissionError, a network error) is not evidence of damage.
_DAMAGE = (ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error, struct.error)


_AUTO_SUFFIX = re.compile(r"_\d+(?=/|$)")


def _pair(saved_paths, run_paths):
    """Pairs the run's variables with a checkpoint's by path: {run index: saved index}, and the unpaired of each.

    Exact paths pair first. Keras numbers automatic names per process (a second optimizer is `adam_w_1`, seed
    generators count up across models), so a run in a fresh process and one in a notebook name the same variable
    differently: what is left pairs by the path without those `_N` suffixes, in order.
    """
    pairs = {}
    left_saved = {}
    for i, path in enumerate(saved_paths):
        left_saved.setdefault(path, []).append(i)
    left_run = []
    for j, path in enumerate(run_paths):
        if left_saved.get(path):
            pairs[j] = left_saved[path].pop(0)
        else:
            left_run.append(j)
    by_stem = {}
    for i in sorted(i for indices in left_saved.values() for i in indices):
        by_stem.setdefault(_AUTO_SUFFIX.sub("", saved_paths[i]), []).append(i)
    missing = []
    for j in left_run:
        stem = by_stem.get(_AUTO_SUFFIX.sub("", run_paths[j]))
        if stem:
            pairs[j] = stem.pop(0)
        else:
            missing.append(run_paths[j])
    unused = [saved_paths[i] for indices in by_stem.values() for i in indices]
    return pairs, missing, sorted(unused)


def _listing(names, limit=5):
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


class CheckpointManager:
    """Saves and restores (model, optimizer) state in `directory`, keeping the newest `keep` files.

    Each file holds the arrays under `model/NNNNN` and `optimizer/NNNNN`, and a JSON header with the step, the
    variable paths of both groups (restore matches by path, so a reordering cannot mix weights up, and a mismatch
    is named) and a SHA-256 of every array (a file that reads but does not match it is treated as unreadable).
    """

    def __init__(self, directory, model, optimizer, keep=2, write=True, skipped=()):
        self.directory = directory
        self.model = model
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
        sync = getattr(self.model, "jax_state_sync", None)
        if sync is not None:
            sync()
        step = self.step()
        path = files.join(self.directory, f"ckpt-{step:08d}.npz")
        # The epoch's running metric sums (loss and accuracy totals and counts): a resume in mid-epoch restores them,
        # so the epoch's logged row covers all its steps, not only those after the resume. Read on every worker:
        # under MultiWorkerMirroredStrategy reading a metric (a sync-on-read variable) is a collective.
        metrics = list(getattr(self.model, "metrics_variables", ()))
        metric_values = [np.asarray(variable.numpy()) for variable in metrics]
        if not self.write:
            return path
        arrays = {f"metrics/{i:05d}": value for i, value in enumerate(metric_values)}
        for group, variables in self._variables().items():
            for i, variable in enumerate(variables):
                arrays[f"{group}/{i:05d}"] = value = np.asarray(variable.numpy())
                if value.dtype.kind == "f" and not np.isfinite(value).all():  # weights and optimizer moments
                    raise NonFiniteStateError(f"{variable.path} holds NaN/Inf at step {step}; not saved.")
        header = {"step": step, "paths": {g: [v.path for v in vs] for g, vs in self._variables().items()}}
        header["metric_paths"] = [v.path for v in metrics]  # apart from "paths": what `restore` must fit
        header.update(extra or {})
        header["format"] = _FORMAT
        header = json.loads(json.dumps(header))  # as `read` will see it (tuples become lists)
        header["sha256"] = _checksum(arrays, header)
        arrays["header"] = np.frombuffer(json.dumps(header).encode("utf-8"), np.uint8)
        atomic_write(path, lambda f: np.savez(f, **arrays))
        files.fsync_directory(self.directory)
        self._rotate(step)
        return path

    def _rotate(self, step):
        """Deletes all but the newest `keep` checkpoints up to `step` (just written, so good), and the files
        `load_latest` found unreadable. Files of later steps are none of those: they are left alone, and never
        counted among the `keep`, so a bad file of a higher step cannot push the good ones out."""
        written = files.join(self.directory, f"ckpt-{step:08d}.npz")  # may have replaced a skipped file
        bad = set(self.skipped) - {written}
        for path in bad:
            if files.exists(path):
                files.remove(path)
        self.skipped = []
        # The temporary files of writes killed before their rename (atomic_write leaves them then): only the chief
        # writes here, and its own write is complete, so none is in use.
        for stale in files.glob(files.join(self.directory, ".ckpt-*.tmp")):
            files.remove(stale)
        good = [p for p in self.checkpoints() if p not in bad and int(_NAME.search(p).group(1)) <= step]
        for old in good[: -self.keep]:
            files.remove(old)

    def checkpoints(self):
        """Checkpoint paths, oldest first."""
        paths = [p for p in files.glob(files.join(self.directory, "ckpt-*.npz")) if _NAME.search(p)]
        return sorted(paths, key=lambda p: int(_NAME.search(p).group(1)))

    @staticmethod
    def read(path):
        """(header, arrays) of one checkpoint file; raises if it cannot be read or fails its checksum."""
        archive = files.load_numpy(path)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("an .npy file, not an .npz checkpoint")
        with archive:
            if "header" not in archive.files:
                raise ValueError("no header: not a checkpoint of this trainer")
            header = json.loads(archive["header"].tobytes().decode("utf-8"))
            if not isinstance(header, dict) or not isinstance(header.get("paths"), dict):
                raise ValueError("its header is not a checkpoint header")
            arrays = {k: archive[k] for k in archive.files if k != "header"}
        expected = header.pop("sha256", None)
        if expected is None:
            raise ValueError("its header carries no checksum, so nothing in it can be verified")
        # Format-1 files (no "format", no run id) had a checksum of their arrays only; a run resumes them once.
        covered = header if "format" in header else None
        if covered is not None and header["format"] != _FORMAT:
            raise ValueError(f"header format {header['format']!r} is not one this version reads ({_FORMAT})")
        if _checksum(arrays, covered) != expected:
            raise ValueError("its header and arrays do not match the checksum it carries (a damaged or edited file)")
        listed = {**header["paths"], "metrics": header.get("metric_paths", [])}
        for group in ("model", "optimizer", "metrics"):
            if len(listed.get(group, ())) != sum(k.startswith(group + "/") for k in arrays):
                raise ValueError(
                    f"its header lists {len(listed.get(group, ()))} {group} paths for a different number of arrays"
                )
        return header, arrays

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
            except _DAMAGE as err:  # truncated, damaged or not a checkpoint: try an older one
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
            steps = tuple(int(_NAME.search(p).group(1)) for p in paths)
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
            pairs, missing, unused = _pair(saved_paths, [v.path for v in variables])
            if missing or unused:
                raise CheckpointError(
                    f"Checkpoint {path} does not fit this run's {group} variables: missing from it: "
                    f"{_listing(missing) or 'none'}; in it but not in the run: {_listing(unused) or 'none'}. It was "
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
        variables = list(getattr(self.model, "metrics_variables", ()))
        saved = resume.metric_paths
        pairs, missing, unused = _pair(saved, [v.path for v in variables])
        values = [arrays[f"metrics/{pairs[j]:05d}"] for j in range(len(variables)) if j in pairs]
        if missing or unused or any(tuple(x.shape) != tuple(v.shape) for x, v in zip(values, variables)):
            logger.warning(
                "Checkpoint %s holds other running metrics (%s) than this run (%s); this epoch's log row covers "
                "only the steps after the resume.",
                path,
                _listing(saved) or "none",
                _listing([v.path for v in variables]) or "none",
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


class FaultTolerance(keras.callbacks.Callback):
    """Checkpoints every `every` steps and at each epoch end; stops on SIGTERM (after saving) and on NaN loss.

    After `fit` returns, call `raise_if_stopped()`: it raises `NonFiniteLossError` or `Preempted`.

    `agree` (multi-worker runs: `Placement.stop_agreement()`) shares each step's stop flags between the workers,
    so a NaN loss or a SIGTERM on any one of them stops every one at the same step: all save (the chief writes)
    and leave `fit`, instead of the others waiting forever in their next collective.
    """

    def __init__(self, manager, every=0, header=None, agree=None, accum_steps=1, resume_metrics_from=None):
        super().__init__()
        self.manager = manager
        self.accum_steps = accum_steps  # fit batches per optimiser step (gradient accumulation)
        self.every = every
        self.header = header or {}
        self.agree = agree
        self.bad_loss = None  # (step, value)
        self.preempted_at = None
        self.last_saved = None
        self._sigterm = threading.Event()
        self._previous_handler = None
        self._epoch_start = 0
        # A mid-epoch resume's `Resume`: the interrupted epoch's row then counts its steps before the resume too.
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
            zeros = np.zeros((1, self.model.output_shape[-1]), "float32")
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

    def rescue_command(self):
        """The `--set` options that resume this run from its last good checkpoint at a tenth of its learning rate."""
        run = self.header.get("fingerprint", {})
        rate = run.get("learning_rate")
        command = "--set rescue=True"
        lower = f"{rate / 10:.3g}" if isinstance(rate, (int, float)) else "..."
        command += f" --set learning_rate={lower}"
        if "global_clipnorm" in run and run["global_clipnorm"] is None:
            command += " --set global_clipnorm=1.0"
        return command

    def raise_if_stopped(self):
        if self.bad_loss is not None:
            step, value = self.bad_loss
            raise NonFiniteLossError(
                f"The training loss became {value} by step {step}; training stopped. The last good checkpoint "
                f"(step {self.last_saved}) is kept in {self.manager.directory}. To continue from it with a lower "
                f"learning rate, run the same command again with {self.rescue_command()} (recorded in the run's "
                f"history); if it diverges again, check the data for NaN/Inf."
            )
        if self.preempted_at is not None:
            raise Preempted(
                f"SIGTERM received: saved the checkpoint of step {self.preempted_at} in {self.manager.directory} "
                f"and stopped. Run the same command again to resume."
            )
