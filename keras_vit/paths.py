"""Paths of any file system: a local path or a `tf.io.gfile` URL (TensorFlow imported only for a URL). Re-exported by
keras_vit.files, which adds the atomic writes; import them from there."""

import io
import os
import posixpath
import re

# A scheme as RFC 3986 spells it, then "://": gs://, s3://, hdfs://, ram://. Windows drives (C:\) do not match.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_remote(path):
    """True for a URL that `tf.io.gfile` opens (`gs://b/run`, `ram://x`), False for a local path."""
    return bool(_URL.match(os.fspath(path))) if isinstance(path, (str, os.PathLike)) else False


def _gfile(url=None):
    """tf.io.gfile, after checking that TensorFlow has a file system for `url`'s scheme: for an unknown one
    gfile's isdir and isfile answer False, which reads as "does not exist" instead of "cannot read s3://"."""
    try:
        import tensorflow as tf  # only for URLs: local paths never need TensorFlow
    except ModuleNotFoundError as err:
        if err.name != "tensorflow":
            raise
        raise StorageError(
            f"{os.fspath(url) if url is not None else 'A URL'} is read and written through TensorFlow's tf.io.gfile, "
            f"and TensorFlow is not installed: pip install 'keras-vit[train]', or use a local path."
        ) from err

    if url is not None:
        scheme = os.fspath(url).split("://", 1)[0]
        if scheme not in _schemes:
            _schemes.update(tf.io.gfile.get_registered_schemes())
        if scheme not in _schemes:
            raise StorageError(
                f"TensorFlow has no file system for {scheme}:// URLs ({os.fspath(url)}; it reads "
                f"{', '.join(sorted(s + '://' for s in _schemes if s not in ('', 'file', 'ram')))} and local paths). "
                f"Use a local path or a gs:// URL (copy the files there first), or register a tf.io.gfile file "
                f"system plugin for {scheme}://."
            )
    return tf.io.gfile


_schemes = set()  # the URL schemes TensorFlow has a file system for, filled when the first URL is used


class StorageError(OSError):
    """A file system failure on a URL, in one line that names the URL and the fix. An `OSError` without an
    errno, so every `except OSError` that prints `describe_os_error` prints it as it is."""


def absolute(path):
    """`os.path.abspath` for a local path; a URL unchanged (abspath would turn gs://b/run into ./gs:/b/run)."""
    path = os.fspath(path)
    return path if is_remote(path) else os.path.abspath(path)


def join(path, *parts):
    """`os.path.join`, with "/" between the parts of a URL on every platform."""
    path = os.fspath(path)
    parts = [os.fspath(p) for p in parts]
    return posixpath.join(path, *parts) if is_remote(path) else os.path.join(path, *parts)


def dirname(path):
    path = os.fspath(path)
    if is_remote(path):
        scheme, rest = path.split("://", 1)  # posixpath alone would turn "ram://x" into "ram:"
        return f"{scheme}://{posixpath.dirname(rest.rstrip('/'))}"
    return os.path.dirname(path)


def basename(path):
    path = os.fspath(path)
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


def relpath(path, start):
    """`path` relative to the directory `start` (both local, or both URLs with `path` inside `start`)."""
    path, start = os.fspath(path), os.fspath(start)
    if is_remote(path):
        prefix = start.rstrip("/") + "/"
        if not path.startswith(prefix):
            raise ValueError(f"{path!r} is not inside {start!r}.")
        return path[len(prefix) :]
    return os.path.relpath(path, start)


def exists(path):
    return _gfile(path).exists(os.fspath(path)) if is_remote(path) else os.path.exists(path)


def isdir(path):
    return _gfile(path).isdir(os.fspath(path)) if is_remote(path) else os.path.isdir(path)


def isfile(path):
    if is_remote(path):
        return _gfile(path).exists(os.fspath(path)) and not _gfile(path).isdir(os.fspath(path))
    return os.path.isfile(path)


def size(path):
    """The size of a file in bytes."""
    return _gfile(path).stat(os.fspath(path)).length if is_remote(path) else os.path.getsize(path)


def makedirs(path):
    """Creates a directory and its parents; nothing happens if it exists."""
    if is_remote(path):
        _gfile(path).makedirs(os.fspath(path))
    else:
        os.makedirs(path, exist_ok=True)


def listdir(path):
    """Names in a directory (not paths), sorted; a URL's sub-directories come without gfile's trailing "/"."""
    if is_remote(path):
        return sorted(name.rstrip("/") for name in _gfile(path).listdir(os.fspath(path)))
    return sorted(os.listdir(path))


def glob(pattern):
    """Paths matching a `*`/`?` pattern, sorted."""
    if is_remote(pattern):
        return sorted(_gfile(pattern).glob(os.fspath(pattern)))
    import glob as _glob

    return sorted(_glob.glob(os.fspath(pattern)))


def walk(path):
    """Every file under a directory (recursively): directories in sorted order, each one's files sorted."""
    walker = _gfile(path).walk(os.fspath(path)) if is_remote(path) else os.walk(path)
    return [join(root, name) for root, _, names in sorted(walker) for name in sorted(names)]


def remove(path):
    if is_remote(path):
        _gfile(path).remove(os.fspath(path))
    else:
        os.remove(path)


def open(path, mode="r"):  # the module's open, as io.open is io's
    """A file object: built-in `open` for a local path, `tf.io.gfile.GFile` for a URL.

    Do not write a URL through this in pieces where a reader could see it half-written; use `atomic_write`.
    """
    if is_remote(path):
        return _gfile(path).GFile(os.fspath(path), mode)
    import builtins

    return builtins.open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_text(path):
    return read_bytes(path).decode("utf-8")


def load_numpy(path, **kwargs):
    """`np.load` of a local path or a URL (np.load seeks, so a URL's bytes are read into memory first).

    An `.npz` comes back as an `NpzFile`: use it in a `with` block, as with `np.load`.
    """
    import numpy as np

    if is_remote(path):
        return np.load(io.BytesIO(read_bytes(path)), **kwargs)
    return np.load(path, **kwargs)
