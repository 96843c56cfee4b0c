"""transformers' ViT relatives in and out: `Dinov2Model`, `Dinov2WithRegistersModel`, `CLIPVisionModel`,
`SiglipVisionModel` and `DeiTForImageClassificationWithTeacher`.

Each family's tensors are renamed to timm's names (a table per family, plus the fused q/k/v timm keeps), so
`timm_layout.py` does the rest of the conversion both ways. The outputs line up with keras-vit's layers:
Dinov2's `last_hidden_state` and SigLIP's are `encoder_norm`'s output, CLIP's is the last block's (CLIP's
`post_layernorm` is applied to the class token only, which `encoder_norm` followed by `pool` computes); each
`pooler_output` is the model's output with `num_classes=0`.
"""

import os

import numpy as np

from keras_vit.weights import timm_layout, transformers_families2
from keras_vit.weights.loading import CheckpointError

_VIT_BLOCK = {
    "layernorm_before": "norm1",
    "layernorm_after": "norm2",
    "intermediate.dense": "mlp.fc1",
    "output.dense": "mlp.fc2",
    "attention.output.dense": "attn.proj",
}
_DINO_BLOCK = {
    "norm1": "norm1",
    "norm2": "norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
    "attention.output.dense": "attn.proj",
    "layer_scale1.lambda1": "ls1.gamma",
    "layer_scale2.lambda1": "ls2.gamma",
    "mlp.fc1_g": "mlp.fc1_g",  # SwiGLU (use_swiglu_ffn=True), once `transformers_families2.unpack_swiglu` split it
    "mlp.fc1_x": "mlp.fc1_x",
}
_CLIP_BLOCK = {
    "layer_norm1": "norm1",
    "layer_norm2": "norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
    "self_attn.out_proj": "attn.proj",
}
_DINO_TOP = {
    "embeddings.cls_token": "cls_token",
    "embeddings.register_tokens": "reg_token",
    "embeddings.patch_embeddings.projection": "patch_embed.proj",
    "embeddings.position_embeddings": "pos_embed",
    "layernorm": "norm",
}
_CLIP_TOP = {
    "embeddings.class_embedding": "cls_token",
    "embeddings.patch_embedding": "patch_embed.proj",
    "embeddings.position_embedding.weight": "pos_embed",
    "pre_layrnorm": "norm_pre",
    "post_layernorm": "norm",
}
_SIGLIP_HEAD = {
    "head.probe": "attn_pool.latent",
    "head.attention.out_proj": "attn_pool.proj",
    "head.layernorm": "attn_pool.norm",
    "head.mlp.fc1": "attn_pool.mlp.fc1",
    "head.mlp.fc2": "attn_pool.mlp.fc2",
}
# model_type: (weights prefix, top-level names, block prefix, block names, q/k/v names, architecture)
FAMILIES = {
    "dinov2": ("", _DINO_TOP, "encoder.layer", _DINO_BLOCK, "attention.attention.{}", "Dinov2Model"),
    "dinov2_with_registers": (
        "", _DINO_TOP, "encoder.layer", _DINO_BLOCK, "attention.attention.{}", "Dinov2WithRegistersModel",
    ),
    "deit": (
        "deit.",
        {
            "embeddings.cls_token": "cls_token",
            "embeddings.distillation_token": "dist_token",
            "embeddings.patch_embeddings.projection": "patch_embed.proj",
            "embeddings.position_embeddings": "pos_embed",
            "layernorm": "norm",
            "cls_classifier": "head",
            "distillation_classifier": "head_dist",
        },
        "encoder.layer", _VIT_BLOCK, "attention.attention.{}", "DeiTForImageClassificationWithTeacher",
    ),
    "clip_vision_model": (
        "vision_model.", _CLIP_TOP, "encoder.layers", _CLIP_BLOCK, "self_attn.{}_proj", "CLIPVisionModel",
    ),
    "metaclip_2_vision_model": (
        "vision_model.", _CLIP_TOP, "encoder.layers", _CLIP_BLOCK, "self_attn.{}_proj", "MetaClip2VisionModel",
    ),
    "siglip_vision_model": (
        "vision_model.",
        {
            "embeddings.patch_embedding": "patch_embed.proj",
            "embeddings.position_embedding.weight": "pos_embed",
            "post_layernorm": "norm",
            **_SIGLIP_HEAD,
        },
        "encoder.layers", _CLIP_BLOCK, "self_attn.{}_proj", "SiglipVisionModel",
    ),
}  # fmt: skip
_QKV = {"attention.attention.{}": ("query", "key", "value"), "self_attn.{}_proj": ("q", "k", "v")}
# Tensors the families hold that inference never reads: Dinov2's mask token (masked-image pre-training only) and
# the position ids some older CLIP/SigLIP files keep.
_UNUSED = ("embeddings.mask_token", "embeddings.position_ids")


