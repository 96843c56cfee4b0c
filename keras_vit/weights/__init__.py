"""Weights in and out of a Keras ViT.

`loading.py` holds the one table every format loads through (original vit_jax key -> variable);
`npz.py` reads the released `.npz` checkpoints (vit_jax's layout and big_vision's); `timm.py`,
`transformers.py` and `keras_hub.py` convert those libraries' folders to and from the original layout;
`pretrained.py` is the entry point over all of them (`from_pretrained`, `load_weights`, `save_pretrained`).
"""

from keras_vit.weights.loading import POSEMB_KEY, CheckpointError, LoadReport, checkpoint_variables, load_params
from keras_vit.weights.npz import load_npz, read_npz, to_original_layout
from keras_vit.weights.pretrained import from_pretrained, load_weights, save_pretrained

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
