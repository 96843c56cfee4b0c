"""Learned 1-D position embeddings, and their 2-D interpolation to a new patch grid."""

import math

import keras
import numpy as np

RESIZE_METHODS = ("zoom", "bilinear", "bicubic")


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionEmbedding(keras.layers.Layer):
    """Adds a position embedding (`pos_embedding`, shape (1, prefix + gh * gw, D)) to the token sequence.

    The paper's learned 1-D embedding is the default (initialised N(0, 0.02)). `kind="sincos2d"` gives
    big_vision's fixed 2-D sine-cosine table instead (not trained); its prefix (class) row is zero.

    Args:
        grid_size: (gh, gw), the patch grid the embedding is laid out on; kept so that a checkpoint
            made for another grid can be resized (`resize_position_embedding`).
        num_prefix_tokens: tokens before the patch tokens (1 for the class token, else 0).
        kind: "learned" or "sincos2d".
        initializer: initialiser of the learned table.
    """

    def __init__(self, grid_size, num_prefix_tokens=1, kind="learned", initializer=None, **kwargs):
        super().__init__(**kwargs)
        if kind not in ("learned", "sincos2d"):
            raise ValueError(f"kind must be 'learned' or 'sincos2d'. Received: kind={kind!r}")
        self.grid_size = tuple(int(g) for g in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.kind = kind
        self.initializer = keras.initializers.get(initializer or keras.initializers.RandomNormal(stddev=0.02))

    def build(self, input_shape):
        num_tokens = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        if input_shape[1] is not None and input_shape[1] != num_tokens:
            raise ValueError(
                f"PositionEmbedding was made for {num_tokens} tokens ({self.num_prefix_tokens} prefix + "
                f"grid {self.grid_size}), but received {input_shape[1]} tokens."
            )
        width = input_shape[-1]
        if self.kind == "sincos2d":
            table = np.concatenate([np.zeros((self.num_prefix_tokens, width)), sincos_2d_table(self.grid_size, width)])[
                None
            ]
            initializer = keras.initializers.Constant(table.astype("float32"))
        else:
            initializer = self.initializer
        self.pos_embedding = self.add_weight(
            name="pos_embedding",
            shape=(1, num_tokens, width),
            initializer=initializer,
            trainable=self.kind == "learned",
        )

    def call(self, tokens):
        return tokens + keras.ops.cast(self.pos_embedding, tokens.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            grid_size=list(self.grid_size),
            num_prefix_tokens=self.num_prefix_tokens,
            kind=self.kind,
            initializer=keras.initializers.serialize(self.initializer),
        )
        return config


def sincos_2d_table(grid_size, width, temperature=10_000.0):
    """Fixed 2-D sine-cosine embedding of a (gh, gw) grid, shape (gh * gw, width); width must be divisible by 4."""
    if width % 4:
        raise ValueError(f"A 2-D sin-cos position embedding needs a width divisible by 4. Received: width={width}")
    gh, gw = grid_size
    rows, cols = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    quarter = width // 4
    freqs = 1.0 / temperature ** (np.arange(quarter) / max(quarter - 1, 1))
    angles_c = cols.reshape(-1, 1) * freqs
    angles_r = rows.reshape(-1, 1) * freqs
    return np.concatenate([np.sin(angles_c), np.cos(angles_c), np.sin(angles_r), np.cos(angles_r)], axis=1)


def infer_grid(num_patch_tokens):
    """The square grid of a checkpoint's position embedding; non-square grids must be given explicitly."""
    side = math.isqrt(num_patch_tokens)
    if side * side != num_patch_tokens:
        raise ValueError(
            f"Cannot infer the patch grid of a position embedding with {num_patch_tokens} patch tokens "
            f"(not a square number). Pass the grid explicitly, e.g. old_grid=(gh, gw)."
        )
    return side, side


def resize_position_embedding(posemb, new_grid, old_grid=None, num_prefix_tokens=1, method="zoom"):
    """Interpolates a position embedding (1, prefix + gh * gw, D) to a new (gh', gw') patch grid.

    The prefix (class-token) rows are kept unchanged; the grid rows are resampled in 2-D.

    Args:
        posemb: array (1, T, D) or (T, D).
        new_grid: target (gh', gw').
        old_grid: source (gh, gw); inferred when the source grid is square.
        num_prefix_tokens: rows before the grid (1 with a class token).
        method: "zoom" (default) is linear interpolation with corners aligned, what the original code does
            with `scipy.ndimage.zoom(grid, zoom, order=1)`; "bilinear" and "bicubic" use half-pixel centres
            like `tf.image.resize(..., antialias=False)` (bicubic with the Keys a = -0.5 kernel).

    Returns:
        float32 array (1, prefix + gh' * gw', D).
    """
    if method not in RESIZE_METHODS:
        raise ValueError(f"Unknown position-embedding resize method {method!r}; use one of {RESIZE_METHODS}.")
    posemb = np.asarray(posemb, dtype=np.float64)
    if posemb.ndim == 2:
        posemb = posemb[None]
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    old_grid = tuple(old_grid) if old_grid is not None else infer_grid(grid.shape[0])
    if old_grid[0] * old_grid[1] != grid.shape[0]:
        raise ValueError(
            f"old_grid={old_grid} has {old_grid[0] * old_grid[1]} cells but the embedding has "
            f"{grid.shape[0]} patch rows."
        )
    grid = grid.reshape(old_grid[0], old_grid[1], -1)
    new_grid = tuple(int(g) for g in new_grid)
    if new_grid != old_grid:
        grid = np.einsum("ia,abd->ibd", _interpolation_matrix(old_grid[0], new_grid[0], method), grid)
        grid = np.einsum("jb,ibd->ijd", _interpolation_matrix(old_grid[1], new_grid[1], method), grid)
    grid = grid.reshape(1, new_grid[0] * new_grid[1], -1)
    return np.concatenate([prefix, grid], axis=1).astype(np.float32)


def _interpolation_matrix(n_in, n_out, method):
    """(n_out, n_in) matrix whose rows hold the 1-D interpolation weights of each output sample."""
    weights = np.zeros((n_out, n_in))
    out = np.arange(n_out, dtype=np.float64)
    if method == "zoom":
        src = out * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(1)
    else:
        src = (out + 0.5) * n_in / n_out - 0.5
    if method == "bicubic":
        # Taps outside the grid get no weight and the rest are renormalised, as TF's resize does.
        base = np.floor(src).astype(int)
        for offset in (-1, 0, 1, 2):
            idx = base + offset
            inside = (idx >= 0) & (idx < n_in)
            w = np.where(inside, _keys_cubic(src - idx), 0.0)
            np.add.at(weights, (np.arange(n_out), np.clip(idx, 0, n_in - 1)), w)
        return weights / weights.sum(axis=1, keepdims=True)
    src = np.clip(src, 0, n_in - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    np.add.at(weights, (np.arange(n_out), lo), 1 - frac)
    np.add.at(weights, (np.arange(n_out), hi), frac)
    return weights


def _keys_cubic(t, a=-0.5):
    t = np.abs(t)
    return np.where(
        t <= 1,
        (a + 2) * t**3 - (a + 3) * t**2 + 1,
        np.where(t < 2, a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a, 0.0),
    )
