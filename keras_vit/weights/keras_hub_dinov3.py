"""keras-hub `DINOV3Backbone` preset folders (`config.json`, `model.weights.h5`), read with h5py: no keras-hub needed.

Its variables are renamed to transformers' `DINOv3ViTModel` names (keras-hub's own converter maps one to the other),
so `transformers_families2.py` does the rest. A backbone preset states no input statistics: the model takes what the
backbone took (the contract's [-1, 1] is not assumed to be DINOv3's ImageNet normalisation).
"""

import os
import re

import numpy as np

from keras_vit.weights import transformers_families2 as families2
from keras_vit.weights.checkpoint import Checkpoint, conv_to_hwio, hwio_to_conv, leftover_error
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


# ----- writing a preset -----

_GROUP_NAMES = {"attention/query_dense": "q_proj", "attention/key_dense": "k_proj", "attention/value_dense": "v_proj",
                "attention/output_dense": "o_proj", "attention/dropout": "dropout", "attention": "attention",
                "drop_path": "drop_path", "layer_scale1": "layer_scale1", "layer_scale2": "layer_scale2",
                "mlp/gate_proj": "gate_proj", "mlp/up_proj": "up_proj", "mlp/down_proj": "down_proj", "mlp": "mlp",
                "norm1": "norm1", "norm2": "norm2"}  # fmt: skip


def backbone_config(hf):
    """The serialised `DINOV3Backbone` for a transformers DINOv3 config (keras-hub's converter's mapping)."""
    backbone = dict(
        name="dinov3_backbone", trainable=True,
        dtype={"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None},
        patch_size=hf["patch_size"], num_layers=hf["num_hidden_layers"], hidden_dim=hf["hidden_size"],
        num_heads=hf["num_attention_heads"], intermediate_dim=hf["intermediate_size"],
        num_register_tokens=hf["num_register_tokens"], use_mask_token=True,
        layer_scale_init_value=hf["layerscale_value"], hidden_activation=hf["hidden_act"],
        use_gated_mlp=hf["use_gated_mlp"], use_query_bias=hf["query_bias"], use_key_bias=hf["key_bias"],
        use_value_bias=hf["value_bias"], use_proj_bias=hf["proj_bias"], use_mlp_bias=hf["mlp_bias"],
        attention_dropout=0.0, drop_path_rate=0.0, layer_norm_eps=hf["layer_norm_eps"],
        image_shape=[hf["image_size"], hf["image_size"], hf["num_channels"]], rope_theta=hf["rope_theta"],
        apply_layernorm=False,
    )  # fmt: skip
    return {"module": "keras_hub.src.models.dinov3.dinov3_backbone", "class_name": "DINOV3Backbone",
            "config": backbone, "registered_name": "keras_hub>DINOV3Backbone"}  # fmt: skip


def from_transformers(state, num_layers):
    """A transformers DINOv3 state dict -> ({group: its `name` attribute}, {dataset path: array}) of keras-hub's
    `model.weights.h5`, the inverse of `to_transformers`."""
    groups = {"layers/input_layer/vars": "pixel_values", "layers/dinov3_rope_position_embedding/vars": "rope_embedding",
              f"{_EMBED}patch_embeddings/projection/vars": "projection", f"{_EMBED}patch_embeddings/vars":
              "patch_embeddings", f"{_EMBED}vars": "embeddings", "layers/dinov3_encoder/vars": "encoder",
              "layers/layer_normalization/vars": "layernorm", "vars": "dinov3_backbone"}  # fmt: skip
    data = {f"{_EMBED}patch_embeddings/projection/vars/0": conv_to_hwio(state["embeddings.patch_embeddings.weight"]),
            f"{_EMBED}patch_embeddings/projection/vars/1": state["embeddings.patch_embeddings.bias"],
            "layers/layer_normalization/vars/0": state["norm.weight"],
            "layers/layer_normalization/vars/1": state["norm.bias"]}  # fmt: skip
    names = ["embeddings.cls_token", "embeddings.mask_token"] + ["embeddings.register_tokens"] * (
        "embeddings.register_tokens" in state
    )
    for j, name in enumerate(names):
        data[f"{_EMBED}vars/{j}"] = state[name]
    for i in range(num_layers):
        block = f"{_ENCODER}dinov3_layer" + (f"_{i}" if i else "")
        groups[f"{block}/vars"] = f"layers_{i}"
        for src, name in _GROUP_NAMES.items():
            groups[f"{block}/{src}/vars"] = name
        for src, dst in _BLOCK.items():
            for j, end in enumerate(("weight", "bias")):
                value = state.get(f"layer.{i}.{dst}.{end}")
                if value is not None:
                    data[f"{block}/{src}/vars/{j}"] = value.T if end == "weight" and "norm" not in src else value
        for j in (1, 2):
            data[f"{block}/layer_scale{j}/vars/0"] = state[f"layer.{i}.layer_scale{j}.lambda1"]
    if not any("gate_proj" in k for k in data):
        for i in range(num_layers):
            groups.pop(f"{_ENCODER}dinov3_layer{f'_{i}' if i else ''}/mlp/gate_proj/vars")
    return groups, data


def write(folder, params, config):
    """Writes the preset `keras_hub.models.Backbone.from_preset(folder)` reads as a `DINOV3Backbone` (keras-hub
    0.32's `save_to_preset` layout: config.json, model.weights.h5, metadata.json)."""
    from keras_vit import files
    from keras_vit.weights.checkpoint import write_json
    from keras_vit.weights.keras_hub_h5 import write_h5, write_metadata

    families2.check_writable("dinov3_vit", config)
    if config.mlp_type == "gelu" and config.gelu != "exact":
        raise CheckpointError(
            f"keras-hub's DINOv3 MLP uses exact GELU; this model's is {config.gelu!r}. Save it as 'timm'."
        )
    hf = families2.hf_config("dinov3_vit", config)
    state = families2.from_original(params, "dinov3_vit", config)
    files.makedirs(folder)
    write_h5(os.path.join(folder, "model.weights.h5"), *from_transformers(state, config.num_layers))
    write_json(os.path.join(folder, "config.json"), backbone_config(hf))
    count = sum(int(np.prod(np.shape(v))) for k, v in state.items())
    write_metadata(folder, count, tasks=[])
    return folder