def _rename(state, table, src_prefix, dst_prefix, out):
    for src, dst in table.items():
        for suffix in (".weight", ".bias", ""):
            key = f"{src_prefix}{src}{suffix}"
            if key in state:
                out[f"{dst_prefix}{dst}{suffix}"] = state.pop(key)


def to_timm(state, model_type, *, source):
    """A family's state dict -> timm's names (what `timm_layout.to_original` reads); leftovers raise."""
    prefix, top, block_prefix, block, qkv, _ = FAMILIES[model_type]
    state = {k[len(prefix) :] if prefix and k.startswith(prefix) else k: np.asarray(v) for k, v in state.items()}
    for key in _UNUSED:
        state.pop(key, None)
    if model_type.startswith("dinov2"):
        state = transformers_families2.unpack_swiglu(state, block_prefix)
    out = {}
    _rename(state, top, "", "", out)
    if "cls_token" in out and out["cls_token"].ndim == 1:  # CLIP's class_embedding (D,)
        out["cls_token"] = out["cls_token"][None, None]
    if "pos_embed" in out and out["pos_embed"].ndim == 2:  # an nn.Embedding (N, D)
        out["pos_embed"] = out["pos_embed"][None]
    i = 0
    while any(k.startswith(f"{block_prefix}.{i}.") for k in state):
        src = f"{block_prefix}.{i}."
        _rename(state, block, src, f"blocks.{i}.", out)
        try:
            parts = [qkv.format(p) for p in _QKV[qkv]]
            out[f"blocks.{i}.attn.qkv.weight"] = np.concatenate([state.pop(f"{src}{p}.weight") for p in parts])
            out[f"blocks.{i}.attn.qkv.bias"] = np.concatenate([state.pop(f"{src}{p}.bias") for p in parts])
        except KeyError as err:
            raise CheckpointError(
                f"{os.fspath(source)!r} is not a {model_type} model: tensor {err} is missing."
            ) from err
        i += 1
    if "head.attention.in_proj_weight" in state:  # nn.MultiheadAttention: rows q, k, v
        weight, bias = state.pop("head.attention.in_proj_weight"), state.pop("head.attention.in_proj_bias")
        width = weight.shape[1]
        out["attn_pool.q.weight"], out["attn_pool.kv.weight"] = weight[:width], weight[width:]
        out["attn_pool.q.bias"], out["attn_pool.kv.bias"] = bias[:width], bias[width:]
    out.update(state)  # anything left is named by timm_layout's leftover error
    return out


def from_timm(state, model_type):
    """timm's names -> a family's state dict, the inverse of `to_timm` (Dinov2's unused mask token is zeros)."""
    _, top, block_prefix, block, qkv, _ = FAMILIES[model_type]
    prefix = "deit." if model_type == "deit" else ""  # the prefix each family's own save_pretrained writes
    state = dict(state)
    hidden = state["patch_embed.proj.weight"].shape[0]
    out = {}
    heads = {"head", "head_dist"}  # the classifiers sit outside the backbone's prefix
    _rename(state, {v: k for k, v in top.items() if v not in heads}, "", prefix, out)
    _rename(state, {v: k for k, v in top.items() if v in heads}, "", "", out)
    if model_type == "clip_vision_model":
        out[f"{prefix}embeddings.class_embedding"] = out[f"{prefix}embeddings.class_embedding"].reshape(-1)
    key = f"{prefix}embeddings.position_embedding.weight"
    if key in out:
        out[key] = out[key][0]
    if model_type.startswith("dinov2"):
        out[f"{prefix}embeddings.mask_token"] = np.zeros((1, hidden), np.float32)
    i = 0
    while f"blocks.{i}.norm1.weight" in state:
        dst = f"{prefix}{block_prefix}.{i}."
        _rename(state, {v: k for k, v in block.items()}, f"blocks.{i}.", dst, out)
        weight, bias = state.pop(f"blocks.{i}.attn.qkv.weight"), state.pop(f"blocks.{i}.attn.qkv.bias")
        for j, part in enumerate(qkv.format(p) for p in _QKV[qkv]):
            rows = slice(j * weight.shape[1], (j + 1) * weight.shape[1])
            out[f"{dst}{part}.weight"], out[f"{dst}{part}.bias"] = weight[rows], bias[rows]
        i += 1
    if "attn_pool.q.weight" in state:
        out[f"{prefix}head.attention.in_proj_weight"] = np.concatenate(
            [state.pop("attn_pool.q.weight"), state.pop("attn_pool.kv.weight")]
        )
        out[f"{prefix}head.attention.in_proj_bias"] = np.concatenate(
            [state.pop("attn_pool.q.bias"), state.pop("attn_pool.kv.bias")]
        )
    if state:
        raise CheckpointError(f"No {model_type} counterpart for {sorted(state)[:8]}; save the model in another format.")
    return transformers_families2.pack_swiglu(out) if model_type.startswith("dinov2") else out


