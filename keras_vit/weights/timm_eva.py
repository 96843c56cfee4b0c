"""timm's `Eva` models (DINOv3, EVA-02, Perception Encoder) and AIMv2 `VisionTransformer`s <-> the original layout.

The options come from the architecture table (`timm_architectures.py`) merged with the folder's `model_args`; the
tensors confirm what they show (biases, fused or split q/k/v, packed or split SwiGLU, sub-LNs) and are converted to
the original key layout the one loading table reads (`loading.checkpoint_variables`).
"""

import os
import re

import numpy as np

from keras_vit.weights import timm_architectures as arch_table
from keras_vit.weights.checkpoint import conv_to_hwio, hwio_to_conv, leftover_error, linear_to_kernel, split_heads
from keras_vit.weights.loading import POSEMB_KEY, CheckpointError
from keras_vit.weights.timm_layout import _attn_pool_to_original, _fused

ATT = "MultiHeadDotProductAttention_1"
_POOLS = {"token": "token", "avg": "gap", "map": "map"}


def split_packed_fc1(weight, bias=None):
    """timm's packed SwiGLU `mlp.fc1` ([2H, D] weight, [2H] bias; `GluMlp(gate_last=False)`: the gate first) ->
    ((gate weight, gate bias), (up weight, up bias))."""
    weight = np.asarray(weight)
    half = weight.shape[0] // 2
    biases = (None, None) if bias is None else (np.asarray(bias)[:half], np.asarray(bias)[half:])
    return (weight[:half], biases[0]), (weight[half:], biases[1])


def _final_norms(kw, pool):
    """(a norm after pooling, a norm after the last block): timm Eva's arguments, or its defaults for `pool`."""
    fc_norm = kw["use_fc_norm"] if kw["use_fc_norm"] is not None else pool == "avg"
    post_norm = kw["use_post_transformer_norm"] if kw["use_post_transformer_norm"] is not None else not fc_norm
    return fc_norm, post_norm


def options(kw, params, state, grid, source):
    """`ViTConfig` fields of an Eva / AIMv2 model: `kw` its timm arguments, `params` its original-layout tensors."""
    block = "Transformer/encoderblock_0"
    hidden = int(params["embedding/kernel"].shape[-1])
    swiglu = f"{block}/MlpBlock_3/gate/kernel" in params
    dense_in = f"{block}/MlpBlock_3/{'gate' if swiglu else 'Dense_0'}/kernel"
    pool = kw.get("global_pool", "avg")
    if pool not in _POOLS:
        raise CheckpointError(f"{source!r} uses global_pool={pool!r}; keras-vit pools {sorted(_POOLS)}.")
    fc_norm, post_norm = _final_norms(kw, pool)
    if kw.get("aimv2"):
        fc_norm, post_norm = bool(kw.get("fc_norm", False)), True
    if fc_norm and post_norm:
        raise CheckpointError(f"{source!r} normalises before and after pooling; keras-vit builds one or the other.")
    out = dict(
        patch_size=int(params["embedding/kernel"].shape[0]), channels=int(params["embedding/kernel"].shape[2]),
        hidden_size=hidden, num_layers=_depth(params), num_heads=int(kw["num_heads"]),
        mlp_dim=int(params[dense_in].shape[1]), num_classes=int(params["head/bias"].shape[0]) if "head/bias" in params
        else 0, pooling=_POOLS[pool], class_token="cls" in params, layer_norm_epsilon=float(kw["norm_eps"]),
        gelu="exact", layer_scale=1e-5 if f"{block}/LayerScale_1/scale" in params else None,
        num_registers=int(params["registers"].shape[1]) if "registers" in params else 0,
        position_embedding="learned" if POSEMB_KEY in params else "none", pre_norm="Transformer/norm_pre/scale" in
        params, patch_bias="embedding/bias" in params, fc_norm=fc_norm, encoder_norm=post_norm,
        mlp_type="swiglu" if swiglu else "gelu", mlp_norm=f"{block}/MlpBlock_3/norm/scale" in params,
        attention_norm=f"{block}/{ATT}/norm/scale" in params, qkv_bias=_qkv_bias(params),
        proj_bias=f"{block}/{ATT}/out/bias" in params, mlp_bias=f"{block}/MlpBlock_3/Dense_1/bias" in params,
        norm="rms" if kw.get("aimv2") else "layer", patch_norm="patch_norm/scale" in params,
        dynamic_image_size=bool(kw.get("dynamic_img_size")),
    )  # fmt: skip
    if "MAPHead_0/probe" in params:
        out["map_heads"] = int(kw["attn_pool_num_heads"] or kw["num_heads"])
        out["map_mlp_dim"] = int(params["MAPHead_0/MlpBlock_0/Dense_0/kernel"].shape[1])
    out.update(_rope_options(kw, source))
    out["image_size"] = (grid[0] * out["patch_size"], grid[1] * out["patch_size"])
    if out["position_embedding"] == "learned":
        out["dynamic_resize_method"] = "bicubic"  # timm's resample_abs_pos_embed
        rows, prefix = params[POSEMB_KEY].shape[1], out["class_token"] + out["num_registers"]
        if rows == grid[0] * grid[1] and prefix:
            out["no_embed_class"] = True
        elif rows != grid[0] * grid[1] + prefix:
            raise CheckpointError(f"{source!r}: pos_embed has {rows} rows for the grid {tuple(grid)}.")
    return out


