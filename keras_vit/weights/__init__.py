"""Weights in and out of a Keras ViT.

`loading.py` holds the one table every format loads through (original vit_jax key -> variable);
`npz.py` reads the released `.npz` checkpoints (vit_jax's layout and big_vision's); `timm.py`,
`transformers.py` and `keras_hub.py` convert those libraries' folders to and from the original layout;
`pretrained.py` is the entry point over all of them (`from_pretrained`, `load_weights`, `save_pretrained`), after
`precheck.py` has refused a broken local file without importing Keras (`errors.py`: `CheckpointError`, its wording);
`catalogue.py` names the released files, `download.py` and `sources.py` fetch them (and URLs, Hub repos) into
local caches, and `content.py` checks that what was downloaded is the file it claims to be before it is cached.
"""

from keras_vit import _lazy

# `python -m keras_vit.weights list|info|download` needs no Keras: the loaders are imported on first use, and
# `from_pretrained` refuses a broken local file before they are (precheck.py).
__all__, __getattr__, __dir__ = _lazy.lazy_names(
    __name__,
    {
        "POSEMB_KEY": "keras_vit.weights.loading",
        "CheckpointError": "keras_vit.weights.errors",
        "LoadReport": "keras_vit.weights.loading",
        "checkpoint_variables": "keras_vit.weights.loading",
        "load_params": "keras_vit.weights.loading",
        "load_npz": "keras_vit.weights.npz",
        "read_npz": "keras_vit.weights.npz",
        "to_original_layout": "keras_vit.weights.npz",
        "from_pretrained": "keras_vit.weights.precheck",
        "load_weights": "keras_vit.weights.pretrained",
        "save_pretrained": "keras_vit.weights.pretrained",
    },
)
