"""SigLIP 2 NaFlex checkpoints in and out: transformers' `siglip2` towers, timm's `naflexvit_*` models, big_vision's
NaFlex `.npz` (read); each is renamed to its fixed-resolution SigLIP layout (they differ in the patch embedding, a
Linear on (ph, pw, C)-flattened patches, and the position table's shape), so one `Checkpoint` builds both forms."""

import math
import os

import numpy as np

from keras_vit import files
from keras_vit.weights import timm_layout
from keras_vit.weights import transformers_families as families
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
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.loading import POSEMB_KEY

TRANSFORMERS_TYPES = ("siglip2_vision_model", "siglip2")
_TIMM_PREFIX = "naflexvit_"
# timm's act_layer names; the siglip naflexvit architectures set gelu_tanh themselves.
_TIMM_ACT = {"gelu_tanh": "tanh", "gelu": "exact", "quick_gelu": "quick", None: "tanh"}


def is_naflex_folder(folder):
    path = os.path.join(folder, "config.json")
    if not files.exists(path):
        return False
    cfg = read_json(path)
    return cfg.get("model_type") in TRANSFORMERS_TYPES or str(cfg.get("architecture", "")).startswith(_TIMM_PREFIX)


def read(folder):
    """A transformers `siglip2` or timm `naflexvit_*` folder -> `Checkpoint` whose `naflex` says its patch budget."""
    cfg = read_json(os.path.join(folder, "config.json"))
    weights = os.path.join(folder, "model.safetensors")
    if not files.exists(weights):
        raise CheckpointError(f"{folder!r} has no model.safetensors; keras-vit reads safetensors only.")
    state = dict(read_safetensors(weights))
    if cfg.get("model_type") in TRANSFORMERS_TYPES:
        return _read_transformers(folder, cfg, state)
    return _read_timm(folder, cfg, state)


def is_big_vision_naflex(params):
    """Original-layout params of big_vision's NaFlex ViT: a Dense patch embedding, a (gh, gw, D) position grid."""
    return np.ndim(params.get("embedding/kernel")) == 2 and np.ndim(params.get(POSEMB_KEY)) == 3


