"""An independent numpy Vision Transformer, written from the paper's equations, reading original-layout checkpoints.

It shares no code with keras_vit: it is the reference the Keras model is checked against.
"""

import math

import numpy as np


def layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu(x, approximate=True):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sincos_2d(grid, width, temperature=10_000.0):
    """big_vision's fixed position table (`posemb_sincos_2d(h, w, width)` in big_vision/models/vit.py), token by token.

    There `y, x = mgrid[:h, :w]` (y the row, x the column), both flattened row-major, so token t sits at row t // w,
    column t % w; with q = width / 4 frequencies omega_k = temperature ** (-k / (q - 1)), a token's row is
    [sin(x omega), cos(x omega), sin(y omega), cos(y omega)]: the column's four quarters first, then the row's.
    """
    h, w = grid
    q = width // 4
    table = np.zeros((h * w, width))
    for t in range(h * w):
        y, x = divmod(t, w)
        for k in range(q):
            omega = temperature ** (-k / (q - 1))
            table[t, k], table[t, q + k] = math.sin(x * omega), math.cos(x * omega)
            table[t, 2 * q + k], table[t, 3 * q + k] = math.sin(y * omega), math.cos(y * omega)
    return table


def patchify(images, p):
    """(B, H, W, C) -> (B, N, P*P*C), patches in row-major order, each flattened (row, col, channel)."""
    b, h, w, c = images.shape
    x = images.reshape(b, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, (h // p) * (w // p), p * p * c)


def attention(x, params, prefix):
    """Multi-head self-attention, one head at a time (deliberately unlike a fused implementation)."""
    g = lambda name: params[f"{prefix}/{name}"]  # noqa: E731
    num_heads, head_dim = g("query/bias").shape
    out = np.zeros_like(x)
    for h in range(num_heads):
        q = x @ g("query/kernel")[:, h] + g("query/bias")[h]
        k = x @ g("key/kernel")[:, h] + g("key/bias")[h]
        v = x @ g("value/kernel")[:, h] + g("value/bias")[h]
        weights = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(head_dim))
        out += (weights @ v) @ g("out/kernel")[h]
    return out + g("out/bias")


def encoder_block(z, params, i, eps=1e-6, approximate_gelu=True):
    """Block i of the encoder: pre-LN attention and MLP, each with its residual."""
    p = f"Transformer/encoderblock_{i}"
    y = layer_norm(z, params[f"{p}/LayerNorm_0/scale"], params[f"{p}/LayerNorm_0/bias"], eps)
    z = z + attention(y, params, f"{p}/MultiHeadDotProductAttention_1")
    y = layer_norm(z, params[f"{p}/LayerNorm_2/scale"], params[f"{p}/LayerNorm_2/bias"], eps)
    y = gelu(y @ params[f"{p}/MlpBlock_3/Dense_0/kernel"] + params[f"{p}/MlpBlock_3/Dense_0/bias"], approximate_gelu)
    return z + y @ params[f"{p}/MlpBlock_3/Dense_1/kernel"] + params[f"{p}/MlpBlock_3/Dense_1/bias"]


def encoder_norm(z, params, eps=1e-6):
    return layer_norm(z, params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"], eps)


def encoder(tokens, params, num_layers, eps=1e-6, approximate_gelu=True):
    z = tokens
    for i in range(num_layers):
        z = encoder_block(z, params, i, eps, approximate_gelu)
    return encoder_norm(z, params, eps)


def embed(images, params):
    """The encoder's input: patch embedding, the class token (if the checkpoint has one), position embedding."""
    x = np.asarray(images, np.float64)
    kernel = np.asarray(params["embedding/kernel"], np.float64)  # (P, P, C, D)
    tokens = patchify(x, kernel.shape[0]) @ kernel.reshape(-1, kernel.shape[-1]) + params["embedding/bias"]
    if "cls" in params:
        cls = np.broadcast_to(params["cls"], (tokens.shape[0], 1, tokens.shape[-1]))
        tokens = np.concatenate([cls, tokens], axis=1)
    return tokens + params["Transformer/posembed_input/pos_embedding"]


def vit_forward(images, params, num_layers, pooling="token", approximate_gelu=True, features=None):
    """Logits of a plain ViT (or, with `features` given, of the transformer on that feature map)."""
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    z = encoder(
        embed(images if features is None else features, params), params, num_layers, approximate_gelu=approximate_gelu
    )
    pooled = z[:, 0] if pooling == "token" else z[:, (1 if "cls" in params else 0) :].mean(1)
    if "pre_logits/kernel" in params:
        pooled = np.tanh(pooled @ params["pre_logits/kernel"] + params["pre_logits/bias"])
    return pooled @ params["head/kernel"] + params["head/bias"]


# ----- the hybrid's ResNet stem -----


def conv2d_same(x, kernel, stride):
    """TF/Flax 'SAME' convolution, NHWC x HWIO, by explicit padding and a sum over kernel taps."""
    b, h, w, _ = x.shape
    kh, kw, _, o = kernel.shape
    out_h, out_w = -(-h // stride), -(-w // stride)
    pad_h = max((out_h - 1) * stride + kh - h, 0)
    pad_w = max((out_w - 1) * stride + kw - w, 0)
    x = np.pad(x, ((0, 0), (pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2), (0, 0)))
    out = np.zeros((b, out_h, out_w, o))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i : i + stride * out_h : stride, j : j + stride * out_w : stride, :]
            out += patch @ kernel[i, j]
    return out


def standardize(kernel, eps=1e-5):
    mean = kernel.mean(axis=(0, 1, 2), keepdims=True)
    return (kernel - mean) / (kernel.std(axis=(0, 1, 2), keepdims=True) + eps)


def group_norm(x, scale, bias, groups=32, eps=1e-6):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / np.sqrt(var + eps)).reshape(b, h, w, c) * scale + bias


def max_pool_same(x, size=3, stride=2):
    b, h, w, c = x.shape
    out_h, out_w = -(-h // stride), -(-w // stride)
    pad_h = max((out_h - 1) * stride + size - h, 0)
    pad_w = max((out_w - 1) * stride + size - w, 0)
    x = np.pad(
        x, ((0, 0), (pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2), (0, 0)), constant_values=-np.inf
    )
    out = np.full((b, out_h, out_w, c), -np.inf)
    for i in range(size):
        for j in range(size):
            out = np.maximum(out, x[:, i : i + stride * out_h : stride, j : j + stride * out_w : stride, :])
    return out


def residual_unit(x, params, prefix, stride):
    g = lambda name: params[f"{prefix}/{name}"]  # noqa: E731
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    residual = x
    if f"{prefix}/conv_proj/kernel" in params:
        residual = group_norm(
            conv2d_same(x, standardize(g("conv_proj/kernel")), stride), g("gn_proj/scale"), g("gn_proj/bias")
        )
    y = relu(group_norm(conv2d_same(x, standardize(g("conv1/kernel")), 1), g("gn1/scale"), g("gn1/bias")))
    y = relu(group_norm(conv2d_same(y, standardize(g("conv2/kernel")), stride), g("gn2/scale"), g("gn2/bias")))
    y = group_norm(conv2d_same(y, standardize(g("conv3/kernel")), 1), g("gn3/scale"), g("gn3/bias"))
    return relu(residual + y)


def resnet_stem(images, params, stage_units):
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = conv2d_same(np.asarray(images, np.float64), standardize(params["conv_root/kernel"]), 2)
    x = np.maximum(group_norm(x, params["gn_root/scale"], params["gn_root/bias"]), 0)
    x = max_pool_same(x)
    for s, units in enumerate(stage_units):
        for u in range(units):
            stride = 2 if (s > 0 and u == 0) else 1
            x = residual_unit(x, params, f"block{s + 1}/unit{u + 1}", stride)
    return x
