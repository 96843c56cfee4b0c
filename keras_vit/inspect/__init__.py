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

from keras_vit.inspect.attention import Rollout, attention_rollout, attention_weights, rollout, upsample
from keras_vit.inspect.distance import attention_distance, mean_attention_distance, patch_distances
from keras_vit.inspect.embeddings import (
    embedding_similarity,
    filter_components,
    patch_embedding_components,
    position_embedding_similarity,
)
from keras_vit.inspect.layout import TokenLayout, token_layout
from keras_vit.inspect.plots import FIGURES, save_figures

__all__ = [
    "FIGURES",
    "Rollout",
    "TokenLayout",
    "attention_distance",
    "attention_rollout",
    "attention_weights",
    "embedding_similarity",
    "filter_components",
    "mean_attention_distance",
    "patch_distances",
    "patch_embedding_components",
    "position_embedding_similarity",
    "rollout",
    "save_figures",
    "token_layout",
    "upsample",
]