def read_big_vision(params, path, channels=3):
    """big_vision's NaFlex image tower (`naflex_vit.py`; already in the original key layout) -> `Checkpoint`. The
    sequence length is not in the file: 256, big_vision's and the released towers' default, unless the caller
    passes `max_num_patches`."""
    params = dict(params)
    kernel = np.asarray(params["embedding/kernel"])
    patch = math.isqrt(kernel.shape[0] // channels)
    if patch * patch * channels != kernel.shape[0]:
        raise CheckpointError(f"{path!r}: a patch embedding of {kernel.shape[0]} inputs is not P x P x {channels}.")
    params["embedding/kernel"] = kernel.reshape(patch, patch, channels, kernel.shape[-1])
    table = np.asarray(params[POSEMB_KEY])
    grid = tuple(table.shape[:2])
    params[POSEMB_KEY] = table.reshape(1, grid[0] * grid[1], table.shape[-1])
    options = _options(params, path, grid, pools=("map", "gap"))
    return Checkpoint(params=params, options=options, format="npz", source=path,
                      naflex=dict(max_num_patches=256, style="transformers"))  # fmt: skip


def _linear_to_conv(weight, channels):
    """(D, P * P * C) Linear on (ph, pw, C)-flattened patches -> the (D, C, P, P) conv that computes the same."""
    weight = np.asarray(weight)
    patch = math.isqrt(weight.shape[1] // channels)
    return weight.reshape(weight.shape[0], patch, patch, channels).transpose(0, 3, 1, 2)


def _read_transformers(folder, cfg, state):
    if cfg["model_type"] == "siglip2":  # the two-tower folder: its image tower
        cfg = {**cfg.get("vision_config", {})}
        state = {k[len("vision_model.") :]: v for k, v in state.items() if k.startswith("vision_model.")}
    channels = int(cfg.get("num_channels", 3))
    key = "embeddings.patch_embedding.weight"
    state[key] = _linear_to_conv(state[key], channels)
    heads = int(cfg.get("num_attention_heads", 12))
    params = families.to_original(state, "siglip_vision_model", heads, source=folder)
    side = math.isqrt(int(cfg.get("num_patches", 256)))
    options = _options(params, folder, (side, side))
    act = cfg.get("hidden_act", "gelu_pytorch_tanh")
    options.update(
        gelu="exact" if act in ("gelu", "gelu_python") else "tanh",
        layer_norm_epsilon=float(cfg.get("layer_norm_eps", 1e-6)),
    )
    processor_path = os.path.join(folder, "preprocessor_config.json")
    processor = read_json(processor_path) if files.exists(processor_path) else {}
    naflex = dict(max_num_patches=int(processor.get("max_num_patches", 256)), style="transformers")
    return Checkpoint(
        params=params, options=options, mean=tuple(processor.get("image_mean", CONTRACT_MEAN)),
        std=tuple(processor.get("image_std", CONTRACT_STD)), format="transformers", source=folder, naflex=naflex,
    )  # fmt: skip


def _read_timm(folder, cfg, state):
    args = cfg.get("model_args") or {}
    pretrained = cfg.get("pretrained_cfg") or {}
    channels = int(args.get("in_chans", 3))
    state["patch_embed.proj.weight"] = _linear_to_conv(state.pop("embeds.proj.weight"), channels)
    state["patch_embed.proj.bias"] = state.pop("embeds.proj.bias")
    table = np.asarray(state.pop("embeds.pos_embed"))
    grid = tuple(table.shape[1:3])
    state["pos_embed"] = table.reshape(1, grid[0] * grid[1], table.shape[-1])
    hidden = table.shape[-1]
    heads = int(args.get("num_heads", max(1, hidden // 64)))
    params = timm_layout.to_original(state, heads, source=folder)
    options = _options(params, folder, grid, pools=("map", "gap"))
    pool = args.get("global_pool", cfg.get("global_pool", "map"))
    if {"map": "map", "avg": "gap"}.get(pool) != options["pooling"]:
        raise CheckpointError(f"{folder!r}: global_pool={pool!r}, but its tensors pool with {options['pooling']!r}.")
    act = args.get("act_layer")
    if act not in _TIMM_ACT:
        known = sorted(a for a in _TIMM_ACT if a)
        raise CheckpointError(f"{folder!r} uses act_layer={act!r}; keras-vit's NaFlex has {known}.")
    options.update(gelu=_TIMM_ACT[act], layer_norm_epsilon=1e-6)
    names = cfg.get("label_names")
    size = args.get("max_seq_len", 256)
    return Checkpoint(
        params=params, options=options,
        class_names=tuple(names) if isinstance(names, list) and len(names) == options["num_classes"] else None,
        mean=tuple(pretrained.get("mean", CONTRACT_MEAN)), std=tuple(pretrained.get("std", CONTRACT_STD)),
        format="timm", source=folder, naflex=dict(max_num_patches=int(size), style="timm"),
    )  # fmt: skip


def _options(params, folder, grid, pools=("map",)):
    """The fixed-resolution `ViTConfig` fields of the same weights (the table's grid at its patch size); `pools`:
    the poolings the folder's layout can state."""
    options = infer_options(params, source=folder, grid=grid)
    if options["pooling"] not in pools or options.get("fc_norm"):
        raise CheckpointError(
            f"{folder!r} has no attention-pooling head{' and no final norm before the mean' if len(pools) > 1 else ''}"
            f"; keras-vit's NaFlex model pools with one{' or averages normed tokens' if len(pools) > 1 else ''}."
        )
    return options


def naflex_options(ckpt, max_num_patches=None):
    """`NaFlexViT` arguments for a `Checkpoint` (a NaFlex folder, or a fixed-resolution SigLIP one)."""
    options = ckpt.options
    pooled = options.get("pooling") in ("map", "gap") and not options.get("fc_norm")
    if not pooled or options.get("class_token") or options.get("resnet_layers") or options.get("num_registers"):
        raise CheckpointError(
            f"{ckpt.source!r} is not a SigLIP-style ViT (no class token, an attention-pooling head or the mean of the "
            f"normed patch tokens); only those have a NaFlex form. Load it without naflex=True."
        )
    patch = options["patch_size"]
    size = options["image_size"]
    size = (size, size) if isinstance(size, int) else tuple(size)
    budget = max_num_patches or (ckpt.naflex or {}).get("max_num_patches", 256)
    return dict(
        max_num_patches=int(budget), patch_size=patch, position_grid=(size[0] // patch, size[1] // patch),
        hidden_size=options["hidden_size"], num_layers=options["num_layers"], num_heads=options["num_heads"],
        mlp_dim=options["mlp_dim"], num_classes=options["num_classes"], channels=options.get("channels", 3),
        layer_norm_epsilon=options["layer_norm_epsilon"], gelu=options["gelu"], pooling=options["pooling"],
    )  # fmt: skip


def checkpoint_of(model, params, source):
    """A `NaFlexViT` (its `params` as `checkpoint_variables` names them) as a `Checkpoint`: the fixed-resolution
    options of the same weights, and its patch budget."""
    o = model.options
    grid = o["position_grid"]
    options = dict(
        image_size=(grid[0] * o["patch_size"], grid[1] * o["patch_size"]), patch_size=o["patch_size"],
        hidden_size=o["hidden_size"], num_layers=o["num_layers"], num_heads=o["num_heads"], mlp_dim=o["mlp_dim"],
        num_classes=o["num_classes"], channels=o["channels"], pooling=o["pooling"], class_token=False,
        layer_norm_epsilon=o["layer_norm_epsilon"], gelu=o["gelu"],
    )  # fmt: skip
    return Checkpoint(
        params=fixed_params(params, o["patch_size"], o["channels"]), options=options, class_names=model.class_names,
        format="keras", source=source, naflex=dict(max_num_patches=o["max_num_patches"], style="transformers"),
    )  # fmt: skip


def naflex_params(params):
    """Original-layout params (HWIO patch kernel) -> the NaFlex model's (the kernel flattened to (P * P * C, D))."""
    params = dict(params)
    kernel = np.asarray(params["embedding/kernel"])
    params["embedding/kernel"] = kernel.reshape(-1, kernel.shape[-1])
    return params


def fixed_params(params, patch_size, channels=3):
    """The NaFlex model's params -> original-layout ones (the HWIO patch kernel)."""
    params = dict(params)
    kernel = np.asarray(params["embedding/kernel"])
    params["embedding/kernel"] = kernel.reshape(patch_size, patch_size, channels, kernel.shape[-1])
    return params


def write(folder, params, options, fmt, class_names=None):
    """Writes a NaFlex model's original-layout `params` (HWIO kernel) as a transformers `Siglip2VisionModel`
    folder (fmt "transformers") or a timm `naflexvit_base_patch16_siglip` folder (fmt "timm")."""
    heads, grid, hidden = options["num_heads"], tuple(options["position_grid"]), options["hidden_size"]
    files.makedirs(folder)
    if fmt == "transformers" and options["pooling"] != "map":
        raise CheckpointError(
            "transformers' Siglip2VisionModel pools with its attention head only; this NaFlex model averages its "
            "tokens (pooling='gap'). Save it as 'timm'."
        )
    if fmt == "transformers":
        state = families.from_timm(timm_layout.from_original(params, heads), "siglip_vision_model")
        conv = state.pop("embeddings.patch_embedding.weight")
        state["embeddings.patch_embedding.weight"] = conv.transpose(0, 2, 3, 1).reshape(conv.shape[0], -1)
        cfg = dict(
            architectures=["Siglip2VisionModel"], model_type="siglip2_vision_model", hidden_size=hidden,
            intermediate_size=options["mlp_dim"], num_hidden_layers=options["num_layers"], num_attention_heads=heads,
            num_channels=options["channels"], num_patches=grid[0] * grid[1], patch_size=options["patch_size"],
            hidden_act="gelu_pytorch_tanh" if options["gelu"] == "tanh" else "gelu",
            layer_norm_eps=options["layer_norm_epsilon"], attention_dropout=0.0, vision_use_head=True, dtype="float32",
        )  # fmt: skip
        processor = dict(
            image_processor_type="Siglip2ImageProcessor", do_resize=True, do_rescale=True, do_normalize=True,
            image_mean=list(CONTRACT_MEAN), image_std=list(CONTRACT_STD), resample=2, rescale_factor=1 / 255,
            patch_size=options["patch_size"], max_num_patches=options["max_num_patches"],
        )  # fmt: skip
        write_json(os.path.join(folder, "preprocessor_config.json"), processor)
    elif fmt == "timm":
        state = timm_layout.from_original(params, heads)
        conv = state.pop("patch_embed.proj.weight")
        state["embeds.proj.weight"] = conv.transpose(0, 2, 3, 1).reshape(conv.shape[0], -1)
        state["embeds.proj.bias"] = state.pop("patch_embed.proj.bias")
        state["embeds.pos_embed"] = np.asarray(state.pop("pos_embed")).reshape(1, *grid, hidden)
        cfg = _timm_config(options, class_names)
    else:
        raise ValueError(f"A NaFlex model is saved as 'transformers' or 'timm'. Received: format={fmt!r}")
    write_safetensors(os.path.join(folder, "model.safetensors"), state)
    write_json(os.path.join(folder, "config.json"), cfg)
    return folder


def _timm_config(options, class_names):
    grid, patch = list(options["position_grid"]), options["patch_size"]
    pool = {"map": "map", "gap": "avg"}[options["pooling"]]
    args = dict(
        img_size=[g * patch for g in grid], patch_size=patch, embed_dim=options["hidden_size"],
        depth=options["num_layers"], num_heads=options["num_heads"],
        mlp_ratio=options["mlp_dim"] / options["hidden_size"], num_classes=options["num_classes"],
        pos_embed_grid_size=grid, in_chans=options["channels"], global_pool=pool,
    )  # fmt: skip
    args["act_layer"] = next(name for name, gelu in _TIMM_ACT.items() if name and gelu == options["gelu"])
    if pool == "avg":  # the final norm before the mean, no norm after it (timm's default for "avg" is the reverse)
        args["fc_norm"] = False
    cfg = dict(
        architecture="naflexvit_base_patch16_siglip", num_classes=options["num_classes"],
        num_features=options["hidden_size"], global_pool=pool, model_args=args,
        pretrained_cfg=dict(input_size=[options["channels"], *args["img_size"]], fixed_input_size=False,
                            interpolation="bicubic", crop_pct=1.0, mean=list(CONTRACT_MEAN), std=list(CONTRACT_STD),
                            num_classes=options["num_classes"], first_conv="embeds.proj", classifier="head"),
    )  # fmt: skip
    if class_names:
        cfg["label_names"] = list(class_names)
    return cfg
