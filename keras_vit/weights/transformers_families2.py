"""transformers' second-generation ViTs in and out: `DINOv3ViTModel` (GELU or gated MLP), `Aimv2VisionModel` and
Dinov2's SwiGLU MLP (`use_swiglu_ffn=True`, the dinov2-giant and Web-SSL layout).

As in `transformers_families.py`, each family's tensors are renamed to timm's names (DINOv3: timm's `Eva` ones, as
`vit_*_patch16_dinov3_qkvb` saves them; AIMv2: timm's `aimv2_*`), so `timm_layout.py` does the rest both ways.
"""

import os

import numpy as np

from keras_vit.weights.loading import CheckpointError

FAMILIES2 = {"dinov3_vit": "DINOv3ViTModel", "aimv2_vision_model": "Aimv2VisionModel"}
PROCESSORS2 = {"dinov3_vit": "DINOv3ViTImageProcessor", "aimv2_vision_model": "CLIPImageProcessor"}

_DINOV3_TOP = {
    "embeddings.cls_token": "cls_token",
    "embeddings.register_tokens": "reg_token",
    "embeddings.patch_embeddings": "patch_embed.proj",
    "norm": "norm",
}
_DINOV3_BLOCK = {
    "norm1": "norm1",
    "norm2": "norm2",
    "attention.o_proj": "attn.proj",
    "layer_scale1.lambda1": "gamma_1",
    "layer_scale2.lambda1": "gamma_2",
    "mlp.gate_proj": "mlp.fc1_g",
    "mlp.down_proj": "mlp.fc2",
}
_AIMV2_TOP = {
    "embeddings.patch_embed": "patch_embed.proj",
    "embeddings.rms_norm": "patch_embed.norm",
    "embeddings.position_embedding.weight": "pos_embed",
    "rms_norm": "norm",
    "head.cls_token": "attn_pool.latent",
    "head.output_proj": "attn_pool.proj",
}
_AIMV2_BLOCK = {
    "rms_norm1": "norm1",
    "rms_norm2": "norm2",
    "attention.out_proj": "attn.proj",
    "ffn.gate_proj": "mlp.fc1_g",
    "ffn.up_proj": "mlp.fc1_x",
    "ffn.down_proj": "mlp.fc2",
}
# (top-level names, block prefix, block names, q/k/v names)
_LAYOUTS = {
    "dinov3_vit": (_DINOV3_TOP, "layer", _DINOV3_BLOCK, "attention.{}_proj"),
    "aimv2_vision_model": (_AIMV2_TOP, "encoder.layers", _AIMV2_BLOCK, "attention.{}_proj"),
}
# Tensors inference never reads: DINOv3's mask token (masked-image pre-training only).
_UNUSED = ("embeddings.mask_token",)


def _rename(state, table, src_prefix, dst_prefix, out):
    for src, dst in table.items():
        for suffix in (".weight", ".bias", ""):
            if f"{src_prefix}{src}{suffix}" in state:
                out[f"{dst_prefix}{dst}{suffix}"] = state.pop(f"{src_prefix}{src}{suffix}")


def to_timm(state, model_type, *, source):
    """A DINOv3 / AIMv2 state dict -> timm's names; leftovers are passed on for timm_layout's error."""
    top, block_prefix, block, qkv = _LAYOUTS[model_type]
    state = {k: np.asarray(v) for k, v in state.items() if k not in _UNUSED}
    out = {}
    _rename(state, top, "", "", out)
    if "pos_embed" in out and out["pos_embed"].ndim == 2:  # an nn.Embedding (N, D)
        out["pos_embed"] = out["pos_embed"][None]
    i = 0
    while any(k.startswith(f"{block_prefix}.{i}.") for k in state):
        src, dst = f"{block_prefix}.{i}.", f"blocks.{i}."
        gated = f"{src}mlp.gate_proj.weight" in state
        _rename(state, {**block, "mlp.up_proj": "mlp.fc1_x" if gated else "mlp.fc1"}, src, dst, out)
        try:
            out[f"{dst}attn.qkv.weight"] = np.concatenate([state.pop(f"{src}{qkv.format(p)}.weight") for p in "qkv"])
        except KeyError as err:
            missing = f"{os.fspath(source)!r} is not a {model_type} model: tensor {err} is missing."
            raise CheckpointError(missing) from err
        _qkv_bias(state, src, dst, qkv, out, source)
        i += 1
    if "head.k_proj.weight" in state:
        _aimv2_head_to_timm(state, out)
    out.update(state)  # anything left is named by timm_layout's leftover error
    return out


