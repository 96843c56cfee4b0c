"""Weights in and out of a Keras ViT.

`loading.py` holds the one table every format loads through (original vit_jax key -> variable);
`npz.py` reads the released `.npz` checkpoints (vit_jax's layout and big_vision's); `catalogue.py` names the
released files, `download.py` and `sources.py` fetch them (and URLs, Hub repos) into local caches.
"""

from keras_vit import _cli_mode

if not _cli_mode.weights_cli_running():
    from keras_vit.weights.loading import POSEMB_KEY, CheckpointError, LoadReport, checkpoint_variables, load_params
    from keras_vit.weights.npz import load_npz, read_npz, to_original_layout
else:  # `python -m keras_vit.weights`: list/info/--help need no Keras; the names load on first use

    def __getattr__(name):
        import importlib

        if name not in __all__:
            raise AttributeError(f"module 'keras_vit.weights' has no attribute {name!r}")
        home = "npz" if name in ("load_npz", "read_npz", "to_original_layout") else "loading"
        return getattr(importlib.import_module(f"keras_vit.weights.{home}"), name)


__all__ = [
    "POSEMB_KEY",
    "CheckpointError",
    "LoadReport",
    "checkpoint_variables",
    "load_npz",
    "load_params",
    "read_npz",
    "to_original_layout",
]
