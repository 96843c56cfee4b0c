"""Rotary position embeddings (RoPE) of the patch grid: DINOv3's, EVA-02's and Perception Encoder's, both layouts."""

import math

import keras
import numpy as np
from keras import ops

# variant: (rotation layout, frequency base, grid offset, axis order)
VARIANTS = {
    "dinov3": ("half", 100.0, 0.0, "yx"),
    "eva": ("interleaved", 10000.0, 0.0, "yx"),
    "pe": ("interleaved", 10000.0, 1.0, "xy"),
}
LAYOUTS = ("half", "interleaved")


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryEmbedding(keras.layers.Layer):
    """The sine and cosine tables every block rotates its queries and keys by, for the input's patch grid.

    Each of a head's D_h channels gets one angle; D_h / 4 frequencies per axis.
    - "dinov3": patch-centre coordinates c = 2 (i + 0.5) / G - 1 per axis, angles 2 pi c / base^(4k / D_h)
      (base 100), axes (y, x), half-split layout (channel j pairs with j + D_h / 2).
    - "eva": positions p = (i + offset) * R / G on a reference grid R (`ref_grid`; no rescale without one),
      angles p * base^(-k / (D_h / 4)) (base 10000), axes (y, x), interleaved pairs (2j, 2j + 1).
    - "pe": as "eva" with offset 1 and axes (x, y).

    `call(images)` returns (1, prefix + gh * gw, 2 * D_h) float32: the sines then the cosines, with rows of sin 0,
    cos 1 for the `num_prefix_tokens` tokens that are not rotated. On a fixed grid the table is a constant computed once
    (in float64); with `patch_stride` set the grid is read from the images and the table computed in the graph.

    Args:
        variant: "dinov3", "eva" or "pe".
        head_dim: D_h, a multiple of 4.
        grid_size: (gh, gw) of the fixed-size model.
        num_prefix_tokens: class and register tokens before the patch tokens.
        ref_grid: (rh, rw), the reference grid of "eva" / "pe" (timm's `ref_feat_shape`), or None.
        base, offset: override the variant's frequency base and grid offset (None: the variant's).
        layout: override the variant's rotation layout ("half" or "interleaved"; None: the variant's).
        patch_stride: pixels per patch of the images given to `call`, for a grid read at run time; None: fixed.
        rescale: "dinov3" only, in training only: the coordinates are multiplied by one log-uniform draw in
            [1 / rescale, rescale] per call (DINOv3's `rescale_coords`, 2 in its pre-training); None: off.
        seed: the draws' seed (an int or None).
    """

    def __init__(
        self,
        variant,
        head_dim,
        grid_size,
        num_prefix_tokens=0,
        ref_grid=None,
        base=None,
        offset=None,
        layout=None,
        patch_stride=None,
        rescale=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {tuple(VARIANTS)}. Received: variant={variant!r}")
        if int(head_dim) <= 0 or int(head_dim) % 4:
            raise ValueError(f"head_dim must be a positive multiple of 4 (4 per frequency). Received: {head_dim}")
        if layout is not None and layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS} or None. Received: layout={layout!r}")
        default_layout, default_base, default_offset, self.axes = VARIANTS[variant]
        self.variant = variant
        self.head_dim = int(head_dim)
        self.grid_size = tuple(int(g) for g in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.ref_grid = None if ref_grid is None else tuple(float(r) for r in _pair(ref_grid))
        self.base = float(default_base if base is None else base)
        self.offset = float(default_offset if offset is None else offset)
        self.layout = layout or default_layout
        self.patch_stride = None if patch_stride is None else _pair(patch_stride)
        self._layout_given, self._base_given, self._offset_given = layout, base, offset
        if rescale is not None and (variant != "dinov3" or not float(rescale) > 1.0):
            raise ValueError(
                f"rescale is DINOv3's coordinate augmentation: a factor > 1 with variant='dinov3'. Received: "
                f"rescale={rescale!r}, variant={variant!r}"
            )
        self.rescale = None if rescale is None else float(rescale)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if self.rescale else None

    def call(self, images, training=None):
        if self.patch_stride is None:
            grid = self.grid_size
        else:
            shape = ops.shape(images)
            grid = (shape[1] // self.patch_stride[0], shape[2] // self.patch_stride[1])
        if training and self.rescale:
            limit = math.log(self.rescale)
            scale = ops.exp(keras.random.uniform((), -limit, limit, seed=self.seed_generator))
            return self._table_in_graph(grid, scale)[None]
        if all(isinstance(g, int) for g in grid):
            return ops.convert_to_tensor(self.table(grid)[None], dtype="float32")
        return self._table_in_graph(grid)[None]

    def angles(self, grid, xp=np, scale=None):
        """(gh * gw, D_h / 2) angles: one column per (axis, frequency) in the variant's axis order. `xp` is numpy
        (float64, a fixed grid) or keras.ops (float32, a grid known at run time); `scale` multiplies DINOv3's
        coordinates (the training-time rescale)."""
        quarter = self.head_dim // 4
        k = xp.arange(quarter, dtype="float64" if xp is np else "float32")
        coords = []
        for axis in (0, 1):
            size = grid[axis]
            cells = xp.arange(size, dtype="float64" if xp is np else "float32")
            size_f = float(size) if isinstance(size, int) else ops.cast(size, "float32")
            if self.variant == "dinov3":
                centred = 2.0 * (cells + 0.5) / size_f - 1.0
                coords.append(centred if scale is None else centred * scale)
            elif self.ref_grid is not None:
                coords.append((cells + self.offset) / size_f * self.ref_grid[axis])
            else:
                coords.append(cells + self.offset)
        if self.variant == "dinov3":
            freqs = 2.0 * math.pi / self.base ** (4.0 * k / self.head_dim)
        else:
            freqs = 1.0 / self.base ** (k / quarter)
        # Row-major tokens; adding 0 * the other axis broadcasts both to (gh, gw) exactly, for numpy and ops alike.
        rows = xp.reshape(coords[0][:, None] + 0.0 * coords[1][None, :], (-1,))
        cols = xp.reshape(coords[1][None, :] + 0.0 * coords[0][:, None], (-1,))
        first, second = (rows, cols) if self.axes == "yx" else (cols, rows)
        return xp.concatenate([first[:, None] * freqs[None], second[:, None] * freqs[None]], axis=1)

    def table(self, grid):
        """The (prefix + gh * gw, 2 * D_h) table of a grid of Python ints, in numpy float64."""
        angles = self.angles(grid)
        angles = np.tile(angles, (1, 2)) if self.layout == "half" else np.repeat(angles, 2, axis=1)
        prefix = np.zeros((self.num_prefix_tokens, self.head_dim))
        sin = np.concatenate([prefix, np.sin(angles)])
        cos = np.concatenate([prefix + 1.0, np.cos(angles)])
        return np.concatenate([sin, cos], axis=1)

    def _table_in_graph(self, grid, scale=None):
        angles = self.angles(grid, xp=ops, scale=scale)
        if self.layout == "half":
            angles = ops.concatenate([angles, angles], axis=1)
        else:
            angles = ops.reshape(ops.repeat(angles[:, :, None], 2, axis=2), (-1, self.head_dim))
        prefix = ops.zeros((self.num_prefix_tokens, self.head_dim), "float32")
        sin = ops.concatenate([prefix, ops.sin(angles)], axis=0)
        cos = ops.concatenate([prefix + 1.0, ops.cos(angles)], axis=0)
        return ops.concatenate([sin, cos], axis=1)

    def compute_output_shape(self, input_shape):
        fixed = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        return (1, None if self.patch_stride is not None else fixed, 2 * self.head_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            variant=self.variant,
            head_dim=self.head_dim,
            grid_size=list(self.grid_size),
            num_prefix_tokens=self.num_prefix_tokens,
            ref_grid=None if self.ref_grid is None else list(self.ref_grid),
            base=self._base_given,
            offset=self._offset_given,
            layout=self._layout_given,
            patch_stride=None if self.patch_stride is None else list(self.patch_stride),
            rescale=self.rescale,
            seed=self.seed,
        )
        return config


def rotate(x, table, layout):
    """x (B, T, H, D_h) rotated by a `RotaryEmbedding` table (1, T, 2 * D_h): x cos + rot(x) sin, where rot pairs
    channel j with j + D_h / 2 ("half": (-x2, x1)) or 2j with 2j + 1 ("interleaved": (-x_{2j+1}, x_{2j}))."""
    head_dim = x.shape[-1]
    table = ops.cast(table, x.dtype)
    sin = ops.expand_dims(table[..., :head_dim], 2)
    cos = ops.expand_dims(table[..., head_dim:], 2)
    if layout == "half":
        half = head_dim // 2
        turned = ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    else:
        shape = ops.shape(x)
        pairs = ops.reshape(x, (shape[0], shape[1], x.shape[2], head_dim // 2, 2))
        turned = ops.stack([-pairs[..., 1], pairs[..., 0]], axis=-1)
        turned = ops.reshape(turned, (shape[0], shape[1], x.shape[2], head_dim))
    return x * cos + turned * sin


def _pair(value):
    pair = (value, value) if isinstance(value, int | float) else tuple(value)
    if len(pair) != 2:
        raise ValueError(f"Expected an int or a pair. Received: {value!r}")
    return tuple(int(v) if float(v).is_integer() else float(v) for v in pair)
