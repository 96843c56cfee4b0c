"""timm's hybrid layout (`timm/models/vision_transformer_hybrid.py`: a ResNetV2 as `patch_embed.backbone`) <-> the
original vit_jax stem keys; names and stage tables as timm 1.0 has them."""

import re

import numpy as np

from keras_vit.weights.checkpoint import conv_to_hwio, hwio_to_conv
from keras_vit.weights.loading import CheckpointError

BACKBONE = "patch_embed.backbone."
# ResNet stage depths -> the registered timm name whose `_resnetv2(layers)` they are (the width, depth and heads
# come from model_args, which timm's hybrid builders merge over their defaults).
ARCHITECTURES = {
    (): "vit_tiny_r_s16_p8_224",
    (2, 2, 2, 2): "vit_small_r26_s32_224",
    (3, 4, 9): "vit_base_r50_s16_224",
    (3, 4, 6, 3): "vit_large_r50_s32_224",
}
_NORMS = {"conv1": "gn1", "conv2": "gn2", "conv3": "gn3"}


def is_hybrid(state):
    return any(key.startswith(BACKBONE) for key in state)


def to_original(state, take, out):
    """Moves the backbone's tensors of `state` (popped with `take`) into `out` under the original keys."""

    def norm(src, dst):
        out[f"{dst}/scale"] = take(f"{src}.weight")
        out[f"{dst}/bias"] = take(f"{src}.bias")

    root = BACKBONE + ("stem." if f"{BACKBONE}stem.conv.weight" in state else "")
    out["conv_root/kernel"] = conv_to_hwio(take(f"{root}conv.weight"))
    norm(f"{root}norm", "gn_root")
    stages = sorted({int(m.group(1)) for k in state if (m := re.match(rf"{re.escape(BACKBONE)}stages\.(\d+)\.", k))})
    for s in stages:
        u = 0
        while f"{BACKBONE}stages.{s}.blocks.{u}.conv1.weight" in state:
            src, dst = f"{BACKBONE}stages.{s}.blocks.{u}", f"block{s + 1}/unit{u + 1}"
            for conv, gn in _NORMS.items():
                out[f"{dst}/{conv}/kernel"] = conv_to_hwio(take(f"{src}.{conv}.weight"))
                norm(f"{src}.norm{conv[-1]}", f"{dst}/{gn}")
            if f"{src}.downsample.conv.weight" in state:
                out[f"{dst}/conv_proj/kernel"] = conv_to_hwio(take(f"{src}.downsample.conv.weight"))
                norm(f"{src}.downsample.norm", f"{dst}/gn_proj")
            u += 1


def from_original(params, state):
    """Writes the stem of original-layout `params` into `state` under timm's hybrid names."""
    stem_only = "block1/unit1/conv1/kernel" not in params
    root = BACKBONE + ("" if stem_only else "stem.")

    def norm(src, dst):
        state[f"{dst}.weight"] = np.asarray(params[f"{src}/scale"])
        state[f"{dst}.bias"] = np.asarray(params[f"{src}/bias"])

    state[f"{root}conv.weight"] = hwio_to_conv(params["conv_root/kernel"])
    norm("gn_root", f"{root}norm")
    s = 0
    while f"block{s + 1}/unit1/conv1/kernel" in params:
        u = 0
        while f"block{s + 1}/unit{u + 1}/conv1/kernel" in params:
            src, dst = f"block{s + 1}/unit{u + 1}", f"{BACKBONE}stages.{s}.blocks.{u}"
            for conv, gn in _NORMS.items():
                state[f"{dst}.{conv}.weight"] = hwio_to_conv(params[f"{src}/{conv}/kernel"])
                norm(f"{src}/{gn}", f"{dst}.norm{conv[-1]}")
            if f"{src}/conv_proj/kernel" in params:
                state[f"{dst}.downsample.conv.weight"] = hwio_to_conv(params[f"{src}/conv_proj/kernel"])
                norm(f"{src}/gn_proj", f"{dst}.downsample.norm")
            u += 1
        s += 1


def architecture(config):
    """The timm name for a hybrid `config`; one line when timm registers no hybrid with its ResNet."""
    if config.resnet_width != 1:
        raise CheckpointError(
            f"timm's hybrids have a ResNet of width factor 1; this model's is {config.resnet_width}. Save it as 'npz'."
        )
    if config.resnet_layers not in ARCHITECTURES:
        known = ", ".join(f"{layers} ({name})" for layers, name in ARCHITECTURES.items())
        raise CheckpointError(
            f"timm registers no hybrid with ResNet stages {config.resnet_layers}; it has {known}. Save it as 'npz'."
        )
    return ARCHITECTURES[config.resnet_layers]


def first_conv(config):
    return f"{BACKBONE}{'conv' if not config.resnet_layers else 'stem.conv'}"
