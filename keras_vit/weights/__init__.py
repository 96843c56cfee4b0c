"""Weights in and out of a Keras ViT.

`loading.py` holds the one table every format loads through (original vit_jax key -> variable);
`npz.py` reads the released `.npz` checkpoints (vit_jax's layout and big_vision's); `timm.py`,
`transformers.py` and `keras_hub.py` convert those libraries' folders to and from the original layout;
`pretrained.py` is the entry point over all of them (`from_pretrained`, `load_weights`, `save_pretrained`);
`catalogue.py` names the released files, `download.py` and `sources.py` fetch them (and URLs, Hub repos) into
local caches.
"""

from keras_vit import _cli_mode

if not _cli_mode.weights_cli_running():
    from keras_vit.weights.loading import POSEMB_KEY, CheckpointError, LoadReport, checkpoint_variables, load_params
    from keras_vit.weights.npz import load_npz, read_npz, to_original_layout
    from keras_vit.weights.pretrained import from_pretrained, load_weights, save_pretrained
else:  # `python -m keras_vit.weights`: list/info/--help need no Keras; the names load on first use

    def __getattr__(name):
        return _cli_mode.lazy_attribute("keras_vit.weights", name, __all__, _HOMES, "keras_vit.weights.loading")


_HOMES = {
    **dict.fromkeys(("load_npz", "read_npz", "to_original_layout"), "keras_vit.weights.npz"),
    **dict.fromkeys(("from_pretrained", "load_weights", "save_pretrained"), "keras_vit.weights.pretrained"),
}

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
