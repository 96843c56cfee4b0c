"""Inspecting a Vision Transformer, the paper's section 4.5 for any keras_vit model: attention weights and rollout,
position-embedding similarity, attention distance, patch-embedding components (docs/inspection.md)."""

from keras_vit import _lazy

# Imported on first use (keras_vit/_lazy.py), so that `python -m keras_vit.inspect` parses before Keras loads.
__all__, __getattr__, __dir__ = _lazy.lazy_names(
    __name__,
    {
        "Rollout": ".attention",
        "attention_rollout": ".attention",
        "attention_weights": ".attention",
        "rollout": ".attention",
        "upsample": ".attention",
        "attention_distance": ".distance",
        "mean_attention_distance": ".distance",
        "patch_distances": ".distance",
        "embedding_similarity": ".embeddings",
        "filter_components": ".embeddings",
        "patch_embedding_components": ".embeddings",
        "position_embedding_similarity": ".embeddings",
        "TokenLayout": ".layout",
        "token_layout": ".layout",
        "FIGURES": ".plots",
        "save_figures": ".plots",
    },
)
