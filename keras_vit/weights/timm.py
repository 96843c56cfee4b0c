"""timm's ViT folders (`config.json` + `model.safetensors`) and their relatives (DeiT, DINOv2, CLIP and SigLIP towers),
in and out; what the tensors do not show comes from `model_args` or the architecture name."""

import os
import re
import warnings

import numpy as np

from keras_vit import files
from keras_vit.models import ViTConfig
from keras_vit.weights import timm_architectures, timm_eva, timm_hybrid, timm_layout
from keras_vit.weights.checkpoint import (
    CONTRACT_MEAN,
    CONTRACT_STD,
    Checkpoint,
    read_json,
    read_safetensors,
    write_json,
    write_safetensors,
)
from keras_vit.weights.config_inference import infer_options
from keras_vit.weights.config_precheck import unwrap_timm
from keras_vit.weights.loading import POSEMB_KEY, CheckpointError

# timm's architecture size words -> (width, heads), for configs without model_args (most Hub repos).
_SIZES = {
    "tiny": (192, 3),
    "small": (384, 6),
    "medium": (512, 8),
    "base": (768, 12),
    "large": (1024, 16),
    "huge": (1280, 16),
    "giant": (1408, 16),
    "gigantic": (1664, 16),
}
_ACT = {None: "exact", "gelu": "exact", "gelu_tanh": "tanh", "quick_gelu": "quick"}
_POOLS = {"token": "token", "avg": "gap", "map": "map"}


def is_timm_folder(folder):
    path = os.path.join(folder, "config.json")
    return files.exists(path) and "architecture" in read_json(path)


def read(folder):
    """A timm folder -> `Checkpoint` (original layout, model options, class names, mean/std)."""
    cfg = read_json(os.path.join(folder, "config.json"))
    weights = os.path.join(folder, "model.safetensors")
    if not files.exists(weights):
        raise CheckpointError(
            f"timm folder {folder!r} has no model.safetensors (only PyTorch pickles?); keras-vit reads safetensors "
            f"only. Save it with timm's save_for_hf(..., safe_serialization=True)."
        )
    state = unwrap_timm(read_safetensors(weights))  # transformers' TimmWrapper saves timm's names under timm_model.
    args = cfg.get("model_args") or {}
    pretrained = cfg.get("pretrained_cfg") or {}
    arch = str(cfg.get("architecture", ""))
    try:
        family = timm_architectures.family(arch)
    except ValueError as err:
        raise CheckpointError(f"{folder!r}: {err}; it cannot be loaded.") from None
    if family in ("eva", "aimv2"):  # DINOv3, EVA-02, Perception Encoder, AIMv2: the architecture table's options
        params, options = timm_eva.read(folder, cfg, state, arch)
        return _checkpoint(cfg, params, options, folder)
    siglip = timm_architectures.SIGLIP.get(arch, (None, None))
    act = args.get("act_layer", siglip[1] or ("quick_gelu" if "quickgelu" in arch else None))
    if act not in _ACT:
        raise CheckpointError(
            f"{folder!r} uses act_layer={act!r}; keras-vit has {sorted(a for a in _ACT if a)} (GELU and QuickGELU)."
        )
    if "patch_embed.proj.weight" not in state:
        raise CheckpointError(f"{folder!r} ({arch}) is not a timm ViT: it has no patch_embed.proj.weight.")
    hidden = int(state["patch_embed.proj.weight"].shape[0])
    heads = _num_heads({"num_heads": siglip[0], **args} if siglip[0] else args, arch, hidden, folder)
    params = timm_layout.to_original(state, heads, source=folder)
    grid = _grid(args, pretrained, params, state, folder)
    options = infer_options(params, source=folder, grid=grid)
    if "conv_root/kernel" in params:
        options["resnet_norm"] = "timm"  # timm's StdConv2dSame(eps=1e-8) and GroupNormAct (1e-5)
    _check_prefix_rows(params, options, args, folder)
    pool = args.get("global_pool", cfg.get("global_pool", "token"))
    if pool not in _POOLS:
        raise CheckpointError(f"{folder!r} uses global_pool={pool!r}; keras-vit pools {sorted(_POOLS)}.")
    if (pool == "map") != ("MAPHead_0/probe" in params):
        raise CheckpointError(
            f"{folder!r}: global_pool={pool!r} but attn_pool tensors are {'absent' if pool == 'map' else 'present'}."
        )
    options.update(pooling=_POOLS[pool], gelu=_ACT[act], layer_norm_epsilon=1e-5 if "_clip_" in arch else 1e-6)
    return _checkpoint(cfg, params, options, folder)


