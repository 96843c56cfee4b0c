"""The error every weights reader raises, and its wording for a file that cannot be read. Imports no Keras: a
file is refused before the framework loads (keras_vit/weights/pretrained.py)."""

import os

from keras_vit.weights import sources


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or that does not fit the model."""


def unreadable_safetensors(path, err):
    return CheckpointError(
        f"Cannot read {os.fspath(path)!r} as safetensors ({err}); the file is truncated or corrupt: "
        f"{sources.unreadable_advice(path)}."
    )


def unreadable_npz(path, err):
    return CheckpointError(
        f"Cannot read {os.fspath(path)!r} as an .npz checkpoint ({_error_name(err)}: {err}). The file is truncated, "
        f"corrupt or not an .npz; {sources.unreadable_advice(path)}."
    )


def unreadable_keras(path, err):
    return CheckpointError(
        f"Cannot read {os.fspath(path)!r} as a .keras model ({_error_name(err)}: {err}): the file is truncated or "
        f"corrupt (a .keras file is a zip archive); save the model again or {sources.unreadable_advice(path)}."
    )


def unknown_folder(path):
    found = ", ".join(sorted(os.listdir(path))[:10]) or "nothing"
    return CheckpointError(
        f"{path!r} is not a checkpoint folder of a known format (found: {found}). Expected timm "
        f"(config.json with 'architecture' + model.safetensors), transformers (config.json with model_type 'vit' "
        f"+ model.safetensors), keras-hub (config.json + model.weights.h5) or a single .npz."
    )


def _error_name(err):
    module = type(err).__module__
    return type(err).__name__ if module in ("builtins", "zipfile") else f"{module}.{type(err).__name__}"