def to_original(state, model_type, num_heads, *, source):
    """A family's state dict -> original-layout params (through timm's names; Dinov2's SwiGLU through timm_eva's
    reader, which knows timm's split `fc1_g` / `fc1_x`)."""
    timm_layout.refuse_unsupported(state, source, library="transformers")
    timm_state = to_timm(state, model_type, source=source)
    if any(".mlp.fc1_g." in key for key in timm_state):
        from keras_vit.weights import timm_eva

        return timm_eva.to_original(timm_state, num_heads, num_heads, source=source)
    return timm_layout.to_original(timm_state, num_heads, source=source)


def from_original(params, model_type, config):
    if config.mlp_type == "swiglu":  # Dinov2's SwiGLU: timm's VisionTransformer names (`ls1.gamma`, `qkv.bias`)
        from keras_vit.weights import timm_eva

        kw = dict(transformers_families2.TIMM_KW, aimv2=True)
        return from_timm(timm_eva.from_original(params, config, kw), model_type)
    return from_timm(timm_layout.from_original(params, config.num_heads), model_type)


# The dual-encoder repos (openai/clip-*, facebook/metaclip-2-*, google/siglip-*): their image tower, under
# `vision_config` and the `vision_model.` prefix; the text tower and the projections are left out (`pooler_output`
# is what comes back). Defaults: transformers' CLIPVisionConfig (MetaClip2VisionConfig inherits it) /
# SiglipVisionConfig, for fields a saved config leaves out.
DUAL_ENCODERS = {
    "clip": ("clip_vision_model", dict(hidden_act="quick_gelu", layer_norm_eps=1e-5, patch_size=32)),
    "metaclip_2": ("metaclip_2_vision_model", dict(hidden_act="quick_gelu", layer_norm_eps=1e-5, patch_size=32)),
    "siglip": ("siglip_vision_model", dict(hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, patch_size=16)),
}
_TOWER_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)


def vision_tower(cfg, state):
    """A CLIPModel / MetaClip2Model / SiglipModel config and state dict -> its image tower's (the families' vision
    models)."""
    model_type, defaults = DUAL_ENCODERS[cfg["model_type"]]
    vision = {**_TOWER_DEFAULTS, "image_size": 224, **defaults, **(cfg.get("vision_config") or {})}
    vision["model_type"] = model_type
    vision["architectures"] = [FAMILIES[model_type][5]]
    return vision, {k: v for k, v in state.items() if k.startswith("vision_model.")}


_EPSILON = {
    "dinov2": 1e-6, "dinov2_with_registers": 1e-6, "deit": 1e-12, "clip_vision_model": 1e-5,
    "metaclip_2_vision_model": 1e-5,
}  # fmt: skip
_DINO_HEAD = "a classifier on the class token concatenated with the mean patch token"
_REFUSED_ARCHITECTURES = {
    "Dinov2ForImageClassification": _DINO_HEAD,
    "Dinov2WithRegistersForImageClassification": _DINO_HEAD,
    "DeiTForImageClassification": "DeiT's class-token-only classifier over a distillation-token model",
    "CLIPVisionModelWithProjection": "CLIP's bias-free visual projection",
    "MetaClip2VisionModelWithProjection": "CLIP's bias-free visual projection",
}