def _qkv_bias(state, src, dst, qkv, out, source):
    """timm's Eva keeps q and v biases (`attn.q_bias`, `attn.v_bias`) and no key bias: a key bias of zeros is
    dropped, any other refused."""
    biases = {p: state.pop(f"{src}{qkv.format(p)}.bias", None) for p in "qkv"}
    if biases["k"] is not None and np.any(biases["k"]):
        raise CheckpointError(
            f"{os.fspath(source)!r} has a learned key bias ({src}{qkv.format('k')}.bias); keras-vit reads DINOv3 "
            f"without one (key_bias=False, as the released checkpoints)."
        )
    if (biases["q"] is None) != (biases["v"] is None):
        raise CheckpointError(f"{os.fspath(source)!r}: a query bias without a value bias (or the reverse) in {src}.")
    if biases["q"] is not None:
        out[f"{dst}attn.q_bias"], out[f"{dst}attn.v_bias"] = biases["q"], biases["v"]


def _aimv2_head_to_timm(state, out):
    """AIMv2's pooling head (the latent query itself, bias-free k/v, `output_proj`) as timm's `attn_pool`: a query
    projection that is the identity, a key/value bias of zeros and an MLP of width 1 whose weights are zeros, so
    the MAP head computes it exactly (y + 0)."""
    k, v = state.pop("head.k_proj.weight"), state.pop("head.v_proj.weight")
    width = k.shape[1]
    zeros = np.zeros
    out["attn_pool.q.weight"], out["attn_pool.q.bias"] = np.eye(width, dtype=k.dtype), zeros(width, k.dtype)
    out["attn_pool.kv.weight"] = np.concatenate([k, v])
    out["attn_pool.kv.bias"] = np.concatenate(
        [state.pop("head.k_proj.bias", zeros(width, k.dtype)), state.pop("head.v_proj.bias", zeros(width, k.dtype))]
    )
    out["attn_pool.norm.weight"], out["attn_pool.norm.bias"] = np.ones(width, k.dtype), zeros(width, k.dtype)
    out["attn_pool.mlp.fc1.weight"], out["attn_pool.mlp.fc1.bias"] = zeros((1, width), k.dtype), zeros(1, k.dtype)
    out["attn_pool.mlp.fc2.weight"], out["attn_pool.mlp.fc2.bias"] = zeros((width, 1), k.dtype), zeros(width, k.dtype)


def from_timm(state, model_type):
    """timm's names -> a DINOv3 / AIMv2 state dict, the inverse of `to_timm` (DINOv3's unused mask token: zeros)."""
    top, block_prefix, block, qkv = _LAYOUTS[model_type]
    state = dict(state)
    out = {}
    if model_type == "aimv2_vision_model":
        _aimv2_head_from_timm(state, out)
    _rename(state, {v: k for k, v in top.items()}, "", "", out)
    if "embeddings.position_embedding.weight" in out:
        out["embeddings.position_embedding.weight"] = out["embeddings.position_embedding.weight"][0]
    if model_type == "dinov3_vit":
        width = out["embeddings.patch_embeddings.weight"].shape[0]
        out["embeddings.mask_token"] = np.zeros((1, 1, width), np.float32)
    i = 0
    while f"blocks.{i}.norm1.weight" in state:
        src, dst = f"blocks.{i}.", f"{block_prefix}.{i}."
        gated = f"{src}mlp.fc1_g.weight" in state
        _rename(state, {v: k for k, v in block.items()}, src, dst, out)
        _rename(state, {"mlp.fc1_x" if gated else "mlp.fc1": "mlp.up_proj"}, src, dst, out)
        weight = state.pop(f"{src}attn.qkv.weight")
        width = weight.shape[1]
        for j, part in enumerate("qkv"):
            out[f"{dst}{qkv.format(part)}.weight"] = weight[j * width : (j + 1) * width]
        for part in "qv":
            if f"{src}attn.{part}_bias" in state:
                out[f"{dst}{qkv.format(part)}.bias"] = state.pop(f"{src}attn.{part}_bias")
        i += 1
    if state:
        raise CheckpointError(f"No {model_type} counterpart for {sorted(state)[:8]}; save the model in another format.")
    return out


