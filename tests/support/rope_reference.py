"""numpy versions of the other libraries' rotary embeddings and SwiGLU MLPs, written from their published code's
facts (timm layers/pos_embed_sincos.py and layers/mlp.py, facebookresearch/dinov3 layers/rope_position_encoding.py),
for the layer tests; float64 throughout."""

import numpy as np


def timm_cat_rope(grid, head_dim, ref=None, offset=0.0, indexing="ij", temperature=10000.0):
    """timm `build_rotary_pos_embed(in_pixels=False)` (EVA-02, PE): (sin, cos), each (gh * gw, head_dim),
    interleaved: every angle repeated twice side by side."""
    bands = head_dim // 4
    freqs = 1.0 / temperature ** (np.arange(bands) / bands)
    shape, ref_shape = list(grid), None if ref is None else list(ref)
    if indexing == "xy":
        shape = shape[::-1]
        ref_shape = None if ref_shape is None else ref_shape[::-1]
    t = [np.arange(s, dtype=np.float64) + offset for s in shape]
    if ref_shape is not None:
        t = [x / f * r for x, f, r in zip(t, shape, ref_shape)]
    mesh = np.stack(np.meshgrid(*t, indexing=indexing), axis=-1)  # (gh, gw, 2) either way
    pos = mesh[..., None] * freqs  # (gh, gw, 2, bands)
    pos = pos.reshape(grid[0] * grid[1], -1)
    return np.repeat(np.sin(pos), 2, axis=-1), np.repeat(np.cos(pos), 2, axis=-1)


def dinov3_rope(grid, head_dim, base=100.0, order="yx", rescale=1.0):
    """DINOv3 `RopePositionEmbedding` (normalize_coords='separate'): (sin, cos), each (gh * gw, head_dim), half
    layout: the (y, x) angles tiled twice (`order="xy"`: the axes swapped, a negative control); `rescale`: the
    training-time factor its `rescale_coords` draws, multiplying the [-1, 1] coordinates."""
    h, w = grid
    coords_h = np.arange(0.5, h) / h
    coords_w = np.arange(0.5, w) / w
    coords = np.stack(np.meshgrid(coords_h, coords_w, indexing="ij"), axis=-1).reshape(-1, 2)
    coords = (2.0 * coords - 1.0) * rescale
    if order == "xy":
        coords = coords[:, ::-1]
    periods = base ** (2 * np.arange(head_dim // 4) / (head_dim // 2))
    angles = 2 * np.pi * coords[:, :, None] / periods[None, None, :]
    angles = np.tile(angles.reshape(h * w, -1), 2)
    return np.sin(angles), np.cos(angles)


def rot_interleaved(x):
    """timm `rot`: [x0, x1, x2, x3] -> [-x1, x0, -x3, x2]."""
    return np.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)


def rotate_half(x):
    """timm `rope_rotate_half` / DINOv3: [x1, x2] -> [-x2, x1]."""
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([-x2, x1], axis=-1)


def apply_rope(x, sin, cos, half, num_prefix=0):
    """timm `apply_rot_embed_cat` on the tokens after `num_prefix` of x (B, T, H, D_h); the prefix left as is."""
    body = x[:, num_prefix:]
    s, c = sin[None, :, None], cos[None, :, None]
    turned = (rotate_half if half else rot_interleaved)(body)
    return np.concatenate([x[:, :num_prefix], body * c + turned * s], axis=1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def timm_swiglu(x, fc1_g, fc1_x, fc2, norm=None, eps=1e-6):
    """timm `SwiGLU`: fc2(norm(silu(fc1_g(x)) * fc1_x(x))); each fc a (weight (out, in), bias) pair."""
    hidden = silu(x @ fc1_g[0].T + fc1_g[1]) * (x @ fc1_x[0].T + fc1_x[1])
    if norm is not None:
        hidden = layer_norm(hidden, *norm, eps)
    return hidden @ fc2[0].T + fc2[1]


def timm_glu_packed(x, fc1, fc2):
    """timm `GluMlp(act_layer=SiLU, gate_last=False)` (`SwiGLUPacked`): fc1 [2H, D] chunked, the first half the gate."""
    a, b = np.split(x @ fc1[0].T + fc1[1], 2, axis=-1)
    return (silu(a) * b) @ fc2[0].T + fc2[1]