def architecture_options(architecture, image_size, num_classes, model_args=None):
    """`ViTConfig` fields of `timm.create_model(architecture, img_size=image_size, num_classes=num_classes,
    **model_args)` for an `Eva` architecture (DINOv3, EVA-02, PE), from its arguments alone: what `options` reads
    from a checkpoint's tensors, for a model without one (benchmarks). Raises `ValueError` for any other name."""
    if architecture not in arch_table.EVA:
        arch_table.family(architecture)  # a refused family names itself
        raise ValueError(
            f"timm architecture {architecture!r} is not one of the Eva architectures keras-vit builds (DINOv3, EVA-02, "
            f"PE: e.g. vit_small_patch16_dinov3, eva02_small_patch14_224); plain ViTs are keras-vit variants (S/16)"
        )
    kw = arch_table.eva_kwargs(architecture, dict(model_args or {}))
    hidden, heads, pool = int(kw["embed_dim"]), int(kw["num_heads"]), kw["global_pool"]
    mlp_dim = int(hidden * kw["mlp_ratio"])
    if kw["swiglu_mlp"] and kw["swiglu_align_to"]:
        mlp_dim += -mlp_dim % int(kw["swiglu_align_to"])  # timm's SwiGLU(align_to=)
    fc_norm, post_norm = _final_norms(kw, pool)
    patch = kw.get("patch_size") or int(re.search(r"patch(\d+)", architecture).group(1))
    out = dict(
        image_size=(image_size, image_size) if isinstance(image_size, int) else tuple(image_size), patch_size=patch,
        channels=int(kw.get("in_chans", 3)), hidden_size=hidden, num_layers=int(kw["depth"]), num_heads=heads,
        mlp_dim=mlp_dim, num_classes=num_classes, pooling=_POOLS[pool], class_token=bool(kw["class_token"]),
        layer_norm_epsilon=float(kw["norm_eps"]), gelu="exact",
        layer_scale=float(kw["init_values"]) if kw["init_values"] else None, num_registers=int(kw["num_reg_tokens"]),
        position_embedding="learned" if kw["use_abs_pos_emb"] else "none", pre_norm=kw["use_pre_transformer_norm"],
        patch_bias=not kw["use_pre_transformer_norm"], fc_norm=fc_norm, encoder_norm=post_norm,
        mlp_type="swiglu" if kw["swiglu_mlp"] else "gelu", mlp_norm=kw["scale_mlp"],
        attention_norm=kw["scale_attn_inner"], proj_bias=True, mlp_bias=True, norm="layer", patch_norm=False,
        qkv_bias=("qkv" if kw["attn_type"] == "rope" else "qv") if kw["qkv_bias"] else "none",
        dynamic_image_size=bool(kw["dynamic_img_size"]),
    )  # fmt: skip
    if pool == "map":
        out["map_heads"] = int(kw["attn_pool_num_heads"] or heads)
        out["map_mlp_dim"] = int(hidden * (kw["attn_pool_mlp_ratio"] or kw["mlp_ratio"]))
    if out["position_embedding"] == "learned":
        out["dynamic_resize_method"] = "bicubic"
        out["no_embed_class"] = bool(kw["no_embed_class"]) and bool(out["class_token"] + out["num_registers"])
    return {**out, **_rope_options(kw, architecture)}