def _aimv2_head_from_timm(state, out):
    """The inverse of `_aimv2_head_to_timm`, for a head that is still AIMv2's (identity query projection, no
    key/value bias, an MLP that adds nothing); a head fine-tuning has made more than that is refused."""
    if "attn_pool.latent" not in state:
        return
    q, kv, kv_bias = (state.pop(f"attn_pool.{k}") for k in ("q.weight", "kv.weight", "kv.bias"))
    added = [state.pop(f"attn_pool.{k}") for k in ("q.bias", "mlp.fc2.weight", "mlp.fc2.bias")]
    if not np.array_equal(q, np.eye(q.shape[0], dtype=q.dtype)) or any(np.any(a) for a in added):
        raise CheckpointError(
            "this model's attention pool is no longer AIMv2's (its query projection is not the identity, or its "
            "query bias or MLP are not zero after training); save it as 'npz' or in keras-vit's own format."
        )
    for key in ("norm.weight", "norm.bias", "mlp.fc1.weight", "mlp.fc1.bias"):
        state.pop(f"attn_pool.{key}")
    width = q.shape[0]
    out["head.k_proj.weight"], out["head.v_proj.weight"] = kv[:width], kv[width:]
    if np.any(kv_bias):  # qkv_bias=True: the head's k/v projections have biases too
        out["head.k_proj.bias"], out["head.v_proj.bias"] = kv_bias[:width], kv_bias[width:]


def unpack_swiglu(state, block_prefix):
    """Dinov2's SwiGLU MLP under timm's split names: `mlp.weights_in` [2M, D] (the gate's rows first, then the
    up projection's) or transformers' own `mlp.gate_proj` / `up_proj`, and `weights_out` / `down_proj` as `fc2`."""
    out = {}
    for key, value in state.items():
        if not key.startswith(f"{block_prefix}."):
            out[key] = value
            continue
        stem, _, suffix = key.rpartition(".")
        if stem.endswith(".mlp.weights_in"):
            gate, up = np.split(np.asarray(value), 2)
            out[f"{stem[: -len('weights_in')]}fc1_g.{suffix}"], out[f"{stem[: -len('weights_in')]}fc1_x.{suffix}"] = (
                gate,
                up,
            )
            continue
        for src, dst in (("weights_out", "fc2"), ("gate_proj", "fc1_g"), ("up_proj", "fc1_x"), ("down_proj", "fc2")):
            if stem.endswith(f".mlp.{src}"):
                key = f"{stem[: -len(src)]}{dst}.{suffix}"
        out[key] = value
    return out


def pack_swiglu(state):
    """The inverse of `unpack_swiglu` as transformers' save_pretrained writes it: `weights_in` / `weights_out`."""
    out = {}
    for key, value in state.items():
        stem, _, suffix = key.rpartition(".")
        if stem.endswith(".mlp.fc1_g"):
            base = stem[: -len("fc1_g")]
            out[f"{base}weights_in.{suffix}"] = np.concatenate([value, state[f"{base}fc1_x.{suffix}"]])
        elif stem.endswith(".mlp.fc1_x"):
            continue
        elif stem.endswith(".mlp.fc2") and f"{stem[: -len('fc2')]}fc1_g.{suffix}" in state:
            out[f"{stem[: -len('fc2')]}weights_out.{suffix}"] = value
        else:
            out[key] = value
    return out


def swiglu_mlp_ratio(hidden_size, mlp_dim):
    """An `mlp_ratio` from which Dinov2's SwiGLU derives `mlp_dim` ((int(int(D r) * 2 / 3) + 7) // 8 * 8); None if
    none does (a width that is not a multiple of 8)."""
    natural = (3 * mlp_dim) // 2  # dinov2-giant: 1536 * 4 = 6144 = 1.5 * 4096
    for wide in sorted(range(natural - 16, natural + 16), key=lambda w: abs(w - natural)):
        ratio = wide / hidden_size
        if wide > 0 and (int(int(hidden_size * ratio) * 2 / 3) + 7) // 8 * 8 == mlp_dim:
            return ratio
    return None


# The second generation's `ViTConfig` fields and their first-generation values: a model with any other value has
# no counterpart among the first round's transformers families.
_FIRST_GENERATION = dict(
    rope=None, mlp_type="gelu", mlp_norm=False, attention_norm=False, qkv_bias="qkv", proj_bias=True, mlp_bias=True,
    norm="layer", patch_norm=False, encoder_norm=True, map_heads=None, map_mlp_dim=None, position_embedding="learned",
)  # fmt: skip


def newer_options(config, allowed=()):
    """{field: value} for the second-generation options `config` sets, except `allowed`."""
    return {
        k: getattr(config, k, v)
        for k, v in _FIRST_GENERATION.items()
        if k not in allowed and getattr(config, k, v) != v
    }


