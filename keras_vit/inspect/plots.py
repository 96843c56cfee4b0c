"""The four inspection figures as PNG files, drawn on a `matplotlib.figure.Figure` (Agg, never pyplot: a notebook's
backend is left alone). matplotlib is imported here only, when a figure is drawn."""

import keras
import numpy as np

from keras_vit import files
from keras_vit.files import atomic_write
from keras_vit.inspect.attention import attention_rollout, attention_weights
from keras_vit.inspect.distance import attention_distance
from keras_vit.inspect.embeddings import patch_embedding_components, position_embedding_similarity
from keras_vit.inspect.layout import check_images, token_layout

FIGURES = ("attention_rollout", "position_embedding_similarity", "attention_distance", "embedding_filters")


def save_figures(
    model, images, out_dir, *, labels=None, class_names=None, max_images=8, num_components=28, batch_size=16
):
    """Writes the paper's inspection figures (Figures 6 and 7) for a model as PNG files.

    - `attention_rollout.png`: the input images and the attention rollout over them, each titled with the
      model's predicted class (and the true one when `labels` are given);
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
        labels: optional (B,) integer true classes of `images`, shown beside the predictions.
        class_names: optional names of the classes, indexed by class; default: the model's own `class_names`
            when it carries them, else the class indices.
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
    captions, maps = _rollout_panels(model, images, attentions, layout, labels, class_names, max_images)
    distances = attention_distance(attentions, layout.grid_size, layout.pixels_per_token, layout.num_prefix_tokens)
    tiles, variance, filter_source, grey = _filter_components(model, images, layout, num_components)
    rollout_images = images[:max_images]

    paths = {}
    for name, draw in (
        ("attention_rollout", lambda: rollout_figure(rollout_images, maps, layout.num_prefix_tokens > 0, captions)),
        ("position_embedding_similarity", lambda: similarity_figure(position_embedding_similarity(model))),
        ("attention_distance", lambda: distance_figure(distances, len(images))),
        ("embedding_filters", lambda: filters_figure(tiles, filter_source, variance, grey)),
    ):
        paths[name] = save_png(draw(), files.join(out_dir, f"{name}.png"))
    return paths


def _rollout_panels(model, images, attentions, layout, labels, class_names, max_images):
    """(captions, attention-rollout maps) of the first `max_images` images, for `rollout_figure`."""
    if labels is not None and len(labels) != len(images):
        raise ValueError(f"labels has {len(labels)} entries for {len(images)} images; pass one label per image.")
    shown = slice(0, max_images)
    captions = _captions(model, images[shown], None if labels is None else np.asarray(labels)[shown], class_names)
    maps = attention_rollout(
        attentions[:, shown],
        num_prefix_tokens=layout.num_prefix_tokens,
        grid_size=layout.grid_size,
        image_size=layout.image_size,
    ).image
    return captions, maps


def _filter_components(model, images, layout, num_components):
    """(tiles, explained variance, what the filters belong to, grey) for `filters_figure`: a hybrid's are its
    ResNet root conv's (its patch embedding is a 1 x 1 projection); grey inputs see only the channels' sum."""
    hybrid = "conv_root" in {layer.name for layer in model.layers}
    grey = layout.channels == 3 and bool(np.all(images == images[..., :1]))
    tiles, variance = patch_embedding_components(
        model, num_components, layer="conv_root" if hybrid else "embedding", grey=grey, return_variance=True
    )
    return tiles, variance, "hybrid's ResNet root conv" if hybrid else "patch embedding", grey


def rollout_figure(images, maps, has_class_token=True, captions=None):
    """Input images (top row, titled with `captions`) and their attention-rollout maps (bottom row).

    Args:
        images: (n, H, W, C) in [-1, 1].
        maps: (n, H, W) rollout maps; each is shown divided by its own maximum.
        has_class_token: whether the maps are the class token's row (else the mean over tokens).
        captions: optional list of n (text, correct) pairs; `correct` (True, False or None) colours the text.
    """
    figure, _ = _figure()
    n = len(images)
    figure.set_size_inches(1.7 * n + 1.6, 4.3)
    axes = figure.subplots(2, n, squeeze=False)
    shown = np.clip((np.asarray(images) + 1.0) / 2.0, 0.0, 1.0)
    heat_image = None
    for i in range(n):
        picture = _displayable(shown[i])
        heat = maps[i] / maps[i].max() if maps[i].max() > 0 else np.zeros_like(maps[i])
        axes[0, i].imshow(picture, cmap="gray" if picture.ndim == 2 else None, vmin=0, vmax=1)
        grey = picture if picture.ndim == 2 else None
        if grey is None and np.allclose(shown[i], shown[i][..., :1], atol=1e-3):
            grey = shown[i][..., 0]
        if grey is not None:
            # A grey picture under a colour overlay loses both; its outline over the map keeps them apart.
            heat_image = axes[1, i].imshow(heat, cmap="inferno", vmin=0, vmax=1)
            if grey.max() - grey.min() > 1e-3:
                level = (grey.max() + grey.min()) / 2
                axes[1, i].contour(grey, levels=[level], colors="cyan", linewidths=0.8)
        else:
            axes[1, i].imshow(picture, vmin=0, vmax=1)
            heat_image = axes[1, i].imshow(heat, cmap="inferno", alpha=0.6, vmin=0, vmax=1)
        if captions is not None:
            text, correct = captions[i]
            colour = {True: "tab:green", False: "tab:red"}.get(correct, "black")
            axes[0, i].set_title(text, fontsize=8, color=colour)
        for ax in axes[:, i]:
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0, 0].set_ylabel("input", fontsize=9)
    axes[1, 0].set_ylabel("rollout" + (" (outline: input)" if heat_image is not None else ""), fontsize=9)
    source = "class token" if has_class_token else "mean over tokens"
    figure.colorbar(heat_image, ax=list(axes[1]), fraction=0.05, pad=0.02, label="attention / image max")
    figure.suptitle(f"Attention rollout ({source}) over the input patches", fontsize=10)
    return figure


def _captions(model, images, labels, class_names):
    """(text, correct) per image: the model's predicted class, and the true one when `labels` are given."""
    num_classes = int(getattr(getattr(model, "config", None), "num_classes", 0) or 0)
    names = class_names if class_names is not None else getattr(model, "class_names", None)
    if names is not None and num_classes and len(names) != num_classes:
        raise ValueError(
            f"class_names has {len(names)} names but the model has {num_classes} classes; pass one name per class."
        )
    name = (lambda k: str(names[k])) if names is not None else str
    predicted = None
    if num_classes and model.output_shape[-1] == num_classes:
        logits = keras.ops.convert_to_numpy(model(images, training=False))
        predicted = logits.argmax(axis=-1)
    captions = []
    for i in range(len(images)):
        parts, correct = [], None
        if labels is not None:
            parts.append(f"true {name(int(labels[i]))}")
        if predicted is not None:
            parts.append(f"pred {name(int(predicted[i]))}")
            correct = None if labels is None else bool(predicted[i] == labels[i])
        captions.append((" / ".join(parts), correct))
    return captions if any(text for text, _ in captions) else None


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
    size = 8 if max(gh, gw) <= 12 else 6
    ax.set_xticks([j * (gw + 1) + (gw - 1) / 2 for j in range(gw)], [str(j + 1) for j in range(gw)], fontsize=size)
    ax.set_yticks([i * (gh + 1) + (gh - 1) / 2 for i in range(gh)], [str(i + 1) for i in range(gh)], fontsize=size)
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    ax.tick_params(length=0)
    figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="Cosine similarity")
    ax.set_title("Position embedding similarity\n(panel at row r, column c: patch (r, c) against every patch)",
                 fontsize=10)  # fmt: skip
    return figure