def _rope_options(kw, source):
    if not kw["use_rot_pos_emb"]:
        return {}
    if kw["rope_type"] == "dinov3":
        if not kw["rope_rotate_half"]:
            raise CheckpointError(f"{source!r}: DINOv3 RoPE with rope_rotate_half=False is not DINOv3's layout.")
        base = float(kw["rope_temperature"])
        return dict(rope="dinov3", **({"rope_base": base} if base != 100.0 else {}))
    if kw["rope_type"] != "cat" or kw["rope_rotate_half"]:
        raise CheckpointError(f"{source!r}: RoPE type {kw['rope_type']!r} (rotate_half={kw['rope_rotate_half']}).")
    variant = "pe" if kw["rope_grid_indexing"] == "xy" else "eva"
    out = dict(rope=variant)
    ref = kw["ref_feat_shape"]
    if ref is not None:
        out["rope_ref_grid"] = tuple(float(r) for r in ((ref, ref) if isinstance(ref, int | float) else ref))
    offset = float(kw["rope_grid_offset"])
    if offset != (1.0 if variant == "pe" else 0.0):
        out["rope_offset"] = offset
    if float(kw["rope_temperature"]) != 10000.0:
        out["rope_base"] = float(kw["rope_temperature"])
    return out


def _depth(params):
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in params:
        i += 1
    return i


def _qkv_bias(params):
    block = f"Transformer/encoderblock_0/{ATT}"
    have = [f"{block}/{p}/bias" in params for p in ("query", "key", "value")]
    return "qkv" if all(have) else "qv" if have[0] and have[2] else "none" if not any(have) else "?"


def to_original(state, num_heads, map_heads, *, source):
    """An Eva / AIMv2 state dict -> original-layout params; tensors left over raise a `CheckpointError`."""
    state = dict(state)
    out = {}

    def take(key):
        return np.asarray(state.pop(key))

    def linear(src, dst, weight=None, bias=None):
        weight = take(f"{src}.weight") if weight is None else weight
        out[f"{dst}/kernel"] = linear_to_kernel(weight)
        bias = state.pop(f"{src}.bias", None) if bias is None else bias
        if bias is not None:
            out[f"{dst}/bias"] = np.asarray(bias)

    def norm(src, dst):
        out[f"{dst}/scale"] = take(f"{src}.weight")
        if f"{src}.bias" in state:
            out[f"{dst}/bias"] = take(f"{src}.bias")

    try:
        out["embedding/kernel"] = conv_to_hwio(take("patch_embed.proj.weight"))
        hidden = out["embedding/kernel"].shape[-1]
        if "patch_embed.proj.bias" in state:
            out["embedding/bias"] = take("patch_embed.proj.bias")
        if "patch_embed.norm.weight" in state:
            norm("patch_embed.norm", "patch_norm")
        for src, dst in (("cls_token", "cls"), ("reg_token", "registers"), ("pos_embed", POSEMB_KEY)):
            if src in state:
                out[dst] = take(src)
        if "norm_pre.weight" in state:
            norm("norm_pre", "Transformer/norm_pre")
        i = 0
        while f"blocks.{i}.norm1.weight" in state:
            _block_to_original(f"blocks.{i}", f"Transformer/encoderblock_{i}", state, out, take, linear, norm,
                               hidden, num_heads)  # fmt: skip
            i += 1
        for src, dst in (("norm", "Transformer/encoder_norm"), ("fc_norm", "fc_norm")):
            if f"{src}.weight" in state:
                norm(src, dst)
        if "attn_pool.latent" in state:
            _attn_pool_to_original(state, out, take, linear, norm, hidden, map_heads, source)
        if "head.weight" in state:
            linear("head", "head")
    except KeyError as err:
        raise CheckpointError(f"{os.fspath(source)!r} is not a timm Eva/AIMv2 ViT: tensor {err} is missing.") from err
    if state:
        raise leftover_error(source, "timm", state)
    return out