def _checkpoint(cfg, params, options, folder):
    """The `Checkpoint` of a timm folder: its class names when they fit the head, its mean and std."""
    pretrained = cfg.get("pretrained_cfg") or {}
    names = cfg.get("label_names")
    if isinstance(names, dict):
        names = [names[k] for k in sorted(names, key=int)]
    if not names or len(names) != options["num_classes"]:
        names = None
    return Checkpoint(
        params=params,
        options=options,
        class_names=tuple(names) if names else None,
        mean=tuple(pretrained.get("mean", CONTRACT_MEAN)),
        std=tuple(pretrained.get("std", CONTRACT_STD)),
        format="timm",
        source=folder,
    )


def _check_prefix_rows(params, options, args, folder):
    """timm's `no_embed_class` as stated, and registers that have no position rows of their own."""
    stated = args.get("no_embed_class")
    prefix = options["class_token"] or options["distillation_token"]
    if stated is not None and prefix and bool(stated) != options.get("no_embed_class", False):
        raise CheckpointError(
            f"{folder!r}: model_args say no_embed_class={args['no_embed_class']} but pos_embed has "
            f"{params[POSEMB_KEY].shape[1]} rows for the grid {ViTConfig(**options).grid_size}."
        )
    if options["num_registers"] and options["class_token"] and not options.get("no_embed_class"):
        raise CheckpointError(
            f"{folder!r}: its position embedding has rows for the register tokens (no_embed_class=False); keras-vit's "
            f"registers have no position embedding (as timm's reg4 models, with no_embed_class=True)."
        )


def _num_heads(args, arch, hidden, folder):
    if "num_heads" in args:
        return int(args["num_heads"])
    match = re.match(r"^(?:vit|deit\d?)_([a-z]+)_", arch)
    if match and match.group(1) in _SIZES and _SIZES[match.group(1)][0] == hidden:
        return _SIZES[match.group(1)][1]
    if hidden % 64 == 0:
        warnings.warn(
            f"{folder!r}: the number of attention heads is in neither model_args nor the architecture name "
            f"({arch!r}); assumed {hidden // 64} (head width 64, as in timm's ViTs).",
            stacklevel=4,
        )
        return hidden // 64
    raise CheckpointError(f"{folder!r}: cannot tell the number of attention heads; add num_heads to model_args.")


