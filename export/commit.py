"""Putting a finished export directory in place as a whole (an atomic swap locally, report.json last on a URL), so that
no reader sees two runs mixed; fault points for the tests that kill an export (docs/export.md, "Reliability")."""

import contextlib
import hashlib
import itertools
import os
import re
import shutil
import signal
import tempfile
import uuid
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; exports there must not share an `out`
    fcntl = None

from keras_vit import files

from .errors import ExportError

REPORT = "report.json"
# What every export writes at the top of `out` besides its formats' files (`staged`'s `owned`); anything else there
# means `out` is not an export directory. (`.staging-*`: what an export killed before this module existed left.)
ALWAYS_OWNED = (r"report\.json", r"\.staging-.*")
_points = itertools.count(1)  # fault points reached in this process


def fault_point(name):
    """A place where the fault-injection tests may kill the export: `KERAS_VIT_EXPORT_KILL_AT=N` makes the process
    SIGKILL itself at the Nth point reached, and `KERAS_VIT_EXPORT_TRACE=FILE` appends each point's name to FILE."""
    number = next(_points)
    trace = os.environ.get("KERAS_VIT_EXPORT_TRACE")
    if trace:
        with open(trace, "a", encoding="utf-8") as f:
            f.write(f"{number} {name}\n")
    if os.environ.get("KERAS_VIT_EXPORT_KILL_AT") == str(number):
        signal.raise_signal(signal.SIGKILL)  # not os.kill(os.getpid()): the tests fake the PID


def check_target(out, owned):
    """Raises `ExportError` unless `out` is absent, an empty directory, or holds only export artifacts: names that
    match `owned` (regular expressions, the formats' `OWNED`) or `ALWAYS_OWNED`."""
    out = os.fspath(out)
    if not files.exists(out):
        return
    if not files.isdir(out):
        raise ExportError(f"The output path {out!r} is a file. Pass a directory (absent, empty, or an earlier export).")
    pattern = re.compile("^(" + "|".join((*ALWAYS_OWNED, *owned)) + ")$")
    foreign = [name for name in files.listdir(out) if not pattern.match(name)]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ExportError(
            f"The output directory {out!r} holds files an export does not write ({shown}). An export replaces "
            "its output directory as a whole (report.json, saved_model/, model_*.tflite/.json, "
            "model.onnx/.xml/.bin, embedder_*, feature_maps_*), so pass --out with a new or empty directory, or one "
            "an earlier export wrote."
        )


def _siblings(out, kind):
    """Leftover `.NAME.staging-*` / `.NAME.old-*` directories beside a local `out`, oldest first."""
    parent, name = os.path.split(out)
    # The token is a uuid4's hex; `PID-random` is what exports before the lock wrote.
    pattern = re.compile(rf"^\.{re.escape(name)}\.{kind}-[0-9a-z_-]+$")
    if not os.path.isdir(parent):
        return []
    found = [os.path.join(parent, n) for n in os.listdir(parent) if pattern.match(n)]
    return sorted(found, key=os.path.getmtime)


@contextlib.contextmanager
def claim(out):
    """Takes the export lock on `out` and undoes what killed exports left; yields the path to write to.

    The lock is an advisory `flock` on `.NAME.lock` beside `out`, which the kernel drops when its process dies,
    however it dies: whoever holds it knows that every `.NAME.staging-*` and `.NAME.old-*` beside `out` belongs to a
    dead attempt (no PID is asked whether it lives; in containers every run can be PID 2). The swap itself is one
    `renameat2(RENAME_EXCHANGE)` on Linux, else two renames whose half-done state the next export undoes.

    For a local `out` that is `out` with symlinks resolved (an export replaces the directory a link points at,
    not the link). A URL comes back unchanged and is not locked: object stores have no locks.

    Raises:
        ExportError: another export holds the lock on `out`.
    """
    out = os.fspath(out)
    if files.is_remote(out):
        yield out
        return
    target = os.path.realpath(out)
    lock_path = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.lock")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    fd = _lock(lock_path, out)
    try:
        _recover(target)
        yield target
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.remove(lock_path)  # while still held, so a waiting export sees the file replaced (see _lock)
            os.close(fd)


def _lock(path, out):
    if fcntl is None:
        return None
    fd = _lock_file(path, 0o666, blocking=False)
    if fd is None:
        raise ExportError(
            f"Another export is writing to {out!r} right now (it holds the lock {path}). Wait for it to "
            "finish, or pass another --out."
        )
    return fd


