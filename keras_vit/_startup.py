"""How the command lines start: arguments parsed before Keras loads, native logs quiet, warnings on one line.
Only the standard library is imported here."""

import contextlib
import importlib
import os
import sys
import tempfile
import warnings

# TensorFlow's C++ logging (TF_CPP_MIN_LOG_LEVEL): 0 everything, 1 hides INFO, 2 hides WARNING too, 3 hides ERROR.
QUIET_LOG_LEVEL = "2"
# The console command the wheel installs (pyproject.toml [project.scripts]): `keras-vit train|export|weights|inspect`.
CONSOLE_COMMAND = "keras-vit"
# Without this device file there is no NVIDIA GPU, and the `failed call to cuInit` ERROR line of TensorFlow's CUDA
# build says nothing (CUDA_VISIBLE_DEVICES="" does not stop it: measured with TF 2.20).
NVIDIA_DEVICE = "/dev/nvidiactl"

VERBOSE_FLAGS = ("-v", "--verbose")
# What LiteRT prints once per process when it applies XNNPACK, whatever the log level: left out of quiet output.
LITERT_NOTICES = ("Created TensorFlow Lite XNNPACK delegate",)


def command_names(package, command, subcommand):
    """The `prog` of a command line and of its subcommand, as the user typed them.

    `python -m training` / `python -m training evaluate` in a checkout (the top-level package); the installed
    wheel's `keras-vit train` / `keras-vit evaluate` (its `keras_vit.training`, also `python -m keras_vit.training`).
    """
    if "." not in package:
        return f"python -m {package}", f"python -m {package} {subcommand}"
    return f"{CONSOLE_COMMAND} {command}", f"{CONSOLE_COMMAND} {subcommand}"


def verbose_requested(argv):
    """Whether the command line asks for every log line (`-v` / `--verbose` before a `--` separator)."""
    for arg in argv:
        if arg == "--":
            return False
        if arg in VERBOSE_FLAGS:
            return True
    return False


def _one_line_warning(message, category, filename, lineno, line=None):
    # The library's warnings are written for the user; the source line Python echoes under them is not.
    return f"{category.__name__}: {message}\n"


def configure(argv, environ=None):
    """Quiet defaults for a command line, before TensorFlow is imported; `-v` / `--verbose` keeps everything.

    Respects a TF_CPP_MIN_LOG_LEVEL the user has set. Command lines only: the library
    never changes the process's logging or warnings.

    Returns:
        Whether verbose output was requested.
    """
    environ = os.environ if environ is None else environ
    if verbose_requested(argv):
        return True
    environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_LOG_LEVEL)
    warnings.formatwarning = _one_line_warning
    return False


@contextlib.contextmanager
def captured_native_output(fds=(1, 2)):
    """Captures what C++ code writes to file descriptors 1 and 2 (which `sys.stdout` redirection cannot see).

    Yields a list that holds the captured text (decoded, errors replaced) once the block has ended.
    """
    captured = []
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(fd) for fd in fds]
    with tempfile.TemporaryFile() as sink:
        try:
            for fd in fds:
                os.dup2(sink.fileno(), fd)
            yield captured
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            for fd, copy in zip(fds, saved):
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            captured.append(sink.read().decode("utf-8", errors="replace"))


@contextlib.contextmanager
def native_lines_dropped(fragments):
    """Runs the block with C++ stderr captured, then writes it back without the lines holding any of `fragments`.

    For the notices native libraries print once per process whatever the log level (LiteRT's "Created TensorFlow
    Lite XNNPACK delegate" line): everything else, errors included, is written back as it came.
    """
    with captured_native_output(fds=(2,)) as text:
        yield
    kept = [line for line in text[0].splitlines(keepends=True) if not any(f in line for f in fragments)]
    sys.stderr.write("".join(kept))


def find_devices_quietly(tf):
    """Lists TensorFlow's devices once, dropping the ERROR line a CUDA build logs on a machine without a GPU.

    TensorFlow reads TF_CPP_MIN_LOG_LEVEL once, so that line can only be hidden at level 3 (which would hide
    every error); instead the first device look-up (where it is logged) is captured and replayed without it.
    """
    if os.path.exists(NVIDIA_DEVICE):
        tf.config.list_physical_devices()
        return
    with native_lines_dropped(("failed call to cuInit",)):
        tf.config.list_physical_devices()


def import_tensorflow():
    """Imports TensorFlow for a command line that has parsed its arguments; lists its devices quietly (below)."""
    tf = importlib.import_module("tensorflow")
    find_devices_quietly(tf)
    return tf
