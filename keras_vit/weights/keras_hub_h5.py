"""Keras 3 `.weights.h5` files as keras-hub presets hold them, and the preset's `metadata.json`."""

import os

import numpy as np

from keras_vit import files
from keras_vit.weights.checkpoint import write_json
from keras_vit.weights.loading import CheckpointError

KERAS_HUB_LAYOUT_VERSION = "0.32.0"  # the keras-hub release whose preset layout `write` reproduces


def read_h5(path):
    """{variable path: array} of a Keras 3 `.weights.h5` file."""
    import h5py

    out = {}
    try:
        with h5py.File(files.absolute(path), "r") as f:
            f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    except OSError as err:
        message = f"Cannot read {path!r} as a Keras weights file ({err}); it is truncated or corrupt."
        raise CheckpointError(message) from err
    return out


def write_h5(path, groups, data):
    """Writes {group: layer name} and {variable path: array} as a Keras 3 `.weights.h5` file, atomically."""
    import h5py

    def write(f):
        with h5py.File(f, "w") as h5:
            for group, name in groups.items():
                h5.require_group(group).attrs["name"] = name
            for key, value in data.items():
                value = np.asarray(value)
                h5.create_dataset(key, data=value if value.dtype.kind == "i" else value.astype(np.float32))

    files.atomic_write(path, write)


def write_metadata(folder, parameter_count, tasks):
    """The preset's `metadata.json`: the Keras and keras-hub versions, the backbone's size, its task files."""
    import keras

    metadata = dict(keras_version=keras.__version__, keras_hub_version=KERAS_HUB_LAYOUT_VERSION,
                    parameter_count=int(parameter_count), tasks=tasks)  # fmt: skip
    write_json(os.path.join(folder, "metadata.json"), metadata)
