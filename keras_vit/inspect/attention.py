"""Attention weights of every encoder block, and attention rollout (Abnar & Zuidema, 2020; paper Figure 6)."""

import dataclasses

import keras
import numpy as np

from keras_vit.inspect.layout import check_images, token_layout


def attention_weights(model, images, batch_size=16):
    """Softmax attention weights of every encoder block for a batch of images.

    The tokens entering the first block are computed by the model's own layers (patch embedding, class token,
    position embedding; for a hybrid the ResNet stem first), then each `encoderblock_{i}` is called with
    `return_attention_scores=True`, in inference mode (no dropout).

    Args:
        model: a model made by `keras_vit.create_model` (plain or hybrid, any size) or loaded from its `.keras`.
        images: (B, H, W, C) at the model's input size: float in [-1, 1], or uint8 (then scaled to [-1, 1]).
        batch_size: images per forward pass (bounds memory; the result is the same).

    Returns:
        float32 array (layers, B, heads, T, T); T counts the class token (index 0) when the model has one.
    """
    layout = token_layout(model)
    images = check_images(images, layout)
    stem = keras.Model(model.input, model.get_layer("encoderblock_0").input, name="inspect_stem")
    blocks = [model.get_layer(f"encoderblock_{i}") for i in range(layout.num_layers)]
    chunks = []
    for start in range(0, len(images), batch_size):
        tokens = stem(images[start : start + batch_size], training=False)
        per_layer = []
        for block in blocks:
            tokens, weights = block(tokens, training=False, return_attention_scores=True)
            per_layer.append(keras.ops.convert_to_numpy(keras.ops.cast(weights, "float32")))
        chunks.append(np.stack(per_layer))
    return np.concatenate(chunks, axis=1)


def rollout(attentions):
    """Joint attention of the last layer's tokens over the input tokens, by attention rollout.

    Per layer: average the heads, add the identity (the residual connection), renormalise each row to sum to
    one, then multiply the layers: joint = A_L @ ... @ A_1. Each row is renormalised on its own (not the whole
    matrix), so the joint attention stays row-stochastic.

    Args:
        attentions: (layers, B, heads, T, T) attention weights, e.g. from `attention_weights`.

    Returns:
        float64 array (B, T, T): row q is how much output token q draws on each input token.
    """
    attentions = np.asarray(attentions, dtype=np.float64)
    if attentions.ndim != 5 or attentions.shape[-1] != attentions.shape[-2]:
        raise ValueError(
            f"attentions must be shaped (layers, batch, heads, tokens, tokens); received shape {attentions.shape}."
        )
    num_tokens = attentions.shape[-1]
    joint = np.broadcast_to(np.eye(num_tokens), (*attentions.shape[1:2], num_tokens, num_tokens)).copy()
    for layer in attentions:
        fused = layer.mean(axis=1) + np.eye(num_tokens)
        fused /= fused.sum(axis=-1, keepdims=True)
        joint = fused @ joint
    return joint


@dataclasses.dataclass
class Rollout:
    """The result of `attention_rollout`.

    Attributes:
        joint: (B, T, T) joint attention (see `rollout`).
        grid: (B, gh, gw) attention of the class token's row over the patch tokens (the mean over all token rows
            when the model has no class token); its values are the rollout's own, not rescaled.
        image: (B, H, W) `grid` bilinearly upsampled to the image size, or None when no image size was known.
    """

    joint: np.ndarray
    grid: np.ndarray
    image: np.ndarray = None


def attention_rollout(source, images=None, *, num_prefix_tokens=1, grid_size=None, image_size=None, batch_size=16):
    """Attention rollout as a map over the patch grid and over the image (the paper's Figure 6).

    Args:
        source: a keras_vit model (then `images` is required and the layout is read from the model), or
            precomputed attention weights (layers, B, heads, T, T).
        images: (B, H, W, C) images for a model source (see `attention_weights`).
        num_prefix_tokens: for an array source: 1 when token 0 is a class token, 0 when there is none.
        grid_size: for an array source: (gh, gw); inferred when the patch tokens form a square.
        image_size: for an array source: (H, W) to upsample to; None skips the upsampling.
        batch_size: images per forward pass for a model source.

    Returns:
        A `Rollout` (joint, grid, image). With a class token the map is the class token's row of the joint
        attention without its own column; without one it is the mean of all rows.
    """
    if isinstance(source, keras.Model):
        if images is None:
            raise ValueError("attention_rollout(model, images): pass the images to compute the attention for.")
        layout = token_layout(source)
        attentions = attention_weights(source, images, batch_size=batch_size)
        num_prefix_tokens, grid_size, image_size = layout.num_prefix_tokens, layout.grid_size, layout.image_size
    else:
        if images is not None:
            raise ValueError("attention_rollout got attention weights and images; pass a model with the images.")
        attentions = source
    joint = rollout(attentions)
    num_patches = joint.shape[-1] - num_prefix_tokens
    if grid_size is None:
        side = round(num_patches**0.5)
        if side * side != num_patches:
            raise ValueError(f"Cannot infer the grid of {num_patches} patch tokens; pass grid_size=(gh, gw).")
        grid_size = (side, side)
    grid_size = tuple(int(g) for g in grid_size)
    if grid_size[0] * grid_size[1] != num_patches:
        raise ValueError(
            f"grid_size={grid_size} has {grid_size[0] * grid_size[1]} cells, but the attention has {num_patches} "
            f"patch tokens ({joint.shape[-1]} tokens, num_prefix_tokens={num_prefix_tokens})."
        )
    rows = joint[:, 0] if num_prefix_tokens else joint.mean(axis=1)
    grid = rows[:, num_prefix_tokens:].reshape(-1, *grid_size)
    image = None if image_size is None else upsample(grid, image_size)
    return Rollout(joint=joint, grid=grid, image=image)


def upsample(maps, size):
    """Bilinear upsampling of (B, gh, gw) maps to (B, H, W), with `keras.ops.image.resize` (half-pixel centres)."""
    maps = np.asarray(maps, dtype=np.float32)[..., None]
    resized = keras.ops.image.resize(maps, tuple(int(s) for s in size), interpolation="bilinear")
    return keras.ops.convert_to_numpy(resized)[..., 0]