def read_options(folder, cfg, params):
    """`ViTConfig` fields for a family folder; one line for a member keras-vit cannot build exactly."""
    from keras_vit.weights.config_inference import infer_options

    model_type = cfg["model_type"]
    for name in cfg.get("architectures") or []:
        if name in _REFUSED_ARCHITECTURES:
            raise CheckpointError(
                f"{folder!r} is a {name}: {_REFUSED_ARCHITECTURES[name]}, which keras-vit does not build; load the "
                f"backbone ({FAMILIES[model_type][5]}) instead."
            )
    size = cfg.get("image_size", 224)
    size = (size, size) if isinstance(size, int) else tuple(size)
    patch = int(cfg.get("patch_size", 16))
    gate = params.get("Transformer/encoderblock_0/MlpBlock_3/gate/kernel")
    if bool(cfg.get("use_swiglu_ffn")) != (gate is not None):
        raise CheckpointError(
            f"{folder!r}: its config says use_swiglu_ffn={bool(cfg.get('use_swiglu_ffn'))} but its MLP tensors are "
            f"{'a SwiGLU' if gate is not None else 'a GELU'} MLP's; fix the config or the weights."
        )
    if gate is not None:  # SiLU whatever hidden_act says; infer_options reads the width from Dense_0's place
        params = {**params, "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel": gate}
    options = infer_options(params, source=folder, grid=(size[0] // patch, size[1] // patch))
    if gate is not None:
        options["mlp_type"] = "swiglu"
    if model_type == "siglip_vision_model" and "MAPHead_0/probe" not in params:
        options["pooling"] = "gap"  # vision_use_head=False: no pooled output of its own
    options["layer_norm_epsilon"] = float(cfg.get("layer_norm_eps", _EPSILON.get(model_type, 1e-6)))
    return options


def model_type_for(config):
    """The family a model is saved as, or None for a plain ViT (`transformers.py` writes those)."""
    if config.distillation_token:
        return "deit"
    if config.pooling == "map":
        return "siglip_vision_model"
    if config.pre_norm:
        return "clip_vision_model"
    if config.layer_scale is not None:
        return "dinov2_with_registers" if config.num_registers else "dinov2"
    if config.num_registers or config.no_embed_class or config.fc_norm or not config.patch_bias:
        raise CheckpointError(
            "transformers has no ViT with this combination of options (registers without LayerScale, "
            "no_embed_class, fc_norm or a bias-free patch embedding outside CLIP); save it as 'timm' or 'npz'."
        )
    return None


def check_writable(model_type, config):
    """One line for a model whose family in transformers lacks one of its parts."""
    expected = {
        "deit": dict(class_token=True, pooling="token", pre_norm=False, layer_scale=None, num_registers=0),
        "siglip_vision_model": dict(class_token=False, pre_norm=False, layer_scale=None, num_registers=0),
        "clip_vision_model": dict(class_token=True, pooling="token", patch_bias=False, layer_scale=None),
        "dinov2": dict(class_token=True, pooling="token", no_embed_class=False, pre_norm=False),
        "dinov2_with_registers": dict(class_token=True, pooling="token", no_embed_class=False, pre_norm=False),
    }[model_type]
    wrong = {k: getattr(config, k) for k, v in expected.items() if getattr(config, k) != v}
    wrong.update(transformers_families2.newer_options(config, ("mlp_type",) if model_type.startswith("dinov2") else ()))
    if config.gelu not in _GELU_NAMES:
        wrong["gelu"] = config.gelu
    if wrong or config.fc_norm or (model_type != "deit") == bool(config.num_classes):
        head = "with a head" if config.num_classes else "without a head"
        raise CheckpointError(
            f"transformers' {FAMILIES[model_type][5]} has no counterpart for this model ({head}, "
            f"{', '.join(f'{k}={v!r}' for k, v in wrong.items()) or 'fc_norm=True'}); save it as 'timm' or 'npz'."
        )


PROCESSORS = {
    "dinov2": "BitImageProcessor",
    "dinov2_with_registers": "BitImageProcessor",
    "deit": "DeiTImageProcessor",
    "clip_vision_model": "CLIPImageProcessor",
    "siglip_vision_model": "SiglipImageProcessor",
}
_GELU_NAMES = {"exact": "gelu", "tanh": "gelu_pytorch_tanh", "quick": "quick_gelu"}


def hf_config(model_type, config, class_names):
    """The family's `config.json` for `config` (a `ViTConfig`)."""
    height, width = config.image_size
    cfg = dict(
        architectures=[FAMILIES[model_type][5]],
        model_type=model_type,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        hidden_act=_GELU_NAMES[config.gelu],
        layer_norm_eps=config.layer_norm_epsilon,
        image_size=height if height == width else [height, width],
        patch_size=config.patch_size,
        num_channels=config.channels,
        dtype="float32",
    )
    if model_type.startswith("dinov2"):
        cfg.update(mlp_ratio=config.mlp_dim / config.hidden_size, layerscale_value=1.0, qkv_bias=True)
        swiglu = getattr(config, "mlp_type", "gelu") == "swiglu"
        if swiglu:
            cfg["mlp_ratio"] = transformers_families2.swiglu_mlp_ratio(config.hidden_size, config.mlp_dim)
        cfg.update(
            use_swiglu_ffn=swiglu,
            drop_path_rate=0.0,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        if config.num_registers:
            cfg["num_register_tokens"] = config.num_registers
    else:
        cfg["intermediate_size"] = config.mlp_dim
    if model_type == "siglip_vision_model":
        cfg["vision_use_head"] = config.pooling == "map"
    if model_type == "deit":
        names = list(class_names) if class_names else [f"LABEL_{i}" for i in range(config.num_classes)]
        cfg.update(qkv_bias=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        cfg["id2label"] = {str(i): name for i, name in enumerate(names)}
        cfg["label2id"] = {name: i for i, name in enumerate(names)}
    return cfg
