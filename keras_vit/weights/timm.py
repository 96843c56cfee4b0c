"""timm's ViT folders (`config.json` + `model.safetensors`, as on the Hub's `timm/` repos), in and out.

timm's `VisionTransformer` differs from the original layout in names, in PyTorch's (out, in) Linear and OIHW conv
layouts, in one fused `attn.qkv` Linear whose rows are q, k, v, and in its position embedding having no class
row when `no_embed_class=True` (timm then adds it to the patch tokens only, which is the original layout with a
zero class row). Heads are not in the tensors (qkv is fused): `model_args`, else the architecture name, says.
"""

import os
import re
import warnings

import numpy as np

from keras_vit import files
from keras_vit.weights.checkpoint import (
    CONTRACT_MEAN,
    CONTRACT_STD,
    Checkpoint,
    conv_to_hwio,
    hwio_to_conv,
    leftover_error,
    linear_to_kernel,
    read_json,
    read_safetensors,
    split_heads,
    write_json,
    write_safetensors,
)
from keras_vit.weights.config_inference import infer_options
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
_ACT = {None: "exact", "gelu": "exact", "gelu_tanh": "tanh"}
_BLOCK = {
    "norm1": "LayerNorm_0",
    "norm2": "LayerNorm_2",
    "mlp.fc1": "MlpBlock_3/Dense_0",
    "mlp.fc2": "MlpBlock_3/Dense_1",
}
ATT = "MultiHeadDotProductAttention_1"


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
    state = read_safetensors(weights)
    args = cfg.get("model_args") or {}
    pretrained = cfg.get("pretrained_cfg") or {}
    arch = str(cfg.get("architecture", ""))
    if "fc_norm.weight" in state:
        raise CheckpointError(
            f"{folder!r} ({arch}) normalises after pooling (timm fc_norm, global_pool='avg'); keras-vit's GAP "
            f"models normalise the tokens before pooling, so this checkpoint has no exact keras-vit equivalent."
        )
    act = args.get("act_layer")
    if act not in _ACT:
        raise CheckpointError(f"{folder!r} uses act_layer={act!r}; keras-vit has GELU only ('gelu', 'gelu_tanh').")
    if "patch_embed.proj.weight" not in state:
        raise CheckpointError(f"{folder!r} ({arch}) is not a timm ViT: it has no patch_embed.proj.weight.")
    hidden = int(state["patch_embed.proj.weight"].shape[0])
    params = to_original(
        state, _num_heads(args, arch, hidden, folder), source=folder, no_embed_class=args.get("no_embed_class")
    )
    grid = _grid(args, pretrained, params, state)
    options = infer_options(params, source=folder, grid=grid)
    pool = args.get("global_pool", cfg.get("global_pool", "token"))
    if pool not in ("token", "avg"):
        raise CheckpointError(f"{folder!r} uses global_pool={pool!r}; keras-vit pools 'token' or 'avg' (gap).")
    options.update(pooling="token" if pool == "token" else "gap", gelu=_ACT[act], layer_norm_epsilon=1e-6)
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


def _grid(args, pretrained, params, state):
    patch = int(state["patch_embed.proj.weight"].shape[-1])
    size = pretrained.get("input_size", [None, *np.broadcast_to(args.get("img_size", 0), (2,))])[1:]
    grid = (int(size[0]) // patch, int(size[1]) // patch) if size[0] else None
    tokens = params[POSEMB_KEY].shape[1] - (1 if "cls" in params else 0)
    return grid if grid and grid[0] * grid[1] == tokens else None


def to_original(state, num_heads, *, source, no_embed_class=None):
    """timm state dict (numpy) -> original-layout params; tensors left over raise a `CheckpointError`."""
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
        out["embedding/kernel"] = conv_to_hwio(take("patch_embed.proj.weight"))
        out["embedding/bias"] = take("patch_embed.proj.bias")
        hidden = out["embedding/bias"].shape[0]
        posemb = take("pos_embed")
        if "cls_token" in state:
            out["cls"] = take("cls_token")
            if no_embed_class if no_embed_class is not None else _is_square(posemb.shape[1]):
                # timm adds this embedding to the patch tokens only: the class row it lacks is a zero row.
                posemb = np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)
        out[POSEMB_KEY] = posemb
        i = 0
        while f"blocks.{i}.norm1.weight" in state:
            src, dst = f"blocks.{i}", f"Transformer/encoderblock_{i}"
            for name, target in _BLOCK.items():
                (norm if name.startswith("norm") else linear)(f"{src}.{name}", f"{dst}/{target}")
            qkv_w = take(f"{src}.attn.qkv.weight")
            qkv_b = state.pop(f"{src}.attn.qkv.bias", np.zeros(3 * hidden, qkv_w.dtype))
            for j, part in enumerate(("query", "key", "value")):
                kernel = linear_to_kernel(qkv_w[j * hidden : (j + 1) * hidden])
                out[f"{dst}/{ATT}/{part}/kernel"] = split_heads(kernel, num_heads)
                out[f"{dst}/{ATT}/{part}/bias"] = qkv_b[j * hidden : (j + 1) * hidden].reshape(num_heads, -1)
            out[f"{dst}/{ATT}/out/kernel"] = linear_to_kernel(take(f"{src}.attn.proj.weight")).reshape(
                num_heads, hidden // num_heads, hidden
            )
            out[f"{dst}/{ATT}/out/bias"] = take(f"{src}.attn.proj.bias")
            i += 1
        norm("norm", "Transformer/encoder_norm")
        if "head.weight" in state:
            linear("head", "head")
    except KeyError as err:
        raise CheckpointError(f"{os.fspath(source)!r} is not a timm ViT: tensor {err} is missing.") from err
    if state:
        raise leftover_error(source, "timm", state)
    return out