def to_original(state, model_type, num_heads, *, source):
    """A DINOv3 / AIMv2 state dict -> original-layout params (through timm's names; AIMv2's pooling head has the
    encoder's head count)."""
    from keras_vit.weights import timm_eva

    return timm_eva.to_original(to_timm(state, model_type, source=source), num_heads, num_heads, source=source)


# What `timm_eva.from_original` needs to know of the timm model whose names these families borrow: fused q/k/v,
# split SwiGLU (`fc1_g` / `fc1_x`), and LayerScale named as timm's Eva (`gamma_1`) or VisionTransformer (`ls1.gamma`).
TIMM_KW = dict(qkv_fused=True, swiglu_mlp=False, scale_mlp=False, swiglu_align_to=0, aimv2=False)


def from_original(params, model_type, config):
    from keras_vit.weights import timm_eva

    kw = dict(TIMM_KW, aimv2=model_type == "aimv2_vision_model")
    return from_timm(timm_eva.from_original(params, config, kw), model_type)


_GELU = {
    "gelu": "exact",
    "gelu_python": "exact",
    "gelu_pytorch_tanh": "tanh",
    "gelu_new": "tanh",
    "quick_gelu": "quick",
}


def read_options(folder, cfg, params):
    """`ViTConfig` fields for a DINOv3 / AIMv2 folder's config; one line for a member keras-vit cannot build."""
    model_type = cfg["model_type"]
    expected = FAMILIES2[model_type]
    for name in cfg.get("architectures") or [expected]:
        if name != expected:
            raise CheckpointError(f"{folder!r} is a {name}; keras-vit reads the {expected} layout of this family.")
    size = cfg.get("image_size", 224)
    size = (size, size) if isinstance(size, int) else tuple(size)
    gated = model_type == "aimv2_vision_model" or bool(cfg.get("use_gated_mlp"))
    act = cfg.get("hidden_act", "silu" if gated else "gelu")
    if (gated and act != "silu") or (not gated and act not in _GELU):
        kind = "gated MLP (SwiGLU: silu)" if gated else "MLP (GELU)"
        raise CheckpointError(
            f"{folder!r}: hidden_act={act!r} in a {kind}; keras-vit builds no other activation there."
        )
    options = dict(
        image_size=size, patch_size=int(cfg.get("patch_size", 16)), channels=int(cfg.get("num_channels", 3)),
        hidden_size=int(cfg["hidden_size"]), num_layers=int(cfg["num_hidden_layers"]),
        num_heads=int(cfg["num_attention_heads"]), mlp_dim=int(cfg["intermediate_size"]), num_classes=0,
        representation_size=None, mlp_type="swiglu" if gated else "gelu", gelu=_GELU.get(act, "exact"),
    )  # fmt: skip
    if model_type == "dinov3_vit":
        options.update(_dinov3_options(folder, cfg, params))
    else:
        options.update(_aimv2_options(folder, cfg, params, options))
    return options


def _dinov3_options(folder, cfg, params):
    if not cfg.get("mlp_bias", True) and not cfg.get("use_gated_mlp"):
        raise CheckpointError(f"{folder!r}: mlp_bias=False in a GELU MLP; keras-vit's GELU MLP has biases.")
    biases = "qv" if cfg.get("query_bias", True) else "none"
    if cfg.get("query_bias", True) != cfg.get("value_bias", True):
        raise CheckpointError(f"{folder!r}: query_bias and value_bias differ; keras-vit has both or neither.")
    theta = float(cfg.get("rope_theta", 100.0))
    return dict(
        class_token=True, pooling="token", num_registers=int(cfg.get("num_register_tokens", 0)),
        position_embedding="none", rope="dinov3", rope_base=None if theta == 100.0 else theta,
        layer_scale=float(cfg.get("layerscale_value", 1.0)), layer_norm_epsilon=float(cfg.get("layer_norm_eps", 1e-5)),
        qkv_bias=biases, proj_bias=bool(cfg.get("proj_bias", True)), mlp_bias=bool(cfg.get("mlp_bias", True)),
    )  # fmt: skip


