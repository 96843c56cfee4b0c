"""Weights in and out of a Keras ViT.

`loading.py` holds the one table every format loads through (original vit_jax key -> variable);
`npz.py` reads the released `.npz` checkpoints (vit_jax's layout and big_vision's); `timm.py`,
`transformers.py` and `keras_hub.py` convert those libraries' folders to and from the original layout;
`pretrained.py` is the entry point over all of them (`from_pretrained`, `load_weights`, `save_pretrained`);
`catalogue.py` names the released files, `download.py` and `sources.py` fetch them (and URLs, Hub repos) into
local caches, and `content.py` checks that what was downloaded is the file it claims to be before it is cached.
"""

from keras_vit import _startup

__all__ = [
    "POSEMB_KEY",
    "CheckpointError",
    "LoadReport",
    "checkpoint_variables",
    "from_pretrained",
    "load_npz",
    "load_params",
    "load_weights",
    "read_npz",
    "save_pretrained",
    "to_original_layout",
]


def _load():
    """Imports the loaders (and with them Keras' model code); the catalogue and downloads need neither."""
    global POSEMB_KEY, CheckpointError, LoadReport, checkpoint_variables, load_params  # noqa: PLW0603 (lazy API)
    global load_npz, read_npz, to_original_layout, from_pretrained, load_weights, save_pretrained  # noqa: PLW0603
    from keras_vit.weights.loading import POSEMB_KEY, CheckpointError, LoadReport, checkpoint_variables, load_params
    from keras_vit.weights.npz import load_npz, read_npz, to_original_layout
    from keras_vit.weights.pretrained import from_pretrained, load_weights, save_pretrained


# `python -m keras_vit.weights list|info|download` needs no Keras (keras_vit/_startup.py); everything else loads now.
if not _startup.parses_first():
    _load()


__getattr__ = _startup.deferred_getattr(__name__, __all__, _load)
