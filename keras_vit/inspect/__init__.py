"""Inspecting a Vision Transformer: the paper's section 4.5 (Figures 6 and 7) for any keras_vit model.

```python
import keras_vit
from keras_vit import inspect as vit_inspect

model = keras_vit.create_model("B/16", image_size=224)
keras_vit.load_npz(model, "ViT-B_16.npz")
weights = vit_inspect.attention_weights(model, images)        # (layers, B, heads, T, T)
maps = vit_inspect.attention_rollout(model, images).image      # (B, 224, 224)
similarity = vit_inspect.position_embedding_similarity(model)  # (14, 14, 14, 14)
distance = vit_inspect.mean_attention_distance(model, images)  # (layers, heads), pixels
tiles = vit_inspect.patch_embedding_components(model, k=28)    # (28, 16, 16, 3) in [0, 1]
vit_inspect.save_figures(model, images, "plots/", labels=labels)  # four PNGs; rollout titled true/predicted
```
Command line: `python -m keras_vit.inspect model.keras image.jpg --out plots/`. Functions return numpy arrays;
matplotlib is imported only by the figure functions.
"""

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
