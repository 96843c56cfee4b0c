"""keras-hub `DINOV3Backbone` preset folders (`config.json`, `model.weights.h5`), read with h5py: no keras-hub needed.

Its variables are renamed to transformers' `DINOv3ViTModel` names (keras-hub's own converter maps one to the other),
so `transformers_families2.py` does the rest. A backbone preset states no input statistics: the model takes what the
backbone took (the contract's [-1, 1] is not assumed to be DINOv3's ImageNet normalisation).
"""

import os
import re

import numpy as np

from keras_vit.weights import transformers_families2 as families2
from keras_vit.weights.checkpoint import Checkpoint, hwio_to_conv, leftover_error
from keras_vit.weights.loading import CheckpointError

_EMBED = "layers/dinov3_embedding/"
_ENCODER = "layers/dinov3_encoder/layers/"
# keras-hub layer path in a block -> transformers' name (Dense kernels are (in, out): transposed)
_BLOCK = {
    "norm1": "norm1", "norm2": "norm2", "attention/query_dense": "attention.q_proj",
    "attention/key_dense": "attention.k_proj", "attention/value_dense": "attention.v_proj",
    "attention/output_dense": "attention.o_proj", "mlp/gate_proj": "mlp.gate_proj", "mlp/up_proj": "mlp.up_proj",
    "mlp/down_proj": "mlp.down_proj",
}  # fmt: skip


def to_transformers(state, backbone, *, source):
    """keras-hub DINOv3 variables -> a transformers DINOv3ViTModel state dict; leftovers raise."""
    state = {k: np.asarray(v) for k, v in state.items() if k.startswith("layers/")}
    out = {}

    def take(key):
        if key not in state:
            raise CheckpointError(f"{os.fspath(source)!r} is not a keras-hub DINOv3 preset: {key!r} is missing.")
        return state.pop(key)

    out["embeddings.patch_embeddings.weight"] = hwio_to_conv(take(f"{_EMBED}patch_embeddings/projection/vars/0"))
    out["embeddings.patch_embeddings.bias"] = take(f"{_EMBED}patch_embeddings/projection/vars/1")
    # DINOV3Embedding.build's creation order: the class token, the mask token (if any), the registers (if any)
    names = ["embeddings.cls_token"] + ["embeddings.mask_token"] * bool(backbone.get("use_mask_token", True))
    names += ["embeddings.register_tokens"] * bool(backbone.get("num_register_tokens", 0))
    for j, name in enumerate(names):
        out[name] = take(f"{_EMBED}vars/{j}")
    blocks = sorted(
        {m.group(1) for k in state if (m := re.match(rf"{_ENCODER}(dinov3_layer(?:_\d+)?)/", k))},
        key=lambda name: int(name.rsplit("_", 1)[1]) if name[-1].isdigit() else 0,
    )
    for i, block in enumerate(blocks):
        for src, dst in _BLOCK.items():
            for j, end in enumerate(("weight", "bias")):
                key = f"{_ENCODER}{block}/{src}/vars/{j}"
                if key in state:
                    value = state.pop(key)
                    out[f"layer.{i}.{dst}.{end}"] = value.T if end == "weight" and "norm" not in src else value
        for j in (1, 2):
            out[f"layer.{i}.layer_scale{j}.lambda1"] = take(f"{_ENCODER}{block}/layer_scale{j}/vars/0")
    out["norm.weight"], out["norm.bias"] = (
        take("layers/layer_normalization/vars/0"),
        take("layers/layer_normalization/vars/1"),
    )
    if state:
        raise leftover_error(source, "keras-hub", state)
    return out


def transformers_config(backbone, source):
    """The `DINOv3ViTModel` config.json keras-hub's converter reads into this backbone config (`apply_layernorm`
    normalises its pyramid outputs only, not the backbone's output)."""
    height, width = backbone["image_shape"][:2]
    if height is None or height != width:
        raise CheckpointError(f"{os.fspath(source)!r}: image_shape {backbone['image_shape']}; keras-vit needs a size.")
    act = backbone.get("hidden_activation", "gelu")
    return dict(
        model_type="dinov3_vit", architectures=["DINOv3ViTModel"], image_size=height,
        patch_size=backbone["patch_size"], num_channels=backbone["image_shape"][2],
        hidden_size=backbone["hidden_dim"], num_hidden_layers=backbone["num_layers"],
        num_attention_heads=backbone["num_heads"], intermediate_size=backbone["intermediate_dim"],
        layerscale_value=backbone.get("layer_scale_init_value", 1.0),
        num_register_tokens=backbone.get("num_register_tokens", 0), hidden_act=act,
        use_gated_mlp=backbone.get("use_gated_mlp", False), query_bias=backbone.get("use_query_bias", True),
        key_bias=backbone.get("use_key_bias", True), value_bias=backbone.get("use_value_bias", True),
        proj_bias=backbone.get("use_proj_bias", True), mlp_bias=backbone.get("use_mlp_bias", True),
        layer_norm_eps=backbone.get("layer_norm_eps", 1e-5), rope_theta=backbone.get("rope_theta", 100.0),
    )  # fmt: skip


def read(folder, cfg, state):
    """A keras-hub DINOV3Backbone preset's config and variables -> `Checkpoint`."""
    backbone = cfg["config"]
    hf = transformers_config(backbone, folder)
    if hf["hidden_act"] not in ("gelu", "silu"):
        raise CheckpointError(f"{folder!r}: hidden_activation={hf['hidden_act']!r}; keras-vit reads gelu / silu.")
    params = families2.to_original(
        to_transformers(state, backbone, source=folder), "dinov3_vit", hf["num_attention_heads"], source=folder
    )
    options = families2.read_options(folder, hf, params)
    return Checkpoint(params=params, options=options, format="keras_hub", source=folder)
