"""What timm's architecture functions set that a Hub folder's `model_args` do not say, for the architectures
keras-vit builds beyond the first generation; the names of those it does not build, refused by name.

Hub folders hold `config.json` with the architecture name and no `model_args` for what the function itself sets
(RoPE type, LayerScale, SwiGLU, sub-LN, pool heads, LayerNorm epsilon, activation). These are the functions' own
arguments (timm 1.0 `models/eva.py`, `models/vision_transformer.py`); `model_args` override them, as in
`timm.create_model(architecture, **model_args)`.
"""

import re

from keras_vit.weights.errors import CheckpointError

# Eva class defaults that matter here (timm `Eva.__init__`).
EVA_DEFAULTS = dict(
    num_heads=12, qkv_bias=True, qkv_fused=True, mlp_ratio=4.0, swiglu_mlp=False, swiglu_align_to=0,
    scale_mlp=False, scale_attn_inner=False, attn_type="eva", init_values=None, class_token=True, num_reg_tokens=0,
    no_embed_class=False, use_abs_pos_emb=True, use_rot_pos_emb=False, rope_type="cat", rope_grid_offset=0.0,
    rope_grid_indexing="ij", rope_temperature=10000.0, rope_rotate_half=False, use_post_norm=False,
    use_pre_transformer_norm=False, use_post_transformer_norm=None, use_fc_norm=None, attn_pool_num_heads=None,
    attn_pool_mlp_ratio=None, ref_feat_shape=None, global_pool="avg", norm_eps=1e-6, dynamic_img_size=False,
)  # fmt: skip

_DINOV3 = dict(
    patch_size=16, dynamic_img_size=True, qkv_bias=False, init_values=1e-5, rope_type="dinov3", rope_temperature=100,
    rope_rotate_half=True, use_rot_pos_emb=True, use_abs_pos_emb=False, num_reg_tokens=4, use_fc_norm=False,
    norm_eps=1e-5,
)  # fmt: skip
_DINOV3_SIZES = {  # name: (embed_dim, depth, heads, extra)
    "tiny": (192, 12, 3, {}),
    "small": (384, 12, 6, {}),
    "small_plus": (384, 12, 6, dict(swiglu_mlp=True, swiglu_align_to=8)),
    "base": (768, 12, 12, {}),
    "large": (1024, 24, 16, {}),
    "huge_plus": (1280, 32, 20, dict(swiglu_mlp=True, swiglu_align_to=8)),
    "7b": (4096, 40, 32, dict(mlp_ratio=2, swiglu_mlp=True, swiglu_align_to=64)),
}
_EVA02 = dict(mlp_ratio=4 * 2 / 3, swiglu_mlp=True, use_rot_pos_emb=True, ref_feat_shape=(16, 16))
_EVA02_SPLIT = dict(_EVA02, qkv_fused=False, scale_mlp=True)
_PE = dict(
    attn_type="rope", use_pre_transformer_norm=True, use_rot_pos_emb=True, rope_grid_offset=1.0,
    rope_grid_indexing="xy", norm_eps=1e-5, mlp_ratio=4.0,
)  # fmt: skip
_PE_CORE = dict(_PE, global_pool="map", attn_pool_num_heads=8, attn_pool_mlp_ratio=4.0)
_PE_SPATIAL = dict(_PE, use_post_transformer_norm=False, use_fc_norm=False)
_PE_BIG = dict(class_token=False, rope_grid_offset=0.0, ref_feat_shape=(32, 32))


