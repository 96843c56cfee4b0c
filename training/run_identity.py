"""Who owns a workdir: its run id, the fingerprint a resume must match (every option but `EXEMPT`, a folder by its
content), the run's history, and the workdir lock."""

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import socket
import uuid

from keras_vit import files, images

# Fields a resume may change freely, and why each cannot change what the restored step means.
EXEMPT = {
    "extend_epochs": "a switch for one start: it allows a changed epochs",
    "rescue": "a switch for one start: it allows a changed learning_rate or global_clipnorm",
    "data_dir": "where TFDS files live, which may move; the dataset name and splits say which data it is",
    "init": "read only at step 0: a resumed run's weights come from its checkpoint (and the path may move)",
    "checkpoint_every": "when checkpoints are written, not what is trained",
    "eval_every": "held-out evaluations during training do not touch the weights",
    "extra_evals": "evaluated once, after training",
    "ema_export": "which of the two evaluated weight sets model.keras holds, chosen after training",
    "num_samples": "an output written after training",
    "num_calibration": "an output written after training",
    "plots": "figures drawn after training",
    "strategy": "where the run is placed: a preempted run may resume on other hardware",
    "join_timeout": "how long the processes of a run wait for each other at the start",
    "jit_compile": "how the same steps are compiled",
    "device_input": "where the same stream is scaled and mixed (host or device); 'auto' follows the hardware",
    "steps_per_execution": "steps per call into the compiled step; the resume keeps it a divisor of the epoch",
}
# Keys of a dict field a resume may change freely, and why.
NESTED_EXEMPT = {
    "model": {"remat": "recomputes activations in the backward pass: no variable, name or output changes"},
}
# Fields a resume may change when the named switch is on; the change is recorded in the run's history.
ALLOWED_BY = {"extend_epochs": ("epochs",), "rescue": ("learning_rate", "global_clipnorm")}

RUN_FILE = "run.json"


class WorkdirInUse(ValueError):
    """Another process holds the workdir's lock. A ValueError: the CLI reports it in one line, with exit code 2."""


LOCK_FILE = ".lock"


def folder_identity(path, paths, max_bytes=None):
    """'folder: N files, B bytes, sha256 H' for an image folder: its relative paths, sizes and bytes, not its path.

    Args:
        path: the folder (`folder:PATH`).
        paths: its image files as the data scan kept them (`Source.files`): a file the scan left out (a FIFO, a
            device, a file over the limit) is never opened here.
        max_bytes: the per-image limit (`TrainConfig.max_image_bytes`). Files are read by the same reader as the
            scan (`keras_vit.images.read_file`: regular files only, at most this many bytes), so a file replaced
            since the scan fails in one line instead of blocking or filling the memory.
    """
    digest = hashlib.sha256()
    total = 0
    for relative, full in sorted((files.relpath(p, path).replace(os.sep, "/"), p) for p in paths):
        data = images.read_file(full, max_bytes)
        total += len(data)
        digest.update(f"{relative}\0{len(data)}\0".encode("utf-8", "surrogateescape"))
        digest.update(hashlib.sha256(data).digest())
    return f"folder: {len(paths)} files, {total} bytes, sha256 {digest.hexdigest()[:16]}"


def fingerprint(config, dataset_files=None):
    """{field: JSON value} of the fields a resume must keep, with a `folder:` dataset as its content identity.

    `dataset_files`: a `folder:` dataset's files as its scan kept them (`Source.files`); required for one.
    """
    values = json.loads(json.dumps(config.to_dict()))
    for name in EXEMPT:
        values.pop(name, None)
    if str(config.dataset).startswith("folder:"):
        if dataset_files is None:
            raise TypeError("a folder: dataset's fingerprint needs the files its scan kept (Source.files)")
        values["dataset"] = folder_identity(config.dataset[len("folder:") :], dataset_files, config.max_image_bytes)
    return values


def _now():
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@dataclasses.dataclass
class RunIdentity:
    """A run's id, this start's fingerprint and the history of its starts that changed something."""

    run_id: str
    fingerprint: dict
    history: list

    def header(self):
        """What every checkpoint of this run carries (inside its checksum)."""
        return {"run_id": self.run_id, "fingerprint": self.fingerprint, "history": self.history}

    def write(self, workdir):
        files.atomic_write_text(
            files.join(workdir, RUN_FILE), json.dumps(self.header(), indent=2, sort_keys=True) + "\n"
        )


