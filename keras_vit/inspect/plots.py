"""The four inspection figures as PNG files. matplotlib is imported here only, when a figure is drawn.

Figures are drawn on a `matplotlib.figure.Figure` with the Agg canvas directly, not through pyplot, so drawing
never changes the process's matplotlib backend (a notebook keeps its own) and needs no display.
"""

import numpy as np

from keras_vit import files
from keras_vit.files import atomic_write
from keras_vit.inspect.attention import attention_rollout, attention_weights
from keras_vit.inspect.distance import attention_distance
from keras_vit.inspect.embeddings import patch_embedding_components, position_embedding_similarity
from keras_vit.inspect.layout import check_images, token_layout

FIGURES = ("attention_rollout", "position_embedding_similarity", "attention_distance", "embedding_filters")


def save_figures(model, images, out_dir, *, max_images=8, num_components=28, batch_size=16):
    """Writes the paper's inspection figures (Figures 6 and 7) for a model as PNG files.

    - `attention_rollout.png`: the input images and the attention rollout over them;
    - `position_embedding_similarity.png`: for each patch, the cosine similarity of its position embedding
      with every other patch's;
    - `attention_distance.png`: mean attention distance of every head against depth;
    - `embedding_filters.png`: the top principal components of the patch-embedding filters (for a hybrid, of
      the ResNet's first convolution, since its patch embedding is a 1 x 1 projection).

    Args:
        model: a keras_vit model.
        images: (B, H, W, C) at the model's input size, float32 in [-1, 1] (or uint8). The distance figure
            uses all of them, the rollout figure the first `max_images`.
        out_dir: directory to write to (created if needed); existing files of these names are replaced
            atomically.
        max_images: images shown in the rollout figure.
        num_components: principal components shown.
        batch_size: images per forward pass.

    Returns:
        dict {figure name: path}, with the names in `FIGURES`.
    """
    _matplotlib()  # fail before the work when it is missing
    layout = token_layout(model)
    images = check_images(images, layout)
    files.makedirs(out_dir)
    attentions = attention_weights(model, images, batch_size=batch_size)
    shown = slice(0, max_images)
    maps = attention_rollout(
        attentions[:, shown],
        num_prefix_tokens=layout.num_prefix_tokens,
        grid_size=layout.grid_size,
        image_size=layout.image_size,
    ).image
    distances = attention_distance(attentions, layout.grid_size, layout.pixels_per_token, layout.num_prefix_tokens)
    hybrid = "conv_root" in {layer.name for layer in model.layers}
    tiles = patch_embedding_components(model, num_components, layer="conv_root" if hybrid else "embedding")
    filter_source = "hybrid's ResNet root conv" if hybrid else "patch embedding"

    paths = {}
    for name, draw in (
        ("attention_rollout", lambda: rollout_figure(images[shown], maps, layout.num_prefix_tokens > 0)),
        ("position_embedding_similarity", lambda: similarity_figure(position_embedding_similarity(model))),
        ("attention_distance", lambda: distance_figure(distances)),
        ("embedding_filters", lambda: filters_figure(tiles, filter_source)),
    ):
        paths[name] = save_png(draw(), files.join(out_dir, f"{name}.png"))
    return paths


def rollout_figure(images, maps, has_class_token=True):
    """Input images (top row) and their attention-rollout maps overlaid (bottom row)."""
    figure, _ = _figure()
    n = len(images)
    figure.set_size_inches(1.8 * n + 0.4, 4.0)
    axes = figure.subplots(2, n, squeeze=False)
    shown = np.clip((np.asarray(images) + 1.0) / 2.0, 0.0, 1.0)
    for i in range(n):
        picture = _displayable(shown[i])
        heat = maps[i] / maps[i].max() if maps[i].max() > 0 else np.zeros_like(maps[i])
        axes[0, i].imshow(picture, cmap="gray" if picture.ndim == 2 else None, vmin=0, vmax=1)
        axes[1, i].imshow(picture, cmap="gray" if picture.ndim == 2 else None, vmin=0, vmax=1)
        axes[1, i].imshow(heat, cmap="jet", alpha=0.5, vmin=0, vmax=1)
        for ax in axes[:, i]:
            ax.set_axis_off()
    source = "class token" if has_class_token else "mean over tokens"
    figure.suptitle(f"Attention rollout ({source}), scaled to each image's maximum", fontsize=9)
    return figure


