"""Mean attention distance per layer and head (the paper's Figure 7, right)."""

import numpy as np

from keras_vit.inspect.attention import attention_weights
from keras_vit.inspect.layout import token_layout


def patch_distances(grid_size, pixels_per_token):
    """Euclidean distances in pixels between the centres of the patch cells, (gh * gw, gh * gw), row-major."""
    rows, cols = np.meshgrid(np.arange(grid_size[0]), np.arange(grid_size[1]), indexing="ij")
    centres = np.stack([rows.ravel() * pixels_per_token[0], cols.ravel() * pixels_per_token[1]], axis=-1)
    return np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)


def attention_distance(attentions, grid_size, pixels_per_token, num_prefix_tokens=1):
    """Mean attention distance in pixels per layer and head, from precomputed attention weights.

    For each query patch, the distance to every key patch is weighted by the attention between them and summed;
    the result is averaged over query patches and over the batch. The class token is excluded both as a query
    and as a key: the attention of a patch query is renormalised over the patch keys alone, so it sums to one
    (this is "how far does a patch look among the patches"; the share it gives the class token is ignored).
    A query that gives the patches no attention at all (only possible with hand-set weights) is left out.

    Args:
        attentions: (layers, B, heads, T, T).
        grid_size: (gh, gw) patch grid.
        pixels_per_token: (py, px) pixels per patch cell (patch size; times the ResNet stride for a hybrid).
        num_prefix_tokens: 1 with a class token (index 0), else 0.

    Returns:
        float64 array (layers, heads) in pixels.
    """
    attentions = np.asarray(attentions, dtype=np.float64)
    if attentions.ndim != 5:
        raise ValueError(
            f"attentions must be shaped (layers, batch, heads, tokens, tokens); received shape {attentions.shape}."
        )
    p = int(num_prefix_tokens)
    patch = attentions[..., p:, p:]
    if patch.shape[-1] != grid_size[0] * grid_size[1]:
        raise ValueError(
            f"The attention has {patch.shape[-1]} patch tokens but grid_size={tuple(grid_size)} has "
            f"{grid_size[0] * grid_size[1]} cells."
        )
    mass = patch.sum(axis=-1)  # (layers, B, heads, queries)
    per_query = np.einsum("lbhqk,qk->lbhq", patch, patch_distances(grid_size, pixels_per_token))
    valid = mass > 0
    per_query = np.where(valid, per_query / np.where(valid, mass, 1.0), 0.0)
    counted = valid.sum(axis=(1, 3))
    if np.any(counted == 0):
        raise ValueError("Some layer/head gives no attention to any patch token; its distance is undefined.")
    return per_query.sum(axis=(1, 3)) / counted


def mean_attention_distance(model, images, batch_size=16):
    """Mean attention distance in pixels per layer and head of a model, averaged over a batch of images.

    See `attention_distance` for the definition (class token excluded as query and key; attention renormalised
    over the patch keys). Distances are between patch centres in input pixels, so a hybrid's tokens count
    `feature_stride * patch_size` pixels apart.

    Args:
        model: a keras_vit model.
        images: (B, H, W, C) at the model's input size, float in [-1, 1] (or uint8).
        batch_size: images per forward pass.

    Returns:
        float64 array (layers, heads).
    """
    layout = token_layout(model)
    attentions = attention_weights(model, images, batch_size=batch_size)
    return attention_distance(attentions, layout.grid_size, layout.pixels_per_token, layout.num_prefix_tokens)