def _block_to_original(src, dst, state, out, take, linear, norm, hidden, num_heads):
    norm(f"{src}.norm1", f"{dst}/LayerNorm_0")
    norm(f"{src}.norm2", f"{dst}/LayerNorm_2")
    for name, target in (("gamma_1", "LayerScale_1"), ("gamma_2", "LayerScale_3"), ("ls1.gamma", "LayerScale_1"),
                         ("ls2.gamma", "LayerScale_3")):  # fmt: skip
        if f"{src}.{name}" in state:
            out[f"{dst}/{target}/scale"] = take(f"{src}.{name}")
    att = f"{dst}/{ATT}"
    if f"{src}.attn.qkv.weight" in state:
        weight = take(f"{src}.attn.qkv.weight")
        full = state.pop(f"{src}.attn.qkv.bias", None)
        q_bias, v_bias = state.pop(f"{src}.attn.q_bias", None), state.pop(f"{src}.attn.v_bias", None)
        biases = (None, None, None) if full is None else np.split(np.asarray(full), 3)
        if q_bias is not None:
            biases = (q_bias, None, v_bias)
        for j, part in enumerate(("query", "key", "value")):
            out[f"{att}/{part}/kernel"] = split_heads(linear_to_kernel(weight[j * hidden : (j + 1) * hidden]),
                                                      num_heads)  # fmt: skip
            if biases[j] is not None:
                out[f"{att}/{part}/bias"] = np.asarray(biases[j]).reshape(num_heads, -1)
    else:
        for name, part in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")):
            out[f"{att}/{part}/kernel"] = split_heads(linear_to_kernel(take(f"{src}.attn.{name}.weight")), num_heads)
            if f"{src}.attn.{name}.bias" in state:
                out[f"{att}/{part}/bias"] = take(f"{src}.attn.{name}.bias").reshape(num_heads, -1)
    if f"{src}.attn.norm.weight" in state:
        norm(f"{src}.attn.norm", f"{att}/norm")
    out[f"{att}/out/kernel"] = linear_to_kernel(take(f"{src}.attn.proj.weight")).reshape(num_heads, -1, hidden)
    if f"{src}.attn.proj.bias" in state:
        out[f"{att}/out/bias"] = take(f"{src}.attn.proj.bias")
    mlp = f"{dst}/MlpBlock_3"
    if f"{src}.mlp.fc1_g.weight" in state:
        linear(f"{src}.mlp.fc1_g", f"{mlp}/gate")
        linear(f"{src}.mlp.fc1_x", f"{mlp}/up")
    elif take_shape(state, f"{src}.mlp.fc1.weight")[0] == 2 * take_shape(state, f"{src}.mlp.fc2.weight")[1]:
        gate, up = split_packed_fc1(take(f"{src}.mlp.fc1.weight"), state.pop(f"{src}.mlp.fc1.bias", None))
        linear(None, f"{mlp}/gate", *gate)
        linear(None, f"{mlp}/up", *up)
    else:
        linear(f"{src}.mlp.fc1", f"{mlp}/Dense_0")
    if f"{src}.mlp.norm.weight" in state:
        norm(f"{src}.mlp.norm", f"{mlp}/norm")
    linear(f"{src}.mlp.fc2", f"{mlp}/Dense_1")


