"""How the command lines start: arguments parsed before Keras loads, native logs quiet, warnings on one line.

`python -m training --help` should answer at once, but importing Keras (and with it TensorFlow) takes seconds.
Python imports a `-m` module's packages before running it, with `sys.argv[0] == "-m"` while it locates the module
(`sys.orig_argv` holds the whole command line), so `command_line()` tells a package's `__init__` that a command
line is starting and which one. The packages named in PARSE_FIRST then leave their heavy imports until their
`__main__` has parsed the arguments. Only the standard library is imported here.
"""

import contextlib
import functools
import os
import sys
import tempfile
import warnings

# The `-m` entry points (and their submodules) whose __main__ parses its arguments before importing Keras;
# keras_vit/__init__ (which their own modules import first) defers its layers and models for these only.
PARSE_FIRST = ("training", "export", "keras_vit.training", "keras_vit.export", "keras_vit.weights", "keras_vit.cli")
# The console command the wheel installs (pyproject.toml [project.scripts]): `keras-vit train|export|weights|inspect`.
CONSOLE_COMMAND = "keras-vit"

# TensorFlow's C++ logging (TF_CPP_MIN_LOG_LEVEL): 0 everything, 1 hides INFO, 2 hides WARNING too, 3 hides ERROR.
QUIET_LOG_LEVEL = "2"
# Without this device file there is no NVIDIA GPU, and the `failed call to cuInit` ERROR line of TensorFlow's CUDA
# build says nothing (CUDA_VISIBLE_DEVICES="" does not stop it: measured with TF 2.20).
NVIDIA_DEVICE = "/dev/nvidiactl"

VERBOSE_FLAGS = ("-v", "--verbose")
# What LiteRT prints once per process when it applies XNNPACK, whatever the log level: left out of quiet output.
LITERT_NOTICES = ("Created TensorFlow Lite XNNPACK delegate",)


def command_line():
    """The module `python -m` is starting (e.g. "training" or "keras_vit.inspect"), or None.

    Only true while Python is locating that module, i.e. during its packages' imports; for the installed
    `keras-vit` console command, "keras_vit.cli" throughout.
    """
    if sys.argv[:1] and os.path.basename(sys.argv[0]) == CONSOLE_COMMAND:
        return "keras_vit.cli"
    if sys.argv[:1] != ["-m"]:
        return None
    argv = getattr(sys, "orig_argv", [])
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m":
            return argv[i + 1]
    return None


@functools.cache
def parses_first():
    """Whether this process is a command line that parses its arguments before importing Keras.

    Decided once, by the first call (keras_vit/__init__, while `-m` locates the module), and remembered: the
    packages imported later, from the command line's __main__, defer the same way until it loads them.
    """
    name = command_line()
    return name is not None and any(name == entry or name.startswith(entry + ".") for entry in PARSE_FIRST)


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


def deferred_getattr(package, names, load):
    """The `__getattr__` of a package that leaves `names` unimported while a parse-first command line starts.

    The first use of one of them runs `load()`, which binds them all in the package (a plain import runs it at once).
    """
    module = sys.modules[package]

    def __getattr__(name):
        if name in names:
            load()
            return vars(module)[name]
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