def distance_figure(distances, num_images=None):
    """Mean attention distance (pixels) of each head against the layer's depth, coloured by head index."""
    figure, ax = _figure(one_axis=True)
    figure.set_size_inches(5.2, 4.0)
    layers, heads = distances.shape
    depth = np.arange(1, layers + 1)
    # Heads side by side within a layer, so that equal distances stay visible; colour by head on a colour bar,
    # which stays readable at 16 heads where a legend does not.
    offsets = (np.arange(heads) - (heads - 1) / 2) * min(0.5 / max(heads, 1), 0.06)
    colours = _colormap("viridis").resampled(heads)
    points = None
    for h in range(heads):
        points = ax.scatter(depth + offsets[h], distances[:, h], s=18, c=np.full(layers, h + 1), cmap=colours,
                            vmin=0.5, vmax=heads + 0.5)  # fmt: skip
    ax.plot(depth, distances.mean(axis=1), color="grey", linewidth=1, zorder=0, label="mean over heads")
    ax.legend(fontsize=7, loc="lower right")
    bar = figure.colorbar(points, ax=ax, fraction=0.05, pad=0.03, label="head")
    bar.set_ticks(np.arange(1, heads + 1) if heads <= 16 else np.linspace(1, heads, 5).round())
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_ylim(0, max(1.1 * float(distances.max()), 1.0))
    ax.set_xticks(depth)
    ax.grid(alpha=0.3)
    over = f", over {num_images} images" if num_images else ""
    ax.set_title(f"Mean attention distance per head{over}", fontsize=10)
    return figure


def filters_figure(tiles, source="patch embedding", variance=None, grey=False):
    """The principal components of the embedding filters as a mosaic of tiles, 7 per row, in order; `variance`
    (the explained-variance ratio of each) goes into the title, and `grey` says the filters were summed over
    the channels (`patch_embedding_components(grey=True)`)."""
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
    title = f"Top {k} principal components of the {source} filters"
    if grey:
        title += "\nsummed over R, G, B (the inputs are grey, so only the sum acts on them)"
    if variance is not None and len(variance):
        title += f"\n(row by row; the first explains {variance[0]:.0%} of the variance, all {k} {variance.sum():.0%})"
    ax.set_title(title, fontsize=9)
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
