"""Whether this process is `python -m keras_vit.weights`, whose list/info/--help must not pay for Keras.

`python -m keras_vit.weights` imports `keras_vit` and `keras_vit.weights` before it runs the command, and both
packages import Keras (and so TensorFlow, 10-20 s on a small machine) for their public names. Everything else
relies on `import keras_vit` doing that (it registers the layers for `keras.models.load_model`), so only this one
command skips it: the packages' names are then imported on first use instead. Standard library only.
"""

import sys

WEIGHTS_CLI = ("keras_vit.weights", "keras_vit.weights.__main__")


def weights_cli_running():
    """True while Python is starting `python -m keras_vit.weights ...` (sys.argv[0] is "-m" until it runs)."""
    argv = getattr(sys, "orig_argv", [])
    if sys.argv[:1] != ["-m"] or "-m" not in argv[:-1]:
        return False
    return argv[argv.index("-m") + 1] in WEIGHTS_CLI


def lazy_attribute(package, name, public, homes, default_home):
    """A package's public `name`, imported on first use from `homes[name]` (else `default_home`): its `__getattr__`."""
    import importlib

    if name not in public:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    home = homes.get(name, default_home)
    module = importlib.import_module(home)
    return module if home == f"{package}.{name}" else getattr(module, name)
