"""timm's `VisionTransformer` / `VisionTransformerDistilled` tensors <-> the original vit_jax key layout, with
LayerScale, register and distillation tokens, CLIP's pre-norm, `fc_norm` and the attention-pooling head."""

import os

import numpy as np

from keras_vit.weights import timm_hybrid
from keras_vit.weights.checkpoint import conv_to_hwio, hwio_to_conv, leftover_error, linear_to_kernel, split_heads
from keras_vit.weights.loading import POSEMB_KEY, CheckpointError

ATT = "MultiHeadDotProductAttention_1"
MAP = "MAPHead_0"
_BLOCK = {
    "norm1": "LayerNorm_0",
    "norm2": "LayerNorm_2",
    "mlp.fc1": "MlpBlock_3/Dense_0",
    "mlp.fc2": "MlpBlock_3/Dense_1",
}
_SCALES = {"ls1.gamma": "LayerScale_1/scale", "ls2.gamma": "LayerScale_3/scale"}
# Tensor-name pieces of timm ViT variants keras-vit does not build, and the feature each stands for.
UNSUPPORTED = {
    ".q_norm.": "qk-norm (a LayerNorm on queries and keys)",
    ".k_norm.": "qk-norm (a LayerNorm on queries and keys)",
    ".attn.norm.": "a LayerNorm inside attention (scale_attn_norm)",
    ".mlp.norm.": "a LayerNorm inside the MLP (scale_mlp_norm)",
    ".fc1_g.": "a SwiGLU MLP",
    ".fc1_x.": "a SwiGLU MLP",
    ".w12.": "a SwiGLU MLP",
    "rope": "rotary position embeddings",
    "patch_embed.backbone.conv1.": "a timm ResNet-D backbone (vit_*_resnet*d_*: BatchNorm, no standardisation)",
    "patch_embed.backbone.layer1.": "a timm ResNet-D backbone (vit_*_resnet*d_*: BatchNorm, no standardisation)",
    "head.fc.": "a head with its own hidden layer",
}


def refuse_unsupported(state, source, library="timm"):
    """One line naming the first feature of `state` keras-vit cannot build exactly."""
    for key in sorted(state):
        for piece, feature in UNSUPPORTED.items():
            if piece in key:
                raise CheckpointError(
                    f"{os.fspath(source)!r} uses {feature} (tensor {key!r}); keras-vit builds no exact equivalent, "
                    f"so this {library} model cannot be loaded."
                )


def _attention(out, dst, qkv_w, qkv_b, hidden, num_heads, parts=("query", "key", "value")):
    for j, part in enumerate(parts):
        out[f"{dst}/{part}/kernel"] = split_heads(linear_to_kernel(qkv_w[j * hidden : (j + 1) * hidden]), num_heads)
        out[f"{dst}/{part}/bias"] = qkv_b[j * hidden : (j + 1) * hidden].reshape(num_heads, -1)


def to_original(state, num_heads, *, source):
    """timm state dict (numpy) -> original-layout params; tensors left over raise a `CheckpointError`."""
    refuse_unsupported(state, source)
    state = dict(state)
    out = {}

    def take(key):
        return np.asarray(state.pop(key))

    def linear(src, dst):
        out[f"{dst}/kernel"] = linear_to_kernel(take(f"{src}.weight"))
        out[f"{dst}/bias"] = take(f"{src}.bias")

    def norm(src, dst):
        out[f"{dst}/scale"] = take(f"{src}.weight")
        out[f"{dst}/bias"] = take(f"{src}.bias")

    try:
        if timm_hybrid.is_hybrid(state):
            timm_hybrid.to_original(state, take, out)
        out["embedding/kernel"] = conv_to_hwio(take("patch_embed.proj.weight"))
        hidden = out["embedding/kernel"].shape[-1]
        if "patch_embed.proj.bias" in state:
            out["embedding/bias"] = take("patch_embed.proj.bias")
        for src, dst in (("cls_token", "cls"), ("dist_token", "dist"), ("reg_token", "registers")):
            if src in state:
                out[dst] = take(src)
        out[POSEMB_KEY] = take("pos_embed")
        if "norm_pre.weight" in state:
            norm("norm_pre", "Transformer/norm_pre")
        i = 0
        while f"blocks.{i}.norm1.weight" in state:
            src, dst = f"blocks.{i}", f"Transformer/encoderblock_{i}"
            for name, target in _BLOCK.items():
                (norm if name.startswith("norm") else linear)(f"{src}.{name}", f"{dst}/{target}")
            for name, target in _SCALES.items():
                if f"{src}.{name}" in state:
                    out[f"{dst}/{target}"] = take(f"{src}.{name}")
            qkv_w = take(f"{src}.attn.qkv.weight")
            qkv_b = state.pop(f"{src}.attn.qkv.bias", np.zeros(3 * hidden, qkv_w.dtype))
            _attention(out, f"{dst}/{ATT}", qkv_w, qkv_b, hidden, num_heads)
            out[f"{dst}/{ATT}/out/kernel"] = linear_to_kernel(take(f"{src}.attn.proj.weight")).reshape(
                num_heads, hidden // num_heads, hidden
            )
            out[f"{dst}/{ATT}/out/bias"] = take(f"{src}.attn.proj.bias")
            i += 1
        for src, dst in (("norm", "Transformer/encoder_norm"), ("fc_norm", "fc_norm")):
            if f"{src}.weight" in state:
                norm(src, dst)
        if "attn_pool.latent" in state:
            _attn_pool_to_original(state, out, take, linear, norm, hidden, num_heads, source)
        for name in ("head", "head_dist"):
            if f"{name}.weight" in state:
                linear(name, name)
    except KeyError as err:
        raise CheckpointError(f"{os.fspath(source)!r} is not a timm ViT: tensor {err} is missing.") from err
    if state:
        raise leftover_error(source, "timm", state)
    return out


