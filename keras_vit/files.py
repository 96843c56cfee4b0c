"""Atomic file writes, replaces and fsyncs, local or to any `tf.io.gfile` URL, over keras_vit/paths.py (re-exported
here): a reader or a killed writer sees the old file or the whole new one (docs/guarantees.md)."""

import ctypes
import errno
import io
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import uuid

try:
    import fcntl
except ImportError:  # Windows: no flock; temporaries there are not swept
    fcntl = None

# The path helpers, here as they always were (files.join, files.isdir, ...): keras_vit/paths.py.
from keras_vit.paths import (  # noqa: F401
    StorageError,
    _gfile,
    absolute,
    basename,
    dirname,
    exists,
    glob,
    is_remote,
    isdir,
    isfile,
    join,
    listdir,
    load_numpy,
    makedirs,
    open,
    read_bytes,
    read_text,
    relpath,
    remove,
    size,
    walk,
)

# The CLIs' one way in to the one-line messages for file errors (keras_vit/storage_errors.py).
from keras_vit.storage_errors import describe_os_error, describe_storage_error  # noqa: F401

# Fault injection for tests (tests/training/test_resume.py): KERAS_VIT_KILL_AT_WRITE="N" makes the process SIGKILL
# itself during its Nth atomic write (the data written, not yet in place), "N:after" right after that write is in
# place; "NAME" or "NAME:after" at the first write of a file named NAME (e.g. "ckpt-00000008.npz"). Read once, at
# import; writes are counted per process from 1. Never set outside tests.
_KILL_AT_WRITE = os.environ.get("KERAS_VIT_KILL_AT_WRITE", "")
_writes = [0]  # atomic writes started in this process


def _fault_point(path, stage):
    if not _KILL_AT_WRITE:
        return
    target, _, when = _KILL_AT_WRITE.partition(":")
    hit = _writes[0] == int(target) if target.isdigit() else basename(path) == target
    if hit and (when or "during") == stage:
        import sys

        sys.stderr.write(f"[fault injection] SIGKILL {stage} atomic write #{_writes[0]} ({path})\n")
        sys.stderr.flush()
        signal.raise_signal(signal.SIGKILL)  # not os.kill(os.getpid()): tests fake the PID


def atomic_write(path, write):
    """Calls `write(binary_file)` and puts what it wrote at `path` in one atomic step; returns `path`.

    Local paths: written to a temporary file beside `path`, flushed, renamed over `path`; directories are
    created as needed, and the file gets the mode an ordinary `open()` would give it (mkstemp's files are
    private). URLs: written to memory, then to `path` in a single object write. If `write` raises, `path` is
    left as it was and nothing temporary remains.
    """
    _writes[0] += 1
    if is_remote(path):
        buffer = io.BytesIO()
        write(buffer)
        data = buffer.getvalue()
        _fault_point(path, "during")
        parent = dirname(path)
        if not exists(parent):  # object stores need no directories, but gfile's local-like ones (ram://) do
            makedirs(parent)
        if os.fspath(path).startswith("ram://") and exists(path):
            # TF's in-memory filesystem appends on "wb" instead of replacing (TF 2.20; pinned by a test). Object
            # stores replace the object in the one write below, so this is for ram:// only.
            remove(path)
        with _gfile(path).GFile(os.fspath(path), "wb") as f:
            f.write(data)
        _fault_point(path, "after")
        return path

    def fill(fd, tmp):
        with os.fdopen(fd, "wb", closefd=False) as f:
            write(f)
            f.flush()
            _fault_point(path, "during")

    return _replace_with_temporary(path, fill, ".tmp")