def _aimv2_options(folder, cfg, params, options):
    if cfg.get("is_native"):
        raise CheckpointError(
            f"{folder!r} is a native-resolution AIMv2 (is_native=True: a sin-cos table of its own form); keras-vit "
            f"reads the fixed-size AIMv2 models (learned position table)."
        )
    bias = bool(cfg.get("qkv_bias", False))
    head = "MAPHead_0/probe" in params
    return dict(
        class_token=False, pooling="map" if head else "gap", map_mlp_dim=1 if head else None, norm="rms",
        patch_norm=True, layer_norm_epsilon=float(cfg.get("rms_norm_eps", 1e-5)), qkv_bias="qkv" if bias else "none",
        proj_bias=bias, mlp_bias=bool(cfg.get("mlp_bias", False)),
    )  # fmt: skip


def model_type_for(config):
    """The family of this module a model is saved as, or None."""
    if getattr(config, "rope", None) == "dinov3":
        return "dinov3_vit"
    if getattr(config, "norm", "layer") == "rms" and getattr(config, "patch_norm", False):
        return "aimv2_vision_model"
    return None


def check_writable(model_type, config):
    """One line for a model this family's transformers class cannot hold exactly."""
    if model_type == "dinov3_vit":
        expected = dict(
            class_token=True, pooling="token", num_classes=0, position_embedding="none", pre_norm=False,
            fc_norm=False, encoder_norm=True, norm="layer", patch_norm=False, mlp_norm=False, attention_norm=False,
            rope_offset=None, rope_ref_grid=None, patch_bias=True, distillation_token=False, representation_size=None,
        )  # fmt: skip
        wrong = {k: getattr(config, k) for k, v in expected.items() if getattr(config, k) != v}
        if config.layer_scale is None or config.qkv_bias == "qkv":
            wrong.update(layer_scale=config.layer_scale, qkv_bias=config.qkv_bias)
    else:
        expected = dict(
            class_token=False, num_classes=0, position_embedding="learned", pre_norm=False, fc_norm=False, rope=None,
            layer_scale=None, num_registers=0, mlp_type="swiglu", mlp_norm=False, attention_norm=False,
            encoder_norm=True, map_heads=None, representation_size=None, distillation_token=False, patch_bias=True,
        )  # fmt: skip
        wrong = {k: getattr(config, k) for k, v in expected.items() if getattr(config, k) != v}
        if config.pooling not in ("map", "gap") or config.qkv_bias not in ("qkv", "none"):
            wrong.update(pooling=config.pooling, qkv_bias=config.qkv_bias)
        if config.proj_bias != (config.qkv_bias == "qkv"):
            wrong["proj_bias"] = config.proj_bias
    if wrong:
        raise CheckpointError(
            f"transformers' {FAMILIES2[model_type]} has no counterpart for this model "
            f"({', '.join(f'{k}={v!r}' for k, v in wrong.items())}); save it as 'timm' or 'npz'."
        )


def hf_config(model_type, config):
    """The family's `config.json` for `config` (a `ViTConfig`)."""
    height, width = config.image_size
    if height != width:
        raise CheckpointError(
            f"transformers' {FAMILIES2[model_type]} states one square image_size; this model's is {config.image_size}. "
            f"Save it at a square size (image_size={height}) or as 'timm'."
        )
    cfg = dict(
        architectures=[FAMILIES2[model_type]], model_type=model_type, hidden_size=config.hidden_size,
        intermediate_size=config.mlp_dim, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, image_size=height, patch_size=config.patch_size,
        num_channels=config.channels, attention_dropout=0.0, initializer_range=0.02, dtype="float32",
        mlp_bias=config.mlp_bias,
    )  # fmt: skip
    gelu = {"exact": "gelu", "tanh": "gelu_pytorch_tanh", "quick": "quick_gelu"}[config.gelu]
    if model_type == "dinov3_vit":
        biased = config.qkv_bias == "qv"
        cfg.update(
            hidden_act="silu" if config.mlp_type == "swiglu" else gelu, use_gated_mlp=config.mlp_type == "swiglu",
            layer_norm_eps=config.layer_norm_epsilon, layerscale_value=config.layer_scale, drop_path_rate=0.0,
            num_register_tokens=config.num_registers, rope_theta=config.rope_base or 100.0, query_bias=biased,
            key_bias=False, value_bias=biased, proj_bias=config.proj_bias, pos_embed_rescale=2.0,
            pos_embed_shift=None, pos_embed_jitter=None,
        )  # fmt: skip
    else:
        cfg.update(
            hidden_act="silu", rms_norm_eps=config.layer_norm_epsilon, qkv_bias=config.qkv_bias == "qkv",
            use_head=config.pooling == "map", is_native=False,
        )  # fmt: skip
    return cfg