def resolve(workdir, config, resume, dataset_files=None):
    """The run this start continues (or a new one), refusing a checkpoint of another run or a changed config.

    Args:
        workdir: the run's directory.
        config: this start's `TrainConfig`.
        resume: the `training.checkpoints.checkpointing.Resume` the run continues from, or None.
        dataset_files: a `folder:` dataset's files as the data scan kept them (`Source.files`).

    Raises:
        ValueError: the checkpoint belongs to another run, or a fingerprint field changed without its switch.
    """
    record_path = files.join(workdir, RUN_FILE)
    record = json.loads(files.read_text(record_path)) if files.exists(record_path) else None
    header = resume.header if resume else None
    current = fingerprint(config, dataset_files)
    if header is not None:
        if record is not None and record.get("run_id") != header["run_id"]:
            raise ValueError(
                f"Checkpoint {resume.path} belongs to run {header['run_id']}, but {workdir} is run {record['run_id']} "
                f"({record_path}); a checkpoint of another run is not resumed. Move it back to its own workdir, "
                f"or use a new --workdir."
            )
        run_id, previous, history = header["run_id"], header.get("fingerprint"), list(header.get("history", []))
        step = int(header["step"])
    elif record is not None:  # started before, no checkpoint yet
        run_id, previous, history, step = record["run_id"], record.get("fingerprint"), list(record["history"]), 0
    else:
        run_id, previous, step = _new_id(), None, 0
        history = [{"event": "start", "step": 0, "time": _now()}]
    changed = _changes(previous, current)
    allowed = {key for switch, keys in ALLOWED_BY.items() if getattr(config, switch, False) for key in keys}
    refused = [k for k in changed if k not in allowed]
    if refused:
        raise ValueError(_refusal(workdir, run_id, refused, changed))
    for switch, keys in ALLOWED_BY.items():
        done = {k: list(changed[k]) for k in keys if k in changed}
        if done:
            details = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in done.items())
            print(f"[training] {switch}: {details} from step {step} (recorded in {RUN_FILE} and the checkpoints)")
            history.append({"event": switch, "step": step, "changed": done, "time": _now()})
    return RunIdentity(run_id, current, history)


def _changes(previous, current):
    """{field: (old, new)} of the fingerprint fields that differ; a dict field (`model`) by its own keys, named
    `model.KEY`, so a refusal shows only what changed, and without the keys `NESTED_EXEMPT` lets change."""
    changed = {}
    for key, value in current.items():
        if not previous or key not in previous or previous[key] == value:
            continue
        old = previous[key]
        if not (isinstance(old, dict) and isinstance(value, dict)):
            changed[key] = (old, value)
            continue
        for sub in sorted(set(old) | set(value)):
            if sub not in NESTED_EXEMPT.get(key, {}) and old.get(sub) != value.get(sub):
                changed[f"{key}.{sub}"] = (old.get(sub), value.get(sub))
    return changed


def _new_id():
    return f"{datetime.datetime.now(datetime.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}"


def _refusal(workdir, run_id, refused, changed):
    details = ", ".join(f"{k}: {changed[k][0]!r} -> {changed[k][1]!r}" for k in refused)
    hints = []
    if "epochs" in refused:
        hints.append(
            "or, to change only the length on purpose, add --set extend_epochs=True (the rest of the "
            "learning-rate decay is stretched from the restored step, continuously)"
        )
    if {"learning_rate", "global_clipnorm"} & set(refused):
        hints.append(
            "or, to rescue a diverged run from its last checkpoint on purpose, add --set rescue=True (the new "
            "learning_rate / global_clipnorm apply from the restored step and are recorded in the run's history)"
        )
    return (
        f"{workdir} holds run {run_id} with a different {', '.join(refused)} ({details}); resuming it would not "
        f"continue the same run. Use a new --workdir, or the original settings" + "".join(f"; {h}" for h in hints) + "."
    )


@contextlib.contextmanager
def workdir_lock(workdir):
    """Holds an advisory lock (`flock`) on WORKDIR/.lock while the block runs; a second holder fails at once.

    The lock belongs to the open file, so the kernel drops it when the process dies however it dies: a killed
    trainer never leaves a stale lock. URLs (`gs://...`) have no such lock: nothing is held there.

    Raises:
        WorkdirInUse: another process holds the lock (the message names its pid and host).
    """
    if files.is_remote(workdir):
        yield
        return
    import fcntl

    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, LOCK_FILE)
    handle = open(path, "a+")  # noqa: SIM115  (held open for the whole run: the lock lives as long as the file)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown process"
            raise WorkdirInUse(
                f"{workdir} is in use by another trainer ({holder}, lock {path}); two runs on one workdir would "
                f"interleave its checkpoints and logs. Wait for it to end (or stop it), or use another --workdir."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on host {socket.gethostname()}\n")
        handle.flush()
        yield
    finally:
        handle.close()  # releases the lock
