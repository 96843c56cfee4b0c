"""The attention product softmax(Q K^T * scale) V on (B, T, H, D_h) tokens: `fused` (the backend's kernel; on a JAX
GPU the sequence padded to keep cuDNN's, docs/models.md) or `explicit`; `KERAS_VIT_FUSED_ATTENTION` chooses."""

import os

import keras
import numpy as np
from keras import ops

from keras_vit.layers.device import platform

ENV = "KERAS_VIT_FUSED_ATTENTION"
PAD_ENV = "KERAS_VIT_ATTENTION_PAD"
DEFAULT_PAD = 2  # the padding multiple without PAD_ENV; the GPU advice takes only rows measured with it
_MODES = {"auto": "auto", "always": "always", "1": "always", "true": "always", "never": "never", "0": "never"}


def mode():
    """`auto`, `always` or `never`, from `KERAS_VIT_FUSED_ATTENTION`."""
    raw = os.environ.get(ENV, "auto")
    value = _MODES.get(raw.strip().lower() or "auto")
    if value is None:
        raise ValueError(f"{ENV} must be auto, always or never. Received: {ENV}={raw!r}; unset it for auto.")
    return value


def use_fused(query):
    """Whether `attend` should take the fused route for `query` (the call allowing it: no dropout, no weights)."""
    chosen = mode()
    if chosen != "auto":
        return chosen == "always"
    return keras.config.backend() in ("jax", "torch") and platform(query) in ("gpu", "tpu")


def padding_multiple(query):
    """The multiple the sequence is padded to for the fused kernel: >1 only for cuDNN (JAX, GPU, half precision)."""
    dtype = keras.backend.standardize_dtype(query.dtype)
    if keras.config.backend() != "jax" or dtype not in ("bfloat16", "float16") or platform(query) != "gpu":
        return 1
    raw = os.environ.get(PAD_ENV, str(DEFAULT_PAD))
    try:
        multiple = int(raw)
    except ValueError:
        multiple = 0
    if multiple < 1:
        raise ValueError(
            f"{PAD_ENV} must be a positive integer. Received: {PAD_ENV}={raw!r}; unset it for {DEFAULT_PAD}."
        )
    return multiple


def key_bias(key_mask, dtype):
    """(B, S) key mask (nonzero: a real token) -> the additive (B, 1, 1, S) bias: 0 on real keys, -1e9 on the rest
    (-6e4 in float16, its largest finite magnitude being 65504).

    Finite rather than -inf: a row whose keys are all masked (a batch's empty padding image) stays finite.
    """
    large = 6e4 if keras.backend.standardize_dtype(dtype) == "float16" else 1e9
    valid = ops.cast(ops.not_equal(key_mask, 0), "float32")
    return ops.cast((valid - 1.0) * large, dtype)[:, None, None, :]


def fused(query, key, value, scale, multiple=None, bias=None):
    """softmax(Q K^T * scale + bias) V through `keras.ops.dot_product_attention`, sequences padded to `multiple`
    (not with a `bias`: the padded keys would need their own)."""
    if bias is not None:
        return ops.dot_product_attention(query, key, value, bias=bias, scale=scale)
    multiple = padding_multiple(query) if multiple is None else multiple
    tokens, keys = query.shape[1], key.shape[1]
    if multiple == 1 or tokens is None or keys is None or not (tokens % multiple or keys % multiple):
        return ops.dot_product_attention(query, key, value, scale=scale)
    pad_queries, pad_keys = -tokens % multiple, -keys % multiple
    query = ops.pad(query, ((0, 0), (0, pad_queries), (0, 0), (0, 0)))
    key = ops.pad(key, ((0, 0), (0, pad_keys), (0, 0), (0, 0)))
    value = ops.pad(value, ((0, 0), (0, pad_keys), (0, 0), (0, 0)))
    # A constant (1, 1, T', S') mask: the kernels take the bias it becomes with full sequence axes.
    valid = np.broadcast_to(np.arange(keys + pad_keys) < keys, (1, 1, tokens + pad_queries, keys + pad_keys))
    attended = ops.dot_product_attention(query, key, value, mask=valid, scale=scale)
    return attended[:, :tokens]


def explicit(query, key, value, scale, dropout=None, training=None, recompute=False, bias=None):
    """(softmax(Q K^T * scale + bias) V, the softmax weights (B, H, T, S)); dropout on the weights when given.

    `recompute` (no dropout): the weights, which the product with V needs for V's gradient, are recomputed from the
    scores (a matmul output, kept) in the backward pass instead of kept beside them (`keras.remat`); the weights
    returned are then None."""
    scores = ops.einsum("bqhk,bshk->bhqs", query if scale == 1.0 else query * scale, key)
    if bias is not None:
        scores = scores + bias
    if recompute and dropout is None:
        return keras.remat(lambda s, v: ops.einsum("bhqs,bshk->bqhk", _softmax(s), v))(scores, value), None
    weights = _softmax(scores)
    dropped = weights if dropout is None else dropout(weights, training=training)
    return ops.einsum("bhqs,bshk->bqhk", dropped, value), weights


def _softmax(scores):
    # In float32 even under a bfloat16/float16 policy: the row sums are what mixed precision hurts.
    return ops.cast(ops.softmax(ops.cast(scores, "float32"), axis=-1), scores.dtype)
