"""Atomic file writes, shared by keras_vit.inspect, training/, export/ and benchmarks/.

A reader, or a process killed mid-write, sees either the previous file or the complete new one, never a
truncated one: the data goes to a temporary file in the same directory, is flushed to disk, and is renamed
over the target with `os.replace`.
"""

import os
import tempfile


def atomic_write(path, write):
    """Calls `write(binary_file)` on a temporary file beside `path`, then renames it to `path`; returns `path`.

    Directories are created as needed. The file gets the mode an ordinary `open()` would give it (mkstemp's
    files are private). If `write` raises, the temporary file is removed and `path` is left as it was.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def atomic_write_bytes(path, data):
    """`atomic_write` of a bytes object."""
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path, text):
    """`atomic_write` of a str, encoded as UTF-8."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