def _lock_file(path, mode, blocking=True):
    """An open descriptor holding `flock` on the file at `path` (created if absent); None when another process
    holds it and not `blocking`."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            held = os.stat(path)
        except FileNotFoundError:
            held = None
        mine = os.fstat(fd)
        if held is not None and (held.st_dev, held.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        # The previous holder removed the file between our open and our lock: lock the file now at `path`.
        os.close(fd)


def _recover(out):
    """Puts an old set renamed aside back if `out` is missing, and removes every staging and old directory
    beside `out`. Only under the lock (`claim`), which makes them all leftovers of dead attempts."""
    old = _siblings(out, "old")
    if old and not os.path.exists(out):
        # Killed between moving the old set aside and moving the new one in: the newest aside is complete.
        os.rename(old[-1], out)
        old = old[:-1]
    for path in old + _siblings(out, "staging"):
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def staged(out, owned):
    """`claim`, `check_target` and `staging_dir` in one: yields (the path to commit to, the staging directory),
    and removes the staging directory however the block ends (after `commit` it is gone already)."""
    with claim(out) as target:
        check_target(target, owned)
        staging = staging_dir(target)
        try:
            yield target, staging
        finally:
            _remove_staging(staging)


def staging_dir(out):
    """A new, empty directory to build the export in: beside a local `out` (the path `claim` yielded), in the
    system temp dir for a URL (see `_url_staging_dir`)."""
    out = os.fspath(out)
    if files.is_remote(out):
        return _url_staging_dir()
    parent, name = os.path.split(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    # os.mkdir's mode, not mkdtemp's private 0o700: this directory becomes `out`.
    staging = os.path.join(parent, f".{name}.staging-{uuid.uuid4().hex}")
    os.mkdir(staging, 0o777)
    return Path(staging)


# A URL export's staging directories, with the lock that marks each one as in use until its export ends.
_URL_STAGING = ".export-staging-"
_url_locks = {}  # staging directory -> the open, flocked descriptor of its lock file


def _url_staging_dir():
    """A new staging directory `.export-staging-TOKEN` for a URL export, in the system temp dir.

    A URL has no sibling directory for the next export to clean, so each URL staging directory has a lock file
    beside it (`.export-staging-TOKEN.lock`), held (`flock`) until the directory is removed. Any staging directory
    whose lock nobody holds belongs to a killed export: every new one first removes those.
    """
    root = tempfile.gettempdir()
    if fcntl is not None:
        _remove_dead_url_staging(root)
    token = uuid.uuid4().hex
    staging = os.path.join(root, f"{_URL_STAGING}{token}")
    if fcntl is not None:
        _url_locks[staging] = _lock_file(f"{staging}.lock", 0o600)
    os.mkdir(staging, 0o700)
    return Path(staging)


def _remove_dead_url_staging(root):
    pattern = re.compile(rf"^{re.escape(_URL_STAGING)}[0-9a-f]{{32}}\.lock$")
    for name in os.listdir(root):
        if not pattern.match(name):
            continue
        lock_path = os.path.join(root, name)
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its export is running
            os.close(fd)
            continue
        try:
            shutil.rmtree(lock_path[: -len(".lock")], ignore_errors=True)
            with contextlib.suppress(OSError):
                os.remove(lock_path)
        finally:
            os.close(fd)


def _remove_staging(staging):
    """Removes a staging directory, and for a URL's its lock file and lock."""
    shutil.rmtree(staging, ignore_errors=True)
    lock = _url_locks.pop(os.fspath(staging), None)
    if lock is not None:
        with contextlib.suppress(OSError):
            os.remove(f"{os.fspath(staging)}.lock")
        os.close(lock)


def manifest(directory):
    """{relative path with "/": {"bytes", "sha256"}} of every file under `directory` (except report.json)."""
    directory = Path(directory)
    listed = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        name = path.relative_to(directory).as_posix()
        if name == REPORT:
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        listed[name] = {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}
    return listed


def write_staged(path, data):
    """Writes bytes to a file in the staging directory, with a fault point in the middle of the write."""
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
        f.flush()
        fault_point(f"writing {Path(path).name}")
        f.write(data[len(data) // 2 :])


def commit(staging, out):
    """Replaces `out` with the complete export in `staging` (see the module docstring); `staging` is consumed."""
    out = os.fspath(out)
    if files.is_remote(out):
        _commit_url(Path(staging), out)
    else:
        _commit_local(Path(staging), out)


use_exchange = True  # the tests switch it off to run the two-rename path on Linux too
# What `files.replace_directory` has done at each of its steps, in the words of this module's fault points.
_STEPS = {
    "swapped": "swapped; old set not yet deleted",
    "moved aside": "old set moved aside",
    "in place": "new set in place; old set not yet deleted",
}


def _commit_local(staging, out):
    files.fsync_tree(staging)  # a rename is durable only once the data it points at is
    fault_point("staged and flushed")
    files.replace_directory(staging, os.path.abspath(out), exchange=use_exchange, step=lambda s: fault_point(_STEPS[s]))


def _commit_url(staging, out):
    try:
        old = files.walk(out) if files.isdir(out) else []
        # The report goes first: from then on the directory no longer claims to be a complete set.
        old.sort(key=lambda path: files.basename(path) != REPORT)
        for path in old:
            fault_point(f"deleting {files.relpath(path, out)}")
            files.remove(path)
        names = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        names.sort(key=lambda name: name == REPORT)  # and comes back last, once everything it lists is there
        for name in names:
            fault_point(f"uploading {name}")
            files.copy_file(staging / name, files.join(out, *name.split("/")))
    finally:
        _remove_staging(staging)