def _grid(args, pretrained, params, state, folder):
    patch = int(state["patch_embed.proj.weight"].shape[-1])
    if "conv_root/kernel" in params:  # a hybrid: patches of the ResNet's map, stride 4 x 2 per stage after the first
        stages = len({k.split("/")[0] for k in params if k.startswith("block")})
        patch *= 4 * 2 ** max(stages - 1, 0)
    size = pretrained.get("input_size", [None, *np.broadcast_to(args.get("img_size", 0), (2,))])[1:]
    grid = (int(size[0]) // patch, int(size[1]) // patch) if size[0] else None
    rows = params[POSEMB_KEY].shape[1]
    prefix = int("cls" in params) + int("dist" in params)
    registers = params["registers"].shape[1] if "registers" in params else 0
    if grid and registers and grid[0] * grid[1] == rows - prefix - registers:
        raise CheckpointError(
            f"{folder!r}: its position embedding has rows for the register tokens "
            f"(no_embed_class=False); keras-vit's registers have none of their own (as in timm's reg4 models)."
        )
    return grid if grid and grid[0] * grid[1] in (rows, rows - prefix) else None


def write(folder, params, config, class_names=None):
    """Writes a timm folder that `timm.create_model(cfg["architecture"], pretrained=True, **cfg["model_args"],
    pretrained_cfg_overlay=dict(cfg["pretrained_cfg"], file=folder + "/model.safetensors"))` loads."""
    if timm_architectures.is_extended(config):  # DINOv3, EVA-02, PE, AIMv2: timm's Eva / AIMv2 layouts
        return _write_eva(folder, params, config, class_names)
    _check_writable(config)
    architecture, epsilon = _architecture(config)
    if abs(config.layer_norm_epsilon - epsilon) > 1e-9:
        what, stated = ("ViT", "1e-6") if epsilon == 1e-6 else (architecture, "1e-5")
        warnings.warn(
            f"timm's {what} uses LayerNorm epsilon {stated}; this model uses {config.layer_norm_epsilon:g}. "
            f"Outputs in timm will differ by about that much relative to the activations' variance.",
            stacklevel=3,
        )
    if config.resnet_layers is not None and config.resnet_norm != "timm":
        warnings.warn(
            "timm's hybrids standardise their ResNet kernels by sqrt(var + 1e-8) and use GroupNorm epsilon 1e-5; "
            "this model uses vit_jax's (std + 1e-5, 1e-6), so timm's outputs will differ slightly from keras-vit's.",
            stacklevel=3,
        )
    cfg = _timm_config(config, architecture, class_names)
    files.makedirs(folder)
    state = timm_layout.from_original(params, config.num_heads)
    write_safetensors(os.path.join(folder, "model.safetensors"), state)
    write_json(os.path.join(folder, "config.json"), cfg)
    return folder


def _write_eva(folder, params, config, class_names=None):
    """Writes a timm folder (config.json + model.safetensors) that `timm.create_model(cfg["architecture"],
    **cfg["model_args"])` builds and loads."""
    name, args = timm_architectures.architecture(config)
    kw = timm_architectures.kwargs_for(name, args)
    if abs(config.layer_norm_epsilon - kw["norm_eps"]) > 1e-12:
        raise CheckpointError(
            f"timm's {name} uses norm epsilon {kw['norm_eps']:g}; this model uses {config.layer_norm_epsilon:g}, "
            f"which its timm layout cannot state. Save it as 'npz' (or with model.save)."
        )
    cfg = dict(
        architecture=name, num_classes=config.num_classes, num_features=config.hidden_size,
        global_pool=args["global_pool"], model_args=args, pretrained_cfg=_pretrained_cfg(config),
    )  # fmt: skip
    if class_names:
        cfg["label_names"] = list(class_names)
    files.makedirs(folder)
    write_safetensors(os.path.join(folder, "model.safetensors"), timm_eva.from_original(params, config, kw))
    write_json(os.path.join(folder, "config.json"), cfg)
    return folder


def _timm_config(config, architecture, class_names):
    """The folder's `config.json`: the architecture, `model_args` and `pretrained_cfg` timm builds it from."""
    pool = {"token": "token", "gap": "avg", "map": "map"}[config.pooling]
    cfg = dict(
        architecture=architecture,
        num_classes=config.num_classes,
        num_features=config.hidden_size,
        global_pool=pool,
        model_args=_model_args(config, pool),
        pretrained_cfg=_pretrained_cfg(config),
    )
    if class_names:
        cfg["label_names"] = list(class_names)
    return cfg


def _model_args(config, pool):
    """`timm.create_model` keyword arguments that override every default of the architecture name they can."""
    height, width = config.image_size
    model_args = dict(
        img_size=[height, width],
        patch_size=config.patch_size,
        embed_dim=config.hidden_size,
        depth=config.num_layers,
        num_heads=config.num_heads,
        mlp_ratio=config.mlp_dim / config.hidden_size,
        num_classes=config.num_classes,
        in_chans=config.channels,
        global_pool=pool,
        class_token=config.class_token,
        fc_norm=config.fc_norm,
        no_embed_class=config.no_embed_class,
        reg_tokens=config.num_registers,
        pre_norm=config.pre_norm,
        init_values=config.layer_scale,
    )
    if config.gelu != "exact":
        model_args["act_layer"] = {"tanh": "gelu_tanh", "quick": "quick_gelu"}[config.gelu]
    return model_args


def _pretrained_cfg(config):
    """timm's preprocessing and classifier description: keras-vit's input contract (mean = std = 0.5)."""
    height, width = config.image_size
    pretrained_cfg = dict(
        input_size=[config.channels, height, width],
        fixed_input_size=True,
        interpolation="bilinear",
        crop_pct=1.0,
        crop_mode="center",
        mean=list(CONTRACT_MEAN),
        std=list(CONTRACT_STD),
        num_classes=config.num_classes,
        pool_size=None,
        first_conv="patch_embed.proj" if config.resnet_layers is None else timm_hybrid.first_conv(config),
        classifier=["head", "head_dist"] if config.distillation_token else "head",
    )
    if config.resnet_layers is not None:
        pretrained_cfg["custom_load"] = False  # the registry's augreg hybrids load .npz files; this is safetensors
    return pretrained_cfg


def _check_writable(config):
    """One line for a model timm's `VisionTransformer` cannot hold."""
    if config.resnet_layers is not None:
        timm_hybrid.architecture(config)  # raises for a ResNet timm does not register
    if config.representation_size:
        raise CheckpointError(
            "timm's ViT has no pre_logits (representation) layer; save this model as 'npz', or as 'transformers' "
            "without a head (its ViTModel pooler is that layer)."
        )
    if config.num_registers and not config.no_embed_class:
        raise CheckpointError(
            "timm's ViT gives register tokens position rows unless no_embed_class=True; this model's registers "
            "follow a class-row position embedding (transformers' Dinov2WithRegisters layout): save it as "
            "'transformers' or 'npz'."
        )
    if not config.patch_bias and not config.pre_norm:
        raise CheckpointError(
            "timm's ViT drops the patch-embedding bias only with pre_norm=True (CLIP); this model has patch_bias=False "
            "without pre_norm. Save it as 'npz' (or with model.save)."
        )
    if config.patch_bias and config.pre_norm:
        raise CheckpointError(
            "timm's ViT with pre_norm=True has no patch-embedding bias; this model has both. Save it as 'npz'."
        )


# Registered timm names (with a pretrained config, which `pretrained=True` needs) by width; model_args
# override every default of the name that model_args can state; what they cannot (the class, the LayerNorm
# epsilon) the name gives.
_ARCHITECTURES = {
    192: "vit_tiny_patch16_224",
    384: "vit_small_patch16_224",
    768: "vit_base_patch16_224",
    1024: "vit_large_patch16_224",
    1280: "vit_huge_patch14_224",
}
_WORDS = {192: "tiny", 384: "small", 768: "base"}


def _architecture(config):
    """(a registered timm name whose model class and LayerNorm epsilon are this model's, that epsilon)."""
    if config.resnet_layers is not None:
        return timm_hybrid.architecture(config), 1e-6
    if config.distillation_token:
        return f"deit_{_WORDS.get(config.hidden_size, 'tiny')}_distilled_patch16_224", 1e-6
    if config.pre_norm or abs(config.layer_norm_epsilon - 1e-5) < 1e-9:
        return ("vit_base_patch16_clip_quickgelu_224" if config.gelu == "quick" else "vit_base_patch16_clip_224"), 1e-5
    if config.pooling == "map":
        return "vit_base_patch16_siglip_224", 1e-6
    if config.layer_scale is not None and config.num_registers:
        return "vit_small_patch14_reg4_dinov2", 1e-6
    if config.layer_scale is not None and config.no_embed_class:
        return f"deit3_{_WORDS.get(config.hidden_size, 'small')}_patch16_224", 1e-6
    if config.layer_scale is not None:
        return "vit_small_patch14_dinov2", 1e-6
    return _ARCHITECTURES.get(config.hidden_size, "vit_base_patch16_224"), 1e-6
