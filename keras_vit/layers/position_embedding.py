"""Learned 1-D position embeddings, and their 2-D interpolation to a new patch grid."""

import math

import keras
import numpy as np

from keras_vit.layers.deferred_init import add_weight

RESIZE_METHODS = ("zoom", "bilinear", "bicubic")


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionEmbedding(keras.layers.Layer):
    """Adds a position embedding (`pos_embedding`, shape (1, prefix + gh * gw, D)) to the token sequence.

    The paper's learned 1-D embedding is the default (initialised N(0, 0.02)). `kind="sincos2d"` gives
    big_vision's fixed 2-D sine-cosine table instead (not trained); its prefix (class) row is zero.

    With `resize_method` set, the layer also takes images of other sizes: `call(tokens, images)` interpolates
    the stored table from `grid_size` to the images' grid (height and width divided by `patch_stride`) inside
    the graph, with the same weights `resize_position_embedding(..., method=resize_method)` computes offline,
    so the result equals a model built at that size whose embedding was resized when loading. On the stored
    grid the stored table is used as it is.

    Args:
        grid_size: (gh, gw), the patch grid the embedding is laid out on; kept so that a checkpoint
            made for another grid can be resized (`resize_position_embedding`).
        num_prefix_tokens: tokens before the patch tokens (1 for the class token, else 0).
        kind: "learned" or "sincos2d".
        initializer: initialiser of the learned table.
        resize_method: None (a fixed grid) or one of RESIZE_METHODS: interpolate to the input's grid at run time.
        patch_stride: (sh, sw), pixels of the `images` passed to `call` per patch; needed with `resize_method`.
    """

    def __init__(
        self,
        grid_size,
        num_prefix_tokens=1,
        kind="learned",
        initializer=None,
        resize_method=None,
        patch_stride=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if kind not in ("learned", "sincos2d"):
            raise ValueError(f"kind must be 'learned' or 'sincos2d'. Received: kind={kind!r}")
        if resize_method is not None and resize_method not in RESIZE_METHODS:
            raise ValueError(f"resize_method must be None or one of {RESIZE_METHODS}. Received: {resize_method!r}")
        if resize_method is not None and patch_stride is None:
            raise ValueError("resize_method needs patch_stride, the pixels per patch of the images given to call().")
        self.grid_size = tuple(int(g) for g in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.kind = kind
        self.initializer = keras.initializers.get(initializer or keras.initializers.RandomNormal(stddev=0.02))
        self.resize_method = resize_method
        self.patch_stride = None if patch_stride is None else _pair(patch_stride)

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
        self.pos_embedding = add_weight(
            self,
            name="pos_embedding",
            shape=(1, num_tokens, width),
            initializer=initializer,
            trainable=self.kind == "learned",
        )

    def call(self, tokens, images=None):
        table = self.pos_embedding
        if images is not None and self.resize_method is not None:
            table = self.table_for(images)
        return tokens + keras.ops.cast(table, tokens.dtype)

    def compute_output_shape(self, input_shape):
        # Declared rather than traced: a symbolic trace (JAX's) cannot see that the image grid and the
        # token count agree.
        return input_shape

    def table_for(self, images):
        """The embedding (1, prefix + gh' * gw', D) for the patch grid of `images` (B, H, W, C)."""
        shape = keras.ops.shape(images)
        grid = (shape[1] // self.patch_stride[0], shape[2] // self.patch_stride[1])
        # Static sizes (eager, JAX, a fixed-size trace) on the stored grid: the variable itself, bit for bit.
        if all(isinstance(g, int) for g in grid) and tuple(grid) == self.grid_size:
            return self.pos_embedding
        return resize_position_embedding_in_graph(
            self.pos_embedding, grid, self.grid_size, self.num_prefix_tokens, self.resize_method
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            grid_size=list(self.grid_size),
            num_prefix_tokens=self.num_prefix_tokens,
            kind=self.kind,
            initializer=keras.initializers.serialize(self.initializer),
        )
        if self.resize_method is not None:
            config.update(resize_method=self.resize_method, patch_stride=list(self.patch_stride))
        return config


def _pair(value):
    pair = (value, value) if isinstance(value, int) else tuple(int(v) for v in value)
    if len(pair) != 2 or min(pair) <= 0:
        raise ValueError(f"patch_stride must be a positive int or a pair of them. Received: {value!r}")
    return pair


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


def resize_position_embedding_in_graph(posemb, new_grid, old_grid, num_prefix_tokens=1, method="zoom"):
    """`resize_position_embedding` with keras.ops, for a target grid known only at run time.

    Each axis is resampled as a sum over a few taps, `take(grid, index) * weight`, whose indices and weights are
    the non-zero entries of the offline interpolation matrix; gathers and elementwise products rather than
    matrix products keep the result at float32 rounding of the offline one on every device (a matmul may run
    in TF32 or bfloat16 on accelerators), and reproduce the table exactly where the grid is unchanged.

    Args:
        posemb: tensor (1, prefix + gh * gw, D).
        new_grid: (gh', gw'), Python ints or scalar int tensors.
        old_grid: (gh, gw), Python ints.
        num_prefix_tokens: rows kept as they are (the class token).
        method: one of RESIZE_METHODS.

    Returns:
        float32 tensor (1, prefix + gh' * gw', D).
    """
    ops = keras.ops
    posemb = ops.cast(posemb, "float32")
    width = posemb.shape[-1]
    prefix = posemb[:, :num_prefix_tokens]
    grid = ops.reshape(posemb[0, num_prefix_tokens:], (old_grid[0], old_grid[1], width))
    for axis in (0, 1):
        taps = _taps(old_grid[axis], new_grid[axis], method)
        shape = (-1, 1, 1) if axis == 0 else (1, -1, 1)
        resampled = None
        for index, weight in taps:
            term = ops.take(grid, index, axis=axis) * ops.reshape(weight, shape)
            resampled = term if resampled is None else resampled + term
        grid = resampled
    return ops.concatenate([prefix, ops.reshape(grid, (1, -1, width))], axis=1)


def _taps(n_in, n_out, method):
    """[(index int32 (n_out,), weight float32 (n_out,))]: the rows of `_interpolation_matrix` as taps."""
    ops = keras.ops
    out = ops.cast(ops.arange(n_out), "float32")
    if method == "zoom":
        src = out * float(n_in - 1) / ops.cast(ops.maximum(n_out - 1, 1), "float32")
    else:
        src = (out + 0.5) * float(n_in) / ops.cast(n_out, "float32") - 0.5
    if method == "bicubic":
        base = ops.floor(src)
        taps = []
        for offset in (-1, 0, 1, 2):
            index = base + offset
            inside = ops.logical_and(index >= 0, index <= n_in - 1)
            weight = ops.where(inside, _keys_cubic_ops(src - index), 0.0)
            taps.append((ops.cast(ops.clip(index, 0, n_in - 1), "int32"), weight))
        total = taps[0][1] + taps[1][1] + taps[2][1] + taps[3][1]
        return [(index, weight / total) for index, weight in taps]
    src = ops.clip(src, 0.0, float(n_in - 1))
    lo = ops.floor(src)
    frac = src - lo
    lo = ops.cast(lo, "int32")
    hi = ops.minimum(lo + 1, n_in - 1)
    return [(lo, 1.0 - frac), (hi, frac)]


def _keys_cubic_ops(t, a=-0.5):
    t = keras.ops.abs(t)
    near = (a + 2) * t**3 - (a + 3) * t**2 + 1
    far = a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return keras.ops.where(t <= 1, near, keras.ops.where(t < 2, far, 0.0))
