"""The model a checkpoint describes, read from its tensors' shapes (original vit_jax layout): all a bare `.npz` says;
the other formats add what only their config files say."""

import re

from keras_vit.layers.position_embedding import infer_grid
from keras_vit.weights.loading import POSEMB_KEY, CheckpointError


def infer_options(params, *, source="checkpoint", grid=None):
    """`ViTConfig` fields (as a dict) for original-layout `params`.

    Args:
        params: {original key: array}.
        source: for messages.
        grid: the patch grid (gh, gw) when the position embedding's is not square (a config file may say).

    Returns:
        A dict of `ViTConfig` fields. GELU and LayerNorm epsilon are the released checkpoints' (tanh, 1e-6);
        the callers for other formats replace them with what the format's config states.
    """
    _check_is_vit(params, source)
    options = _transformer_options(params, source)
    options.update(_family_options(params, options["class_token"]))
    hybrid = _hybrid_options(params)
    options.update(hybrid)
    stride = 4 * 2 ** max(len(hybrid["resnet_layers"]) - 1, 0) if hybrid else 1  # no stage: the root alone (4)
    options.update(_position_options(params, options, grid, stride * options["patch_size"], source))
    return options


def _check_is_vit(params, source):
    final_norm = "fc_norm/scale" if "fc_norm/scale" in params else "Transformer/encoder_norm/scale"
    for key in ("embedding/kernel", final_norm):
        if key not in params:
            raise CheckpointError(
                f"{source!r} is not a ViT checkpoint: it has no {key!r} (found {len(params)} tensors, e.g. "
                f"{sorted(params)[:3]})."
            )


def _transformer_options(params, source):
    """The plain ViT's options: sizes, depth, heads, head, representation layer, class token."""
    kernel = params["embedding/kernel"]
    hidden = int(kernel.shape[-1])
    blocks = sorted({int(m.group(1)) for k in params if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))})
    if not blocks:
        raise CheckpointError(f"{source!r} has no encoder blocks (Transformer/encoderblock_0/...).")
    query = params["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"]
    mlp = params["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"]
    class_token = "cls" in params
    return dict(
        patch_size=int(kernel.shape[0]),
        channels=int(kernel.shape[2]),
        hidden_size=hidden,
        num_layers=len(blocks),
        num_heads=int(query.shape[1]),
        mlp_dim=int(mlp.shape[1]),
        num_classes=int(params["head/bias"].shape[0]) if "head/bias" in params else 0,
        representation_size=int(params["pre_logits/bias"].shape[0]) if "pre_logits/bias" in params else None,
        class_token=class_token,
        pooling="token" if class_token else "gap",
        position_embedding="learned",
        layer_norm_epsilon=1e-6,
        gelu="tanh",
    )


def _hybrid_options(params):
    """A hybrid's ResNet stages and width (and the image's channels), or {} for a plain ViT."""
    if "conv_root/kernel" not in params:
        return {}
    stages = []
    while any(k.startswith(f"block{len(stages) + 1}/") for k in params):
        prefix = f"block{len(stages) + 1}/"
        stages.append(len({k.split("/")[1] for k in params if k.startswith(prefix)}))
    return dict(
        resnet_layers=tuple(stages),
        resnet_width=int(params["conv_root/kernel"].shape[-1]) // 64,
        channels=int(params["conv_root/kernel"].shape[2]),  # the image's, not the feature map's
    )


def _position_options(params, options, grid, step, source):
    """The position embedding's kind, timm's `no_embed_class` and the image size (`step` pixels per patch)."""
    if POSEMB_KEY not in params:
        # big_vision's fixed 2-D sin-cos embedding is computed, not stored: any grid fits it exactly, so the image
        # size is the config's, else ImageNet's usual 224 (override it freely).
        return dict(position_embedding="sincos2d", image_size=(grid[0] * step, grid[1] * step) if grid else (224, 224))
    out = {}
    rows = int(params[POSEMB_KEY].shape[1])
    prefix = int(options["class_token"]) + int(options["distillation_token"])
    if prefix and grid is None and _is_square(rows) and not _is_square(rows - prefix):
        out["no_embed_class"] = True  # g * g rows with a class token: timm's no_embed_class
    elif prefix and grid is not None and rows == grid[0] * grid[1]:
        out["no_embed_class"] = True
    tokens = rows - (0 if out.get("no_embed_class") else prefix)
    if grid is None:
        try:
            grid = infer_grid(tokens)
        except ValueError as err:
            raise CheckpointError(f"{source!r}: {err} The image size cannot be read from the checkpoint.") from err
    if grid[0] * grid[1] != tokens:
        raise CheckpointError(f"{source!r}: the patch grid {tuple(grid)} does not match {tokens} position rows.")
    out["image_size"] = (int(grid[0]) * step, int(grid[1]) * step)
    return out


def _family_options(params, class_token):
    """The ViT-family options the tensors show (LayerScale, registers, distillation, pre-norm, fc_norm, MAP)."""
    options = dict(
        patch_bias="embedding/bias" in params,
        distillation_token="dist" in params,
        num_registers=int(params["registers"].shape[1]) if "registers" in params else 0,
        pre_norm="Transformer/norm_pre/scale" in params,
        fc_norm="fc_norm/scale" in params,
        layer_scale=1e-5 if "Transformer/encoderblock_0/LayerScale_1/scale" in params else None,
    )
    if "MAPHead_0/probe" in params:
        options["pooling"] = "map"
    elif options["fc_norm"]:
        options["pooling"] = "gap"
    return options


def _is_square(rows):
    side = round(rows**0.5)
    return side * side == rows
