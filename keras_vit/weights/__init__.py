"""Weights in and out of a Keras ViT.

`loading.py` holds the one table every format loads through (original vit_jax key -> variable);
`npz.py` reads the released `.npz` checkpoints (vit_jax's layout and big_vision's).
"""

from keras_vit.weights.loading import POSEMB_KEY, CheckpointError, LoadReport, checkpoint_variables, load_params
from keras_vit.weights.npz import load_npz, read_npz, to_original_layout

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