def take_shape(state, key):
    return np.shape(state[key])


def from_original(params, config, kw):
    """Original-layout params -> the state dict of `kw`'s timm model (Eva or AIMv2), the inverse of `to_original`."""
    state = {}
    heads = config.num_heads

    def linear(src, dst):
        state[f"{dst}.weight"] = np.asarray(params[f"{src}/kernel"]).T
        if f"{src}/bias" in params:
            state[f"{dst}.bias"] = np.asarray(params[f"{src}/bias"])

    def norm(src, dst):
        state[f"{dst}.weight"] = params[f"{src}/scale"]
        if f"{src}/bias" in params:
            state[f"{dst}.bias"] = params[f"{src}/bias"]

    state["patch_embed.proj.weight"] = hwio_to_conv(params["embedding/kernel"])
    if "embedding/bias" in params:
        state["patch_embed.proj.bias"] = params["embedding/bias"]
    if "patch_norm/scale" in params:
        norm("patch_norm", "patch_embed.norm")
    for src, dst in (("cls", "cls_token"), ("registers", "reg_token"), (POSEMB_KEY, "pos_embed")):
        if src in params:
            state[dst] = params[src]
    if "Transformer/norm_pre/scale" in params:
        norm("Transformer/norm_pre", "norm_pre")
    for i in range(config.num_layers):
        _block_from_original(f"Transformer/encoderblock_{i}", f"blocks.{i}", params, state, linear, norm, kw, heads)
    if "Transformer/encoder_norm/scale" in params:
        norm("Transformer/encoder_norm", "norm")
    if "fc_norm/scale" in params:
        norm("fc_norm", "fc_norm")
    if "MAPHead_0/probe" in params:
        att = "MAPHead_0/MultiHeadDotProductAttention_0"
        state["attn_pool.latent"] = params["MAPHead_0/probe"]
        state["attn_pool.q.weight"], state["attn_pool.q.bias"] = _fused(params, att, ("query",))
        state["attn_pool.kv.weight"], state["attn_pool.kv.bias"] = _fused(params, att, ("key", "value"))
        kernel = np.asarray(params[f"{att}/out/kernel"])
        state["attn_pool.proj.weight"] = kernel.reshape(-1, kernel.shape[-1]).T
        state["attn_pool.proj.bias"] = params[f"{att}/out/bias"]
        norm("MAPHead_0/LayerNorm_0", "attn_pool.norm")
        linear("MAPHead_0/MlpBlock_0/Dense_0", "attn_pool.mlp.fc1")
        linear("MAPHead_0/MlpBlock_0/Dense_1", "attn_pool.mlp.fc2")
    if "head/kernel" in params:
        linear("head", "head")
    return state