def _eva_table():
    table = {}
    for size, (dim, depth, heads, extra) in _DINOV3_SIZES.items():
        for suffix, qkv_bias in (("", False), ("_qkvb", True)):
            if (size == "tiny" and not suffix) or (size == "7b" and suffix):
                continue  # timm registers tiny with q/v biases only, 7B without
            kwargs = dict(_DINOV3, embed_dim=dim, depth=depth, num_heads=heads, qkv_bias=qkv_bias, **extra)
            table[f"vit_{size}_patch16_dinov3{suffix}"] = kwargs
    for size, (dim, depth, heads) in {"tiny": (192, 12, 3), "small": (384, 12, 6)}.items():
        for res in (224, 336):
            table[f"eva02_{size}_patch14_{res}"] = dict(_EVA02, embed_dim=dim, depth=depth, num_heads=heads)
    for size, (dim, depth, heads) in {"base": (768, 12, 12), "large": (1024, 24, 16)}.items():
        for res in (224, 448):
            table[f"eva02_{size}_patch14_{res}"] = dict(_EVA02_SPLIT, embed_dim=dim, depth=depth, num_heads=heads)
    clip = dict(_EVA02_SPLIT, scale_attn_inner=True, global_pool="token")
    table["eva02_base_patch16_clip_224"] = dict(clip, embed_dim=768, depth=12, num_heads=12, patch_size=16)
    for res in (224, 336):
        table[f"eva02_large_patch14_clip_{res}"] = dict(clip, embed_dim=1024, depth=24, num_heads=16)
    core = {
        "tiny_patch16_384": (192, 12, 3, (24, 24)), "small_patch16_384": (384, 12, 6, (24, 24)),
        "base_patch16_224": (768, 12, 12, (14, 14)), "large_patch14_336": (1024, 24, 16, (24, 24)),
    }  # fmt: skip
    for name, (dim, depth, heads, ref) in core.items():
        table[f"vit_pe_core_{name}"] = dict(_PE_CORE, embed_dim=dim, depth=depth, num_heads=heads, ref_feat_shape=ref)
    big = dict(embed_dim=1536, depth=50, num_heads=16, mlp_ratio=8960 / 1536)
    table["vit_pe_core_gigantic_patch14_448"] = dict(_PE_CORE, **_PE_BIG, **big)
    spatial = {
        "tiny_patch16_512": (192, 12, 3), "small_patch16_512": (384, 12, 6), "base_patch16_512": (768, 12, 12),
        "large_patch14_448": (1024, 24, 16),
    }  # fmt: skip
    for name, (dim, depth, heads) in spatial.items():
        table[f"vit_pe_spatial_{name}"] = dict(
            _PE_SPATIAL, embed_dim=dim, depth=depth, num_heads=heads, ref_feat_shape=(32, 32)
        )
    table["vit_pe_spatial_gigantic_patch14_448"] = dict(_PE_SPATIAL, **_PE_BIG, **big, init_values=0.1)
    return table


EVA = _eva_table()

# timm VisionTransformer architectures whose function sets AIMv2's layout (RMSNorm, SwiGLU, no biases).
AIMV2 = {
    f"aimv2_{size}_patch14_{res}": dict(num_heads=heads, mlp_ratio=2.75, norm_eps=1e-5, class_token=False,
                                        global_pool="avg")
    for size, heads in (("large", 8), ("huge", 12), ("1b", 16), ("3b", 24))
    for res in (224, 336, 448)
}  # fmt: skip

# SigLIP (2) VisionTransformer architectures: (heads, act_layer) as their functions set them.
_TANH = "gelu_tanh"
SIGLIP = {
    "vit_base_patch32_siglip_256": (12, _TANH), "vit_base_patch16_siglip_224": (12, None),
    "vit_base_patch16_siglip_256": (12, None), "vit_base_patch16_siglip_384": (12, None),
    "vit_base_patch16_siglip_512": (12, None), "vit_large_patch16_siglip_256": (16, None),
    "vit_large_patch16_siglip_384": (16, None), "vit_large_patch16_siglip_512": (16, _TANH),
    "vit_so400m_patch14_siglip_224": (16, None), "vit_so400m_patch14_siglip_378": (16, None),
    "vit_so400m_patch14_siglip_384": (16, None), "vit_so400m_patch16_siglip_256": (16, _TANH),
    "vit_so400m_patch16_siglip_384": (16, _TANH), "vit_so400m_patch16_siglip_512": (16, _TANH),
    "vit_giantopt_patch16_siglip_256": (16, _TANH), "vit_giantopt_patch16_siglip_384": (16, _TANH),
    "vit_base_patch32_siglip_gap_256": (12, _TANH), "vit_base_patch16_siglip_gap_224": (12, None),
    "vit_base_patch16_siglip_gap_256": (12, None), "vit_base_patch16_siglip_gap_384": (12, None),
    "vit_base_patch16_siglip_gap_512": (12, None), "vit_large_patch16_siglip_gap_256": (16, None),
    "vit_large_patch16_siglip_gap_384": (16, None), "vit_large_patch16_siglip_gap_512": (16, _TANH),
    "vit_so400m_patch14_siglip_gap_224": (16, None), "vit_so400m_patch14_siglip_gap_378": (16, None),
    "vit_so400m_patch14_siglip_gap_384": (16, None), "vit_so400m_patch14_siglip_gap_448": (16, None),
    "vit_so400m_patch14_siglip_gap_896": (16, None), "vit_so400m_patch16_siglip_gap_256": (16, _TANH),
    "vit_so400m_patch16_siglip_gap_384": (16, _TANH), "vit_so400m_patch16_siglip_gap_512": (16, _TANH),
    "vit_giantopt_patch16_siglip_gap_256": (16, _TANH), "vit_giantopt_patch16_siglip_gap_384": (16, _TANH),
    "vit_base_patch16_gap_224": (16, None),
}  # fmt: skip