def _is_square(num_rows):
    """With a class token, a square number of rows means there is no class row (g * g + 1 is never square)."""
    side = round(num_rows**0.5)
    return side * side == num_rows


def from_original(params, num_heads):
    """Original-layout params -> timm state dict (numpy). The class row of the position embedding is kept."""
    state = {}

    def linear(src, dst):
        state[f"{dst}.weight"] = np.asarray(params[f"{src}/kernel"]).T
        state[f"{dst}.bias"] = np.asarray(params[f"{src}/bias"])

    def norm(src, dst):
        state[f"{dst}.weight"] = params[f"{src}/scale"]
        state[f"{dst}.bias"] = params[f"{src}/bias"]

    state["patch_embed.proj.weight"] = hwio_to_conv(params["embedding/kernel"])
    state["patch_embed.proj.bias"] = params["embedding/bias"]
    if "cls" in params:
        state["cls_token"] = params["cls"]
    state["pos_embed"] = params[POSEMB_KEY]
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in params:
        src, dst = f"Transformer/encoderblock_{i}", f"blocks.{i}"
        for name, target in _BLOCK.items():
            (norm if name.startswith("norm") else linear)(f"{src}/{target}", f"{dst}.{name}")
        parts = [params[f"{src}/{ATT}/{p}/kernel"] for p in ("query", "key", "value")]
        state[f"{dst}.attn.qkv.weight"] = np.concatenate([k.reshape(k.shape[0], -1).T for k in parts])
        state[f"{dst}.attn.qkv.bias"] = np.concatenate(
            [np.asarray(params[f"{src}/{ATT}/{p}/bias"]).reshape(-1) for p in ("query", "key", "value")]
        )
        out = np.asarray(params[f"{src}/{ATT}/out/kernel"])
        state[f"{dst}.attn.proj.weight"] = out.reshape(-1, out.shape[-1]).T
        state[f"{dst}.attn.proj.bias"] = params[f"{src}/{ATT}/out/bias"]
        i += 1
    norm("Transformer/encoder_norm", "norm")
    if "head/kernel" in params:
        linear("head", "head")
    return state


def write(folder, params, config, class_names=None):
    """Writes a timm folder that `timm.create_model(cfg["architecture"], pretrained=True, **cfg["model_args"],
    pretrained_cfg_overlay=dict(cfg["pretrained_cfg"], file=folder + "/model.safetensors"))` loads."""
    if config.resnet_layers is not None:
        raise CheckpointError("save_pretrained(format='timm') writes plain ViTs only; save a hybrid as 'npz'.")
    if config.representation_size:
        raise CheckpointError(
            "timm's ViT has no pre_logits (representation) layer; save this model as 'npz', or as 'transformers' "
            "without a head (its ViTModel pooler is that layer)."
        )
    if abs(config.layer_norm_epsilon - 1e-6) > 1e-9:
        warnings.warn(
            f"timm's ViT uses LayerNorm epsilon 1e-6; this model uses {config.layer_norm_epsilon:g}. Outputs in "
            f"timm will differ by about that much relative to the activations' variance.",
            stacklevel=3,
        )
    height, width = config.image_size
    pool = "token" if config.pooling == "token" else "avg"
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
        fc_norm=False,
    )
    if config.gelu == "tanh":
        model_args["act_layer"] = "gelu_tanh"
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
        first_conv="patch_embed.proj",
        classifier="head",
    )
    cfg = dict(
        architecture=_architecture(config),
        num_classes=config.num_classes,
        num_features=config.hidden_size,
        global_pool=pool,
        model_args=model_args,
        pretrained_cfg=pretrained_cfg,
    )
    if class_names:
        cfg["label_names"] = list(class_names)
    files.makedirs(folder)
    write_safetensors(os.path.join(folder, "model.safetensors"), from_original(params, config.num_heads))
    write_json(os.path.join(folder, "config.json"), cfg)
    return folder


# Registered timm names (with a pretrained config, which `pretrained=True` needs) by width; model_args
# override every default of the name, so only its existence matters.
_ARCHITECTURES = {
    192: "vit_tiny_patch16_224",
    384: "vit_small_patch16_224",
    768: "vit_base_patch16_224",
    1024: "vit_large_patch16_224",
    1280: "vit_huge_patch14_224",
}


def _architecture(config):
    return _ARCHITECTURES.get(config.hidden_size, "vit_base_patch16_224")