def _block_from_original(src, dst, params, state, linear, norm, kw, heads):
    norm(f"{src}/LayerNorm_0", f"{dst}.norm1")
    norm(f"{src}/LayerNorm_2", f"{dst}.norm2")
    scales = ("ls1.gamma", "ls2.gamma") if kw.get("aimv2") else ("gamma_1", "gamma_2")
    for name, target in zip(scales, ("LayerScale_1", "LayerScale_3")):
        if f"{src}/{target}/scale" in params:
            state[f"{dst}.{name}"] = params[f"{src}/{target}/scale"]
    att = f"{src}/{ATT}"
    parts = ("query", "key", "value")
    kernels = [np.asarray(params[f"{att}/{p}/kernel"]) for p in parts]
    biases = {p: np.asarray(params[f"{att}/{p}/bias"]).reshape(-1) for p in parts if f"{att}/{p}/bias" in params}
    if kw["qkv_fused"]:
        state[f"{dst}.attn.qkv.weight"] = np.concatenate([k.reshape(k.shape[0], -1).T for k in kernels])
        if len(biases) == 3:
            state[f"{dst}.attn.qkv.bias"] = np.concatenate([biases[p] for p in parts])
        elif biases:
            state[f"{dst}.attn.q_bias"], state[f"{dst}.attn.v_bias"] = biases["query"], biases["value"]
    else:
        for part, name, kernel in zip(parts, ("q_proj", "k_proj", "v_proj"), kernels):
            state[f"{dst}.attn.{name}.weight"] = kernel.reshape(kernel.shape[0], -1).T
            if part in biases:
                state[f"{dst}.attn.{name}.bias"] = biases[part]
    if f"{att}/norm/scale" in params:
        norm(f"{att}/norm", f"{dst}.attn.norm")
    kernel = np.asarray(params[f"{att}/out/kernel"])
    state[f"{dst}.attn.proj.weight"] = kernel.reshape(-1, kernel.shape[-1]).T
    if f"{att}/out/bias" in params:
        state[f"{dst}.attn.proj.bias"] = params[f"{att}/out/bias"]
    mlp = f"{src}/MlpBlock_3"
    if f"{mlp}/gate/kernel" in params and packed_swiglu(kw):
        linear(f"{mlp}/gate", f"{dst}.mlp.fc1_g")
        linear(f"{mlp}/up", f"{dst}.mlp.fc1_x")
        for end in ("weight", "bias"):
            gate, up = state.pop(f"{dst}.mlp.fc1_g.{end}", None), state.pop(f"{dst}.mlp.fc1_x.{end}", None)
            if gate is not None:
                state[f"{dst}.mlp.fc1.{end}"] = np.concatenate([gate, up])
    elif f"{mlp}/gate/kernel" in params:
        linear(f"{mlp}/gate", f"{dst}.mlp.fc1_g")
        linear(f"{mlp}/up", f"{dst}.mlp.fc1_x")
    else:
        linear(f"{mlp}/Dense_0", f"{dst}.mlp.fc1")
    if f"{mlp}/norm/scale" in params:
        norm(f"{mlp}/norm", f"{dst}.mlp.norm")
    linear(f"{mlp}/Dense_1", f"{dst}.mlp.fc2")


def packed_swiglu(kw):
    """timm's Eva builds the packed `GluMlp` for SwiGLU without a sub-LN or an alignment (EVA-02 Ti/S)."""
    return bool(kw["swiglu_mlp"]) and not kw["scale_mlp"] and not kw["swiglu_align_to"] and not kw.get("aimv2")


def read(folder, cfg, state, architecture):
    """An Eva / AIMv2 timm folder's config and tensors -> (params, options) for a `Checkpoint`."""
    args = cfg.get("model_args") or {}
    kw = arch_table.kwargs_for(architecture, args)
    heads = int(kw["num_heads"])
    params = to_original(state, heads, int(kw["attn_pool_num_heads"] or heads), source=folder)
    return params, options(kw, params, state, _grid(args, cfg, params, folder), folder)


def _grid(args, cfg, params, folder):
    """The patch grid: `img_size` in model_args, else the pretrained config's input size, else timm's 224."""
    patch = int(params["embedding/kernel"].shape[0])
    sizes = [args.get("img_size"), (cfg.get("pretrained_cfg") or {}).get("input_size", [None, None])[1:], 224]
    for size in sizes:
        if size is None or (isinstance(size, list | tuple) and size[0] is None):
            continue
        h, w = np.broadcast_to(size, (2,))
        grid = (int(h) // patch, int(w) // patch)
        rows = params[POSEMB_KEY].shape[1] if POSEMB_KEY in params else None
        prefix = int("cls" in params) + (params["registers"].shape[1] if "registers" in params else 0)
        if rows is None or rows in (grid[0] * grid[1], grid[0] * grid[1] + prefix):
            return grid
    raise CheckpointError(f"{folder!r}: no image size in its config fits pos_embed; add img_size to model_args.")