# Names of timm models keras-vit does not build exactly, whose tensors could pass for a plain ViT's.
_REFUSED = (
    (r"^eva02_enormous|^eva_", "EVA-01 / EVA-02-E (post-norm blocks)"),
    (r"^vit_pe_lang_", "Perception Encoder Lang (no final norm, LayerScale 0.1 and a language-aligned tower)"),
    (r"^vit_pe_|^eva02_|dinov3", "a size or variant outside keras-vit's table"),
    (r"_rope_|_rope$|^vit_.*_rope", "rotary embeddings of timm's RoPE-ViT models (naver, sbb)"),
    (r"^naflexvit", "NaFlex (variable-resolution patches)"),
    (r"^aimv2", "an AIMv2 size outside keras-vit's table"),
)


def family(architecture):
    """ "eva", "aimv2", "siglip" or None (a first-generation name, read as before); raises `ValueError` with one
    line for an architecture keras-vit does not build."""
    if architecture in EVA:
        return "eva"
    if architecture in AIMV2:
        return "aimv2"
    if architecture in SIGLIP:
        return "siglip"
    for pattern, what in _REFUSED:
        if re.search(pattern, architecture):
            raise ValueError(f"timm architecture {architecture!r} ({what}) is not one keras-vit builds")
    return None


def eva_kwargs(architecture, model_args):
    """The `Eva` keyword arguments `timm.create_model(architecture, **model_args)` ends with."""
    return {**EVA_DEFAULTS, **EVA[architecture], **model_args}


def kwargs_for(architecture, args):
    """The architecture's keyword arguments as timm ends with them (`Eva` or AIMv2's `VisionTransformer`)."""
    if architecture in AIMV2:
        return {**EVA_DEFAULTS, **AIMV2[architecture], **args, "aimv2": True}
    return eva_kwargs(architecture, args)


def is_extended(config):
    """Whether `config` needs this module's layouts (timm's Eva or AIMv2) rather than `VisionTransformer`'s."""
    return bool(
        config.rope or config.mlp_type != "gelu" or config.norm != "layer" or config.qkv_bias != "qkv"
        or not config.proj_bias or not config.encoder_norm or config.map_heads or config.position_embedding == "none"
    )  # fmt: skip


def architecture(config):
    """(a registered timm architecture of `config`'s kind, the model_args that pin every size and option)."""
    if config.gelu != "exact":
        raise CheckpointError(f"timm's Eva and AIMv2 use exact GELU; this model has gelu={config.gelu!r}.")
    if config.rope == "dinov3":
        name = "vit_small{}_patch16_dinov3{}".format(
            "_plus" if config.mlp_type == "swiglu" else "", "_qkvb" if config.qkv_bias == "qv" else ""
        )
    elif config.rope == "eva":
        name = "eva02_base_patch16_clip_224" if config.attention_norm else (
            "eva02_base_patch14_224" if config.mlp_norm else "eva02_tiny_patch14_224"
        )  # fmt: skip
    elif config.rope == "pe":
        name = "vit_pe_core_tiny_patch16_384" if config.pooling == "map" else "vit_pe_spatial_tiny_patch16_512"
    elif config.norm == "rms":
        name = "aimv2_large_patch14_224"
    else:
        raise CheckpointError("timm has no Eva or AIMv2 architecture for this model; save it as 'npz' instead.")
    kw = kwargs_for(name, {})
    pool = {"token": "token", "gap": "avg", "map": "map"}[config.pooling]
    hidden = config.hidden_size
    args = dict(
        img_size=list(config.image_size), patch_size=config.patch_size, embed_dim=hidden, depth=config.num_layers,
        num_heads=config.num_heads, mlp_ratio=(config.mlp_dim + 0.5) / hidden, num_classes=config.num_classes,
        in_chans=config.channels, global_pool=pool, class_token=config.class_token,
    )  # fmt: skip
    if config.mlp_type == "swiglu" and kw["swiglu_align_to"] and config.mlp_dim % kw["swiglu_align_to"]:
        args["swiglu_align_to"] = 1  # the exact width, still timm's split layout
    if name in EVA:
        args.update(
            num_reg_tokens=config.num_registers, qkv_bias=config.qkv_bias != "none", init_values=config.layer_scale,
            use_abs_pos_emb=config.position_embedding == "learned", no_embed_class=config.no_embed_class,
            use_fc_norm=config.fc_norm, use_post_transformer_norm=config.encoder_norm and not config.fc_norm,
            dynamic_img_size=config.dynamic_image_size,
        )  # fmt: skip
        if config.rope != "dinov3":
            ref = config.rope_ref_grid
            args["ref_feat_shape"] = None if ref is None else [int(r) if float(r).is_integer() else r for r in ref]
            args["rope_grid_offset"] = config.rope_offset if config.rope_offset is not None else kw["rope_grid_offset"]
        if config.rope_base is not None:
            args["rope_temperature"] = config.rope_base
        if config.pooling == "map":
            args["attn_pool_num_heads"] = config.map_heads or config.num_heads
            args["attn_pool_mlp_ratio"] = ((config.map_mlp_dim or config.mlp_dim) + 0.5) / hidden
    return name, args
