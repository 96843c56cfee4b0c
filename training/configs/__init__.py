"""Training recipes: one module per recipe, each with `get_config() -> TrainConfig` and its command line; a module
whose name starts with "_" (`_paper_finetune`) is shared, not a recipe."""

import importlib
import pkgutil

from ..options import TrainConfig


def available_configs():
    """Names of the recipes in `training/configs/`."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def check_config_name(name):
    """Raises a `ValueError` with the recipes' names (and the closest one) unless `name` is a recipe."""
    from keras_vit._names import did_you_mean

    names = available_configs()
    if name not in names:
        raise ValueError(f"Unknown config {name!r}.{did_you_mean(name, names)} Available configs: {', '.join(names)}.")


def get_config(name_or_config="digits"):
    """The `TrainConfig` of a recipe name ("digits", "cifar10_finetune", ...), or the config itself."""
    if isinstance(name_or_config, TrainConfig):
        return name_or_config
    if isinstance(name_or_config, dict):
        return TrainConfig(**name_or_config)
    name = str(name_or_config)
    check_config_name(name)
    return importlib.import_module(f"{__name__}.{name}").get_config()