def similarity_figure(similarity):
    """A gh x gw mosaic: panel (i, j) shows the similarity of patch (i, j)'s position embedding with all others."""
    figure, ax = _figure(one_axis=True)
    gh, gw = similarity.shape[:2]
    mosaic = np.full((gh * (gh + 1) - 1, gw * (gw + 1) - 1), np.nan)
    for i in range(gh):
        for j in range(gw):
            mosaic[i * (gh + 1) : i * (gh + 1) + gh, j * (gw + 1) : j * (gw + 1) + gw] = similarity[i, j]
    # About 3 screen pixels per cell at 100 dpi, so that large grids (24 x 24 at 384 px) stay legible.
    width = min(20.0, max(4.0, mosaic.shape[1] * 3 / 100))
    figure.set_size_inches(width + 1.2, width * mosaic.shape[0] / mosaic.shape[1] + 0.6)
    image = ax.imshow(mosaic, cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xticks([j * (gw + 1) + (gw - 1) / 2 for j in range(gw)], [str(j + 1) for j in range(gw)], fontsize=6)
    ax.set_yticks([i * (gh + 1) + (gh - 1) / 2 for i in range(gh)], [str(i + 1) for i in range(gh)], fontsize=6)
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    ax.tick_params(length=0)
    figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="Cosine similarity")
    ax.set_title("Position embedding similarity", fontsize=10)
    return figure


def distance_figure(distances):
    """Mean attention distance (pixels) of each head, against the layer's depth."""
    figure, ax = _figure(one_axis=True)
    figure.set_size_inches(4.5, 4.0)
    layers, heads = distances.shape
    depth = np.arange(1, layers + 1)
    colours = _colormap("tab20" if heads > 10 else "tab10")
    for h in range(heads):
        ax.scatter(depth, distances[:, h], s=14, color=colours(h % colours.N), label=f"Head {h + 1}")
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_ylim(0, max(1.1 * float(distances.max()), 1.0))
    ax.set_xticks(depth)
    if heads <= 16:
        ax.legend(fontsize=6, markerscale=0.8, ncol=2 if heads > 8 else 1)
    ax.set_title("Mean attention distance", fontsize=10)
    return figure


def filters_figure(tiles, source="patch embedding"):
    """The principal components of the embedding filters as a mosaic of tiles, 7 per row."""
    figure, ax = _figure(one_axis=True)
    k, th, tw = tiles.shape[:3]
    cols = min(7, k)
    rows = -(-k // cols)
    mosaic = np.ones((rows * (th + 1) - 1, cols * (tw + 1) - 1, 3))
    for n, tile in enumerate(tiles):
        picture = _displayable(tile)
        if picture.ndim == 2:
            picture = np.repeat(picture[..., None], 3, axis=-1)
        r, c = divmod(n, cols)
        mosaic[r * (th + 1) : r * (th + 1) + th, c * (tw + 1) : c * (tw + 1) + tw] = picture
    figure.set_size_inches(1.0 + 0.8 * cols, 0.8 + 0.8 * rows)
    ax.imshow(mosaic, interpolation="nearest")
    ax.set_axis_off()
    ax.set_title(f"Top {k} principal components of the {source} filters", fontsize=9)
    return figure


def save_png(figure, path):
    """Saves a figure as PNG atomically (`keras_vit.files.atomic_write`)."""
    return atomic_write(path, lambda f: figure.savefig(f, format="png", dpi=100, bbox_inches="tight"))


def _matplotlib():
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            "Drawing the inspection figures needs matplotlib (`pip install matplotlib`); the functions that return "
            "arrays (attention_rollout, mean_attention_distance, ...) work without it."
        ) from err
    return matplotlib, Figure, FigureCanvasAgg


def _figure(one_axis=False):
    _, Figure, FigureCanvasAgg = _matplotlib()
    figure = Figure()
    FigureCanvasAgg(figure)
    return (figure, figure.add_subplot(1, 1, 1)) if one_axis else (figure, None)


def _colormap(name):
    return _matplotlib()[0].colormaps[name]


def _displayable(picture):
    """An (H, W, C) array in [0, 1] as something imshow shows: RGB as is, one channel as grey, else the mean."""
    if picture.shape[-1] == 3:
        return picture
    if picture.shape[-1] == 1:
        return picture[..., 0]
    return picture.mean(axis=-1)