def _attn_pool_to_original(state, out, take, linear, norm, hidden, num_heads, source):
    latent = take("attn_pool.latent")
    if latent.shape[1] != 1:
        raise CheckpointError(
            f"{os.fspath(source)!r}: its attention pool has {latent.shape[1]} latent queries; keras-vit's MAPHead "
            f"has one (timm's latent_len=1)."
        )
    out[f"{MAP}/probe"] = latent
    att = f"{MAP}/MultiHeadDotProductAttention_0"
    _attention(out, att, take("attn_pool.q.weight"), take("attn_pool.q.bias"), hidden, num_heads, ("query",))
    kv_w, kv_b = take("attn_pool.kv.weight"), take("attn_pool.kv.bias")
    _attention(out, att, kv_w, kv_b, hidden, num_heads, ("key", "value"))
    out[f"{att}/out/kernel"] = linear_to_kernel(take("attn_pool.proj.weight")).reshape(num_heads, -1, hidden)
    out[f"{att}/out/bias"] = take("attn_pool.proj.bias")
    norm("attn_pool.norm", f"{MAP}/LayerNorm_0")
    linear("attn_pool.mlp.fc1", f"{MAP}/MlpBlock_0/Dense_0")
    linear("attn_pool.mlp.fc2", f"{MAP}/MlpBlock_0/Dense_1")


def _fused(params, src, parts):
    kernels = [np.asarray(params[f"{src}/{p}/kernel"]) for p in parts]
    weight = np.concatenate([k.reshape(k.shape[0], -1).T for k in kernels])
    bias = np.concatenate([np.asarray(params[f"{src}/{p}/bias"]).reshape(-1) for p in parts])
    return weight, bias


def from_original(params, num_heads):
    """Original-layout params -> timm state dict (numpy), the inverse of `to_original`."""
    state = {}
    if "conv_root/kernel" in params:
        timm_hybrid.from_original(params, state)

    def linear(src, dst):
        state[f"{dst}.weight"] = np.asarray(params[f"{src}/kernel"]).T
        state[f"{dst}.bias"] = np.asarray(params[f"{src}/bias"])

    def norm(src, dst):
        state[f"{dst}.weight"] = params[f"{src}/scale"]
        state[f"{dst}.bias"] = params[f"{src}/bias"]

    def out_proj(src, dst):
        kernel = np.asarray(params[f"{src}/out/kernel"])
        state[f"{dst}.weight"] = kernel.reshape(-1, kernel.shape[-1]).T
        state[f"{dst}.bias"] = params[f"{src}/out/bias"]

    state["patch_embed.proj.weight"] = hwio_to_conv(params["embedding/kernel"])
    if "embedding/bias" in params:
        state["patch_embed.proj.bias"] = params["embedding/bias"]
    for src, dst in (("cls", "cls_token"), ("dist", "dist_token"), ("registers", "reg_token")):
        if src in params:
            state[dst] = params[src]
    state["pos_embed"] = params[POSEMB_KEY]
    if "Transformer/norm_pre/scale" in params:
        norm("Transformer/norm_pre", "norm_pre")
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in params:
        src, dst = f"Transformer/encoderblock_{i}", f"blocks.{i}"
        for name, target in _BLOCK.items():
            (norm if name.startswith("norm") else linear)(f"{src}/{target}", f"{dst}.{name}")
        for name, target in _SCALES.items():
            if f"{src}/{target}" in params:
                state[f"{dst}.{name}"] = params[f"{src}/{target}"]
        state[f"{dst}.attn.qkv.weight"], state[f"{dst}.attn.qkv.bias"] = _fused(
            params, f"{src}/{ATT}", ("query", "key", "value")
        )
        out_proj(f"{src}/{ATT}", f"{dst}.attn.proj")
        i += 1
    if "Transformer/encoder_norm/scale" in params:
        norm("Transformer/encoder_norm", "norm")
    if "fc_norm/scale" in params:
        norm("fc_norm", "fc_norm")
    if f"{MAP}/probe" in params:
        att = f"{MAP}/MultiHeadDotProductAttention_0"
        state["attn_pool.latent"] = params[f"{MAP}/probe"]
        state["attn_pool.q.weight"], state["attn_pool.q.bias"] = _fused(params, att, ("query",))
        state["attn_pool.kv.weight"], state["attn_pool.kv.bias"] = _fused(params, att, ("key", "value"))
        out_proj(att, "attn_pool.proj")
        norm(f"{MAP}/LayerNorm_0", "attn_pool.norm")
        linear(f"{MAP}/MlpBlock_0/Dense_0", "attn_pool.mlp.fc1")
        linear(f"{MAP}/MlpBlock_0/Dense_1", "attn_pool.mlp.fc2")
    for name in ("head", "head_dist"):
        if f"{name}/kernel" in params:
            linear(name, name)
    return state
