"""One-line messages for the errors TensorFlow raises on files (`tf.io.gfile` on a URL, a `tf.data` input gone) and
for an `OSError`; re-exported by keras_vit.files."""

import errno
import os
import re

from keras_vit.paths import is_remote

# tf.errors class name -> (the problem, in words; the fix) for what tf.io.gfile raises on a URL.
_UNREACHABLE = (
    "the storage service could not be reached or refused the request",
    "Check the network connection and the credentials (gcloud auth application-default login, or "
    "GOOGLE_APPLICATION_CREDENTIALS), then run the same command again (a training run resumes from its newest "
    "checkpoint).",
)
_STORAGE_PROBLEMS = {
    "NotFoundError": ("not found", "Check the path (for a URL: the bucket and object names)."),
    "PermissionDeniedError": (
        "permission denied",
        "Check the credentials and the bucket's permissions (read for inputs, write for outputs).",
    ),
    "UnauthenticatedError": (
        "not authenticated",
        "Log in (gcloud auth application-default login) or set GOOGLE_APPLICATION_CREDENTIALS.",
    ),
    "FailedPreconditionError": _UNREACHABLE,
    "UnavailableError": _UNREACHABLE,
    "DeadlineExceededError": _UNREACHABLE,
    "AbortedError": _UNREACHABLE,
    "UnimplementedError": (
        "TensorFlow has no file system for this URL's scheme",
        "Use a local path or a gs:// URL (copy the files there first), or register a tf.io.gfile file system "
        "plugin for the scheme.",
    ),
}
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"(),;\[\]{}]+")
_MISSING_LOCAL = re.compile(r"([^\s'\"{}\[\]]+); No such file or directory")
# A Python exception raised inside tf.numpy_function (e.g. an image file deleted mid-run), as TF quotes it.
_PYTHON_ERROR = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception)): (.+)$", re.MULTILINE)


def describe_storage_error(err):
    """One line for an error TensorFlow raised while reading or writing files, or None for any other error.

    Covers `tf.errors.OpError`s from `tf.io.gfile` (a URL that cannot be reached, read or written: the line
    names the URL and the fix) and from inside a `tf.data` pipeline (an input file deleted during a run).
    TensorFlow is never imported here: its errors are recognised by their classes' names.
    """
    kinds = [cls.__name__ for cls in type(err).__mro__]
    if "OpError" not in kinds:
        return None
    kind = kinds[0]
    text = str(getattr(err, "message", None) or err)
    quoted = _PYTHON_ERROR.findall(text) if "Traceback (most recent call last)" in text else []
    if quoted:  # raised by Python code inside the graph: report that error, not TF's wrapping of it
        name, message = quoted[-1]
        if name.rsplit(".", 1)[-1] in ("FileNotFoundError", "IsADirectoryError", "PermissionError"):
            return (
                f"an input file could not be read during the run ({message.strip()}): it was removed, moved or "
                "made unreadable after the data set was listed. Put it back (or start a new workdir with the data "
                "set as it is now) and run the same command again."
            )
        return f"{name.rsplit('.', 1)[-1]}: {message.strip()}"
    missing = _MISSING_LOCAL.search(text)
    if missing and kind == "NotFoundError" and not _URL_IN_TEXT.search(text):
        return (
            f"an input file could not be read during the run (no such file or directory: {missing.group(1)}): it "
            "was removed or moved after the data set was listed. Put it back and run the same command again."
        )
    url = _URL_IN_TEXT.search(text)
    if url is None:
        return None  # not a storage failure we can name; the caller shows it as it is
    problem, fix = _STORAGE_PROBLEMS.get(kind, (kind, "Check the URL and the storage service."))
    detail = " ".join(line.strip() for line in text.strip().splitlines()[:1] if line.strip())
    detail = re.sub(r"\{\{[^}]*\}\}\s*", "", detail)  # TF's "{{function_node ...}}" prefix
    return f"{problem}: {url.group(0).rstrip('.')} ({kind}: {detail}). {fix}"


# errno -> (the problem, in words) for the OSErrors a user causes by where they point a program.
_WRITE_PROBLEMS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "a path component is a file, not a directory",
    errno.EISDIR: "it is a directory",
}


def _is_local_file(path):
    return isinstance(path, (str, os.PathLike)) and not is_remote(os.fspath(path)) and os.path.isfile(path)


def describe_os_error(err, fix, full_disk_fix=None):
    """One line for an `OSError`: what failed, on which path, and `fix` (what the user can do about it).

    `fix` is appended for the errors a user can act on by choosing another place or freeing space (full disk,
    quota, read-only or permission); `full_disk_fix`, when given, replaces it for a full disk or quota. Other
    errors get their own text only.
    """
    if full_disk_fix is not None and err.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = full_disk_fix
    if err.errno is None:  # raised with a message of its own ("--init checkpoint not found: ...")
        return str(err)
    path = err.filename if err.filename is not None else "?"
    if err.errno in (errno.EEXIST, errno.ENOTDIR) and err.filename2 is None and _is_local_file(path):
        return f"{path} is a file, not a directory: pass a directory path (or move the file away) and run again."
    problem = _WRITE_PROBLEMS.get(err.errno, err.strerror or str(err))
    line = f"{problem}: {path}"
    if err.filename2 is not None:
        line += f" -> {err.filename2}"
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
        line += f". {fix}"
    return line
