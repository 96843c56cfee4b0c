"""A learned position table resized to each image's patch grid inside the graph (SigLIP 2 NaFlex)."""

import keras
from keras import ops

from keras_vit.layers.deferred_init import add_weight


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexPositionEmbedding(keras.layers.Layer):
    """Adds the (gh, gw) learned table, resized per image to that image's (h, w) patch grid, to its first h * w
    tokens (row-major); the padding tokens after them get nothing.

    The resize is bilinear, align_corners=False, antialiased (`F.interpolate(..., mode="bilinear",
    antialias=True)` in timm and transformers): each axis has a 1-D weight matrix whose row i is the triangle
    kernel centred at (i + 0.5) * gh / h - 0.5 and widened by gh / h when the grid shrinks, renormalised over the
    table's rows. The layer builds those rows for every token of every image from the grid tensor and applies them
    as one (B, N, gh * gw) x (gh * gw, D) product: no shape depends on the grid, so it traces to a static graph on
    every backend and export format. On the table's own grid the matrix is the identity.

    Args:
        grid_size: (gh, gw) of the stored table (16 x 16 in the released SigLIP 2 NaFlex weights).
        initializer: the table's initialiser.

    Call arguments:
        tokens: (B, N, D) patch embeddings.
        grid: (B, 2) int, each image's (rows, columns) of patches; rows * columns <= N.
    """

    num_prefix_tokens = 0  # no class token: what loading reads when it resizes a checkpoint's table to `grid_size`

    def __init__(self, grid_size, initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(g) for g in grid_size)
        if len(self.grid_size) != 2 or min(self.grid_size) < 1:
            raise ValueError(f"grid_size must be two positive ints. Received: grid_size={grid_size!r}")
        self.initializer = keras.initializers.get(initializer or keras.initializers.RandomNormal(stddev=0.02))

    def build(self, tokens_shape, grid_shape=None):
        cells = self.grid_size[0] * self.grid_size[1]
        self.pos_embedding = add_weight(
            self, name="pos_embedding", shape=(1, cells, tokens_shape[-1]), initializer=self.initializer
        )

    def call(self, tokens, grid):
        weights = interpolation_weights(grid, tokens.shape[1], self.grid_size)
        table = ops.cast(self.pos_embedding[0], "float32")
        return tokens + ops.cast(ops.einsum("bng,gd->bnd", weights, table), tokens.dtype)

    def compute_output_shape(self, tokens_shape, grid_shape=None):
        return tokens_shape

    def get_config(self):
        config = super().get_config()
        config.update(grid_size=list(self.grid_size), initializer=keras.initializers.serialize(self.initializer))
        return config


def _axis_weights(index, size, n_in):
    """(B, N, n_in) antialiased bilinear weights of output sample `index` (B, N) on an axis of `size` (B, 1)
    samples resampled from `n_in`."""
    scale = float(n_in) / size
    widen = ops.maximum(scale, 1.0)
    center = (index + 0.5) * scale
    source = ops.cast(ops.arange(n_in), "float32") + 0.5
    weights = ops.relu(1.0 - ops.abs(source[None, None, :] - center[..., None]) / widen[..., None])
    return weights / ops.maximum(ops.sum(weights, axis=-1, keepdims=True), 1e-12)


def interpolation_weights(grid, num_tokens, table_grid):
    """(B, N, gh * gw) float32: row n of image b holds the table weights of token n (zero past its h * w tokens).

    Args:
        grid: (B, 2) int tensor of (h, w) per image.
        num_tokens: N, the padded token count.
        table_grid: (gh, gw) of the table.
    """
    grid = ops.maximum(ops.cast(grid, "int32"), 1)  # an all-padding row of a batch may carry a (0, 0) grid
    rows, cols = grid[:, :1], grid[:, 1:]
    token = ops.arange(num_tokens, dtype="int32")[None, :]
    row, col = ops.floor_divide(token, cols), ops.mod(token, cols)
    wy = _axis_weights(ops.cast(row, "float32"), ops.cast(rows, "float32"), table_grid[0])
    wx = _axis_weights(ops.cast(col, "float32"), ops.cast(cols, "float32"), table_grid[1])
    valid = ops.cast(token < rows * cols, "float32")[..., None, None]
    weights = wy[..., :, None] * wx[..., None, :] * valid
    return ops.reshape(weights, (-1, num_tokens, table_grid[0] * table_grid[1]))
