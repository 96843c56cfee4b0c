"""Weights in and out of a Keras ViT: `from_pretrained` (pretrained.py: a broken local file is refused before Keras
is imported), `load_weights` and `save_pretrained` (model_io.py), one reader per layout, and the catalogue."""

from keras_vit import _lazy

# `python -m keras_vit.weights list|info|download` needs no Keras: the loaders are imported on first use, and
# `from_pretrained` refuses a broken local file before they are (pretrained.py).
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
        "from_pretrained": "keras_vit.weights.pretrained",
        "load_weights": "keras_vit.weights.model_io",
        "save_pretrained": "keras_vit.weights.model_io",
    },
)