def atomic_save(path, save, suffix=".tmp"):
    """`atomic_write` for a writer that takes a path instead of a file object (e.g. Keras' `model.save`).

    `save(tmp)` writes a local temporary path beside `path` that ends in `suffix` (`model.save` needs
    ".keras"); it is then flushed, given the mode an ordinary `open()` would give, and renamed over `path`.
    A URL `path` gets the bytes in one object write, from a local temporary directory. Returns `path`.
    """
    if is_remote(path):
        with tempfile.TemporaryDirectory() as scratch:
            local = os.path.join(scratch, "file" + suffix)
            save(local)
            return atomic_write_bytes(path, read_bytes(local))
    _writes[0] += 1

    def fill(fd, tmp):
        save(tmp)
        _fault_point(path, "during")

    return _replace_with_temporary(path, fill, ".tmp" + ("" if suffix == ".tmp" else suffix))


# The temporary files this module writes: ".NAME.RANDOM.tmp" (RANDOM is mkstemp's 8 characters), or with a
# suffix after ".tmp" (atomic_save); ".tmp-RANDOM.keras" is what training's model.save wrote before atomic_save.
_TEMPORARY = re.compile(r"^(\..+\.[a-z0-9_]{8}\.tmp(\.[A-Za-z0-9]+)?|\.tmp-[a-z0-9_]{8}\.keras)$")


def fsync_directory(path):
    """Makes renames in a local directory durable (a crash of the machine could otherwise undo them).

    Nothing to do for a URL (an object write is durable when it returns); platforms and file systems that cannot
    open or flush a directory are left as they are, since there a rename is as durable as it gets.
    """
    if is_remote(path):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path):
    """Flushes a local file's data to disk: a rename that points at it is durable only once its data is."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(directory):
    """`fsync_file` for every file under a local directory, then `fsync_directory` for every directory."""
    for root, _, names in os.walk(directory):
        for name in names:
            fsync_file(os.path.join(root, name))
        fsync_directory(root)


def replace_file(source, target):
    """Renames the finished local file `source` over `target` in one step and makes the rename durable."""
    os.replace(source, target)
    fsync_directory(os.path.dirname(os.path.abspath(target)))
    return target


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


def exchange_paths(a, b):
    """Atomically swaps two local paths with Linux's renameat2(RENAME_EXCHANGE); False where that is unavailable."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):  # kernel or filesystem lacks it
        return False
    raise OSError(code, os.strerror(code), a)


def replace_directory(staged, target, exchange=False, step=None):
    """Puts the finished local directory `staged` at `target`, replacing the directory there; returns `target`.

    Over nothing or an empty directory: one rename. Otherwise, with `exchange`, one atomic swap (`exchange_paths`)
    where the kernel and file system offer it, then the old directory is deleted; else `target` is renamed aside
    (`.NAME.old-TOKEN` beside it), `staged` is renamed into place (the old one is put back if that fails) and the
    aside deleted. A crash between those two renames leaves the old directory under the aside name: recovering
    it is the caller's. Each rename is made durable; `fsync_tree(staged)` first makes the contents durable too.
    `step(name)` is called after each rename ("swapped", "moved aside", "in place"), before anything is deleted.
    """
    step = step or (lambda name: None)
    parent, name = os.path.split(os.path.abspath(target))
    if not os.path.exists(target) or (os.path.isdir(target) and not os.listdir(target)):
        os.replace(staged, target)  # over nothing, or over an empty directory (POSIX allows that)
        fsync_directory(parent)
        return target
    if exchange and exchange_paths(staged, target):
        fsync_directory(parent)
        step("swapped")
        shutil.rmtree(staged, ignore_errors=True)  # now the old directory
        return target
    aside = os.path.join(parent, f".{name}.old-{uuid.uuid4().hex}")
    os.replace(target, aside)
    step("moved aside")
    try:
        os.replace(staged, target)
    except BaseException:
        os.replace(aside, target)
        raise
    fsync_directory(parent)
    step("in place")
    shutil.rmtree(aside, ignore_errors=True)
    return target


