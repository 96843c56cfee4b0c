"""Lets timm import where torchvision cannot be installed: inert placeholders for the torchvision modules timm imports
and a ViT never uses; any real use of one raises."""

import importlib.abc
import importlib.machinery
import sys
import types


class _PlaceholderMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__name__}.{name}")


def _placeholder(name):
    def fail(*args, **kwargs):
        raise RuntimeError(f"torchvision is not installed; {name} is a placeholder (benchmarks/_torchvision_shim.py).")

    return _PlaceholderMeta(name, (), {"__init__": fail, "__call__": fail})


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        module.__version__ = "0.0+placeholder"
        return module

    def exec_module(self, module):
        pass


def install():
    """Returns True when the placeholder was installed, False when a real torchvision is importable."""
    try:
        import torchvision  # noqa: F401

        return False
    except Exception:
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _Finder())
        return True
