"""What the embeddings learned: position-embedding similarity and patch-filter principal components (Figure 7)."""

import keras
import numpy as np

from keras_vit.inspect.layout import token_layout


def position_embedding_similarity(model):
    """Cosine similarity between the position embeddings of every pair of patches (the paper's Figure 7, centre).

    Only the patch rows of `posembed_input` are compared; the class token's row is excluded.

    Args:
        model: a keras_vit model.

    Returns:
        float64 array (gh, gw, gh, gw): entry [i, j, k, l] is the similarity of patch (i, j) with patch (k, l).
    """
    layout = token_layout(model)
    table = keras.ops.convert_to_numpy(model.get_layer("posembed_input").pos_embedding).astype(np.float64)
    cells = layout.grid_size[0] * layout.grid_size[1]  # the patch rows are the last ones (no_embed_class: all)
    return embedding_similarity(table[0, table.shape[1] - cells :], layout.grid_size)


def embedding_similarity(table, grid_size):
    """Cosine similarity of a (gh * gw, D) table of row-major grid embeddings, as (gh, gw, gh, gw)."""
    table = np.asarray(table, dtype=np.float64)
    gh, gw = grid_size
    if table.ndim != 2 or table.shape[0] != gh * gw:
        raise ValueError(f"Expected a ({gh * gw}, D) table for grid {tuple(grid_size)}; received shape {table.shape}.")
    norms = np.linalg.norm(table, axis=1, keepdims=True)
    unit = table / np.where(norms > 0, norms, 1.0)
    return (unit @ unit.T).reshape(gh, gw, gh, gw)


def patch_embedding_components(model, k=28, *, layer="embedding", grey=False, return_variance=False):
    """The top principal components of the patch-embedding filters, as tiles for display (Figure 7, left).

    Each of the D filters of the patch embedding (P x P x C weights) is a point; the principal components of
    these points (after removing their mean) are returned as P x P x C tiles, each rescaled to [0, 1].

    A hybrid's `embedding` is a 1 x 1 projection of the 1024-channel ResNet feature map, not a filter over
    pixels, so it has nothing to show as an image: pass `layer="conv_root"` to use the ResNet's first (7 x 7,
    weight-standardised) convolution instead, whose filters do look at pixels.

    Args:
        model: a keras_vit model.
        k: number of components (at most min(D, P * P * C)).
        layer: "embedding" (default) or, for a hybrid, "conv_root".
        grey: components of the filters summed over the input channels, which is all that acts on a grey
            image (R = G = B): a model trained on grey images never constrains the rest, so in colour its
            components show untrained noise.
        return_variance: also return the explained-variance ratio of each component.

    Returns:
        float32 array (k, P, P, C) in [0, 1] (C = 3 for RGB models, 1 with `grey`); with `return_variance`, also
        a (k,) array.
    """
    layout = token_layout(model)
    if layer not in ("embedding", "conv_root"):
        raise ValueError(f"layer must be 'embedding' or 'conv_root'; received {layer!r}.")
    names = {lay.name for lay in model.layers}
    if layer not in names:
        raise ValueError(f"Model has no {layer!r} layer (only hybrid models have 'conv_root').")
    kernel = keras.ops.convert_to_numpy(model.get_layer(layer).kernel).astype(np.float64)
    if kernel.shape[2] != layout.channels:
        raise ValueError(
            f"The {layer!r} kernel {kernel.shape} reads {kernel.shape[2]} channels, not the {layout.channels} image "
            f"channels: this is a hybrid model, whose patch embedding projects the ResNet feature map. Its filters "
            f"are not images; use patch_embedding_components(model, layer='conv_root') for the first conv's filters."
        )
    if layer == "conv_root":
        # The layer standardises each filter before convolving (StdConv2D), so show the filters it applies.
        mean = kernel.mean(axis=(0, 1, 2), keepdims=True)
        std = kernel.std(axis=(0, 1, 2), keepdims=True)
        kernel = (kernel - mean) / (std + getattr(model.get_layer(layer), "ws_epsilon", 1e-5))
    if grey:
        kernel = kernel.sum(axis=2, keepdims=True)
    components, ratio = filter_components(kernel, k)
    tiles = np.stack([_to_unit_range(c) for c in components]).astype(np.float32)
    return (tiles, ratio) if return_variance else tiles


def filter_components(kernel, k):
    """PCA of the output filters of a (kh, kw, C, D) kernel.

    Returns:
        (components (k, kh, kw, C), explained-variance ratio (k,)); each component has unit norm and its largest
        entry positive (a principal component's sign is arbitrary; this makes it reproducible).
    """
    kernel = np.asarray(kernel, dtype=np.float64)
    kh, kw, c, d = kernel.shape
    points = kernel.reshape(kh * kw * c, d).T  # one row per filter
    points = points - points.mean(axis=0)
    _, singular, basis = np.linalg.svd(points, full_matrices=False)
    k = int(k)
    if k <= 0:
        raise ValueError(f"k must be a positive integer; received k={k}.")
    k = min(k, basis.shape[0])
    basis = basis[:k]
    signs = np.sign(basis[np.arange(k), np.abs(basis).argmax(axis=1)])
    basis = basis * np.where(signs == 0, 1.0, signs)[:, None]
    variance = singular**2
    ratio = variance[:k] / variance.sum() if variance.sum() > 0 else np.zeros(k)
    return basis.reshape(k, kh, kw, c), ratio


def _to_unit_range(tile):
    low, high = tile.min(), tile.max()
    return (tile - low) / (high - low) if high > low else np.full_like(tile, 0.5)