def replace_path(staged, target, last=None):
    """Moves a finished local file or directory `staged` onto `target` (a path or URL), replacing what is there.

    Local: `replace_file` or `replace_directory`. A URL gets the files one by one, each in one object write
    (object stores cannot rename a directory): the file named `last` (the one that makes the directory usable,
    such as a SavedModel's saved_model.pb) is deleted first and written last, so a crash mid-upload leaves a
    directory without it, never old and new files that look complete; then the files the new one lacks are removed.
    Returns `target`.
    """
    if is_remote(target):
        _upload(os.fspath(staged), os.fspath(target), last)
    elif os.path.isdir(staged):
        makedirs(dirname(absolute(target)))
        replace_directory(staged, target)
    else:
        makedirs(dirname(absolute(target)))
        replace_file(staged, target)
    return target


def _upload(staged, target, last):
    if not os.path.isdir(staged):
        copy_file(staged, target)
        return
    names = sorted(relpath(p, staged).replace(os.sep, "/") for p in walk(staged))
    names.sort(key=lambda name: name == last)
    if last in names and exists(join(target, last)):
        remove(join(target, last))
    for name in names:
        copy_file(os.path.join(staged, *name.split("/")), join(target, *name.split("/")))
    fresh = {join(target, *name.split("/")) for name in names}
    for old in walk(target):
        if old not in fresh:
            remove(old)


def _replace_with_temporary(path, fill, suffix):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = _held_temporary(directory, f".{os.path.basename(path)}.", suffix)
    try:
        fill(fd, tmp)
        os.fsync(fd)  # the inode's data, whichever descriptor wrote it
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's files are private; outputs get what open() gives
        os.replace(tmp, path)  # before the close: the lock covers the temporary until it is `path`
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    finally:
        os.close(fd)
    _fault_point(path, "after")
    return path


def _held_temporary(directory, prefix, suffix):
    """mkstemp, with an exclusive flock on the new file that marks it as in use until the descriptor closes."""
    while True:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
        if fcntl is None:
            return fd, tmp
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a sweep that saw the file unlocked removes it
        if _same_file(fd, tmp):
            return fd, tmp
        os.close(fd)  # swept between mkstemp and flock: take another name


def _same_file(fd, path):
    try:
        at_path = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (at_path.st_dev, at_path.st_ino) == (held.st_dev, held.st_ino)


def sweep_temporaries(directory):
    """Removes the temporary files that killed writers left under a local directory (recursively).

    A temporary whose writer is alive is left alone: the writer holds a flock on it (see the module
    docstring). URLs have no temporaries (a URL is written in one object write). Returns the paths removed.
    """
    directory = os.fspath(directory)
    if is_remote(directory) or fcntl is None or not os.path.isdir(directory):
        return []
    removed = []
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            if not _TEMPORARY.match(name):
                continue
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            except OSError:  # gone meanwhile (renamed into place), a link, or unreadable: not ours to remove
                continue
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # its writer is running
                    continue
                if _same_file(fd, path):
                    os.remove(path)
                    removed.append(path)
            finally:
                os.close(fd)
    return removed


def atomic_write_bytes(path, data):
    """`atomic_write` of a bytes object."""
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path, text):
    """`atomic_write` of a str, encoded as UTF-8."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write_json(path, obj):
    """`atomic_write` of a JSON document (indented, UTF-8, trailing newline)."""
    return atomic_write_bytes(path, json_bytes(obj))


def json_bytes(obj):
    """The bytes `atomic_write_json` writes: indented JSON, UTF-8, a trailing newline."""
    return (json.dumps(obj, indent=2) + "\n").encode("utf-8")


def copy_file(source, target):
    """Copies one file (local or URL) to `target` (local or URL) with `atomic_write_bytes`."""
    return atomic_write_bytes(target, read_bytes(source))


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(directory):
    """Creates `directory` if needed and writes (then removes) a probe file in it, so that a read-only or full
    disk is found before hours of work, not at the first checkpoint. Raises the `OSError` the write raised."""
    directory = os.fspath(directory)
    makedirs(directory)
    probe = join(directory, f".write-test-{os.getpid()}")
    atomic_write_bytes(probe, b"probe")
    remove(probe)
    return directory
