"""A package's public names imported on first use (PEP 562, one `name -> module` table per package), and a call made
once another module is imported; so `python -m training --help` answers before Keras loads. Standard library only."""

import importlib
import importlib.abc
import importlib.util
import sys


def _resolve(package, target, name):
    module, _, attribute = target.partition(":")
    module = importlib.import_module(module, package)
    if attribute:
        return getattr(module, attribute)
    if module.__name__ == f"{package}.{name}":  # the table names a submodule: the module itself
        return module
    return getattr(module, name)


def lazy_names(package, table):
    """(`__all__`, `__getattr__`, `__dir__`) of `package`, whose public names `table` maps to their modules.

    A module is absolute (`"keras_vit.weights"`) or relative to the package (`".trainer"`); `"module:attribute"`
    binds another name. A name that is also a submodule's, with no attribute given (`"layers": "keras_vit.layers"`),
    stands for the submodule. The first use of a name imports its module and binds the name in the package, so later
    uses are plain attribute look-ups.
    """
    module = sys.modules[package]

    def __getattr__(name):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = _resolve(package, table[name], name)
        setattr(module, name, value)
        return value

    def __dir__():
        return sorted({*vars(module), *table})

    return sorted(table), __getattr__, __dir__


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on the first import of `name` it lets the other finders find it, then has the
    module's loader run `then()` once the module has executed."""

    def __init__(self, name, then):
        self.name, self.then, self._looking = name, then, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._looking:  # the look-up below must not come back here
            return None
        self._looking = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then(module):
            exec_module(module)
            del spec.loader.exec_module  # the loader's own method again
            # Only an executed module ends the watch: a probe (`importlib.util.find_spec("keras")`, as Keras' and
            # our own availability checks do) also comes through here and must not use it up.
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            self.then()

        spec.loader.exec_module = exec_then
        return spec


def when_imported(name, then):
    """Calls `then()` now if module `name` is imported, else right after whoever imports it first has run it."""
    if name in sys.modules:
        then()
    elif not any(isinstance(f, _AfterImport) and f.name == name and f.then is then for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, then))


def importing(package):
    """Whether a module (not a package) of `package` is half-run: it is importing something right now."""
    return any(
        name.startswith(package + ".")
        and not hasattr(module, "__path__")
        and getattr(getattr(module, "__spec__", None), "_initializing", False)
        for name, module in list(sys.modules.items())
    )
