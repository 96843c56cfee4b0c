"""keras-hub ViT preset folders (`config.json`, `model.weights.h5`, ...), read and written with h5py: no keras-hub
needed."""

import os
import re

import numpy as np

from keras_vit import files
from keras_vit.weights import keras_hub_dinov3
from keras_vit.weights.checkpoint import (
    CONTRACT_MEAN,
    CONTRACT_STD,
    Checkpoint,
    leftover_error,
    read_json,
    write_json,
)
from keras_vit.weights.config_inference import infer_options
from keras_vit.weights.keras_hub_h5 import read_h5, write_h5, write_metadata
from keras_vit.weights.loading import POSEMB_KEY, CheckpointError

ATT = "MultiHeadDotProductAttention_1"
_BLOCK = {
    "layer_norm_1": ("LayerNorm_0", ("scale", "bias")),
    "mha/query_dense": (f"{ATT}/query", ("kernel", "bias")),
    "mha/key_dense": (f"{ATT}/key", ("kernel", "bias")),
    "mha/value_dense": (f"{ATT}/value", ("kernel", "bias")),
    "mha/output_dense": (f"{ATT}/out", ("kernel", "bias")),
    "layer_norm_2": ("LayerNorm_2", ("scale", "bias")),
    "mlp/dense_1": ("MlpBlock_3/Dense_0", ("kernel", "bias")),
    "mlp/dense_2": ("MlpBlock_3/Dense_1", ("kernel", "bias")),
}


def is_keras_hub_folder(folder):
    path = os.path.join(folder, "config.json")
    if not (files.exists(path) and files.exists(os.path.join(folder, "model.weights.h5"))):
        return False
    cfg = read_json(path)
    return str(cfg.get("registered_name", "")).startswith("keras_hub>") or "keras_hub" in str(cfg.get("module", ""))


def read(folder):
    """A keras-hub ViT preset folder -> `Checkpoint`."""
    cfg = read_json(os.path.join(folder, "config.json"))
    if cfg.get("class_name") == "DINOV3Backbone":
        return keras_hub_dinov3.read(folder, cfg, read_h5(os.path.join(folder, "model.weights.h5")))
    if cfg.get("class_name") != "ViTBackbone":
        raise CheckpointError(
            f"{folder!r} is a keras-hub {cfg.get('class_name')!r} preset; keras-vit reads ViTBackbone presets only."
        )
    backbone = cfg["config"]
    if not backbone.get("use_mlp_bias", True):
        raise CheckpointError(f"{folder!r}: use_mlp_bias=False; keras-vit's MLP has biases.")
    state = read_h5(os.path.join(folder, "model.weights.h5"))
    params = to_original(state, source=folder)
    task = {}
    if files.exists(os.path.join(folder, "task.json")):
        task = read_json(os.path.join(folder, "task.json")).get("config", {})
        if task.get("intermediate_dim") or task.get("activation") not in (None, "linear"):
            raise CheckpointError(
                f"{folder!r}: the classifier has intermediate_dim={task.get('intermediate_dim')} and "
                f"activation={task.get('activation')!r}; keras-vit reads keras-hub heads without them."
            )
        if task.get("pooling", "token") not in ("token", "first"):
            raise CheckpointError(f"{folder!r}: pooling={task['pooling']!r}; keras-vit reads token pooling only.")
        if files.exists(os.path.join(folder, "task.weights.h5")):
            head = read_h5(os.path.join(folder, "task.weights.h5"))
            dense = sorted(k for k in head if re.fullmatch(r"layers/dense(_\d+)?/vars/0", k))
            if len(dense) != 1:
                raise CheckpointError(f"{folder!r}: task.weights.h5 has {len(dense)} Dense layers; expected one head.")
            params["head/kernel"] = head[dense[0]]
            params["head/bias"] = head[dense[0].replace("vars/0", "vars/1")]
    height, width = backbone["image_shape"][:2]
    patch = backbone["patch_size"]
    patch = (patch, patch) if isinstance(patch, int) else tuple(patch)
    options = infer_options(params, source=folder, grid=(height // patch[0], width // patch[1]))
    options.update(gelu="exact", layer_norm_epsilon=float(backbone.get("layer_norm_epsilon", 1e-6)))
    mean, std = _normalisation(folder)
    return Checkpoint(params=params, options=options, mean=mean, std=std, format="keras_hub", source=folder)


def to_original(state, *, source):
    """keras-hub ViT backbone variables -> original-layout params; leftovers raise."""
    state = {k: v for k, v in state.items() if k.startswith("layers/")}  # not the optimizer's
    out = {}
    embed = _one(state, r"layers/[^/]*patching_and_embedding[^/]*/", source)
    enc = _one(state, r"layers/[^/]*encoder[^/]*/", source)

    def take(key, default=None):
        if key in state:
            return np.asarray(state.pop(key))
        if default is not None:
            return default
        raise CheckpointError(f"{os.fspath(source)!r} is not a keras-hub ViT: variable {key!r} is missing.")

    kernel = take(f"{embed}patch_embedding/vars/0")
    out["embedding/kernel"] = kernel
    out["embedding/bias"] = take(f"{embed}patch_embedding/vars/1", np.zeros(kernel.shape[-1], kernel.dtype))
    if f"{embed}vars/0" in state:
        out["cls"] = take(f"{embed}vars/0")
    out[POSEMB_KEY] = take(f"{embed}position_embedding/vars/0")[None]
    blocks = sorted(
        {m.group(1) for k in state if (m := re.match(rf"{re.escape(enc)}encoder_layers/([^/]+)/", k))},
        key=lambda name: int(re.search(r"_(\d+)$", name).group(1)) if re.search(r"_(\d+)$", name) else 0,
    )
    for i, block in enumerate(blocks):
        for src, (dst, names) in _BLOCK.items():
            value = take(f"{enc}encoder_layers/{block}/{src}/vars/0")
            out[f"Transformer/encoderblock_{i}/{dst}/{names[0]}"] = value
            zeros = np.zeros(value.shape[1:] if names[0] == "kernel" and "output" not in src else value.shape[-1:])
            out[f"Transformer/encoderblock_{i}/{dst}/{names[1]}"] = take(
                f"{enc}encoder_layers/{block}/{src}/vars/1", zeros.astype(value.dtype)
            )
    out["Transformer/encoder_norm/scale"] = take(f"{enc}layer_norm/vars/0")
    out["Transformer/encoder_norm/bias"] = take(f"{enc}layer_norm/vars/1")
    if state:
        raise leftover_error(source, "keras-hub", state)
    return out


def _one(state, pattern, source):
    prefixes = {m.group(0) for k in state if (m := re.match(pattern, k))}
    if len(prefixes) != 1:
        raise CheckpointError(
            f"{os.fspath(source)!r} is not a keras-hub ViT: expected one layer matching {pattern!r}, "
            f"found {sorted(prefixes)}."
        )
    return prefixes.pop()


def _normalisation(folder):
    """mean/std on 0..1 pixels from the preset's image converter (x * scale + offset, then (x - mean) / std)."""
    path = os.path.join(folder, "preprocessor.json")
    if not files.exists(path):
        return CONTRACT_MEAN, CONTRACT_STD
    converter = _find(read_json(path), "norm_mean")
    if converter is None:
        return CONTRACT_MEAN, CONTRACT_STD
    scale = np.broadcast_to(np.asarray(converter.get("scale") or 1.0, np.float64), (3,))
    offset = np.broadcast_to(np.asarray(converter.get("offset") or 0.0, np.float64), (3,))
    mean = np.broadcast_to(np.asarray(converter.get("norm_mean") or 0.0, np.float64), (3,))
    std = np.broadcast_to(np.asarray(converter.get("norm_std") or 1.0, np.float64), (3,))
    # p in 0..255: ((p * scale + offset) - mean) / std == (p / 255 - m01) / s01 with:
    return tuple((mean - offset) / (255 * scale)), tuple(std / (255 * scale))


def _find(tree, key):
    if isinstance(tree, dict):
        if key in tree:
            return tree
        tree = list(tree.values())
    if isinstance(tree, list):
        for item in tree:
            found = _find(item, key)
            if found is not None:
                return found
    return None


# ----- writing a preset -----

_BLOCK_NAMES = {
    "layer_norm_1": "ln_1",
    "layer_norm_2": "ln_2",
    "mha/query_dense": "query",
    "mha/key_dense": "key",
    "mha/value_dense": "value",
    "mha/output_dense": "attention_output",
    "mlp/dense_1": "dense_1",
    "mlp/dense_2": "dense_2",
}
# Variable-free layers still get a group with their name: the tree keras saves mirrors the model's layers.
_EMPTY_IN_BLOCK = {"dropout": "dropout", "mha/_dropout_layer": "dropout", "mha/_softmax": "softmax",
                   "mha": "mha", "mlp/dropout": "dropout", "mlp": "mlp"}  # fmt: skip


def write(folder, params, config, class_names=None):
    """Writes a keras-hub preset folder (`ViTBackbone`, plus `ViTImageClassifier` task files with a head) in the
    layout `keras_hub.models.ViTImageClassifier.from_preset(folder)` reads (keras-hub 0.32's `save_to_preset`)."""
    import warnings

    if getattr(config, "rope", None) == "dinov3":  # keras-hub's DINOV3Backbone
        return keras_hub_dinov3.write(folder, params, config)
    _check_writable(config)
    if config.gelu != "exact":
        warnings.warn(
            "keras-hub's ViT uses exact GELU; this model uses the tanh approximation, so keras-hub's outputs will "
            "differ slightly (about 3e-4 on ViT-B/16 logits).",
            stacklevel=3,
        )
    backbone = _backbone_config(config)
    files.makedirs(folder)
    write_h5(os.path.join(folder, "model.weights.h5"), *_backbone_tree(params, config))
    write_json(os.path.join(folder, "config.json"), backbone)
    count = sum(int(np.prod(v.shape)) for k, v in params.items() if not k.startswith("head/"))  # the backbone's
    tasks = _write_task(folder, params, config, backbone) if config.num_classes else []
    write_metadata(folder, count, tasks)
    return folder


def _check_writable(config):
    """One line for a model keras-hub's `ViTBackbone` cannot hold."""
    from keras_vit.models.configs import FAMILY_DEFAULTS

    if config.resnet_layers is not None or not config.class_token or config.pooling != "token":
        raise CheckpointError("save_pretrained(format='keras_hub') writes plain class-token ViTs only; use 'npz'.")
    family = {k: getattr(config, k) for k, v in FAMILY_DEFAULTS.items() if getattr(config, k) != v}
    if config.gelu == "quick":
        family["gelu"] = "quick"
    if family:
        options = ", ".join(f"{k}={v!r}" for k, v in family.items())
        raise CheckpointError(
            f"keras-hub's ViT has none of {options}; save this model as 'timm', 'transformers' or 'npz'."
        )
    if config.representation_size:
        raise CheckpointError("keras-hub's ViT classifier has no tanh pre_logits layer; save this model as 'npz'.")


def _backbone_config(config):
    """`config.json`: the serialised `ViTBackbone` (float32, no dropout, biases everywhere)."""
    height, width = config.image_size
    backbone = dict(
        name="vi_t_backbone", trainable=True,
        dtype={"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None},
        image_shape=[height, width, config.channels], patch_size=[config.patch_size, config.patch_size],
        num_layers=config.num_layers, num_heads=config.num_heads, hidden_dim=config.hidden_size,
        mlp_dim=config.mlp_dim, dropout_rate=0.0, attention_dropout=0.0,
        layer_norm_epsilon=config.layer_norm_epsilon, use_mha_bias=True, use_mlp_bias=True, use_class_token=True,
        use_patch_bias=True,
    )  # fmt: skip
    return {"module": "keras_hub.src.models.vit.vit_backbone", "class_name": "ViTBackbone", "config": backbone,
            "registered_name": "keras_hub>ViTBackbone"}  # fmt: skip


def _write_task(folder, params, config, backbone):
    """`task.json` and `task.weights.h5` of a `ViTImageClassifier` with the model's head; its task names."""
    task = {"module": "keras_hub.src.models.vit.vit_image_classifier", "class_name": "ViTImageClassifier",
            "config": {"backbone": backbone, "preprocessor": None, "name": "vi_t_image_classifier",
                       "num_classes": config.num_classes, "pooling": "token", "activation": None,
                       "dropout": 0.0, "intermediate_dim": None},
            "registered_name": "keras_hub>ViTImageClassifier"}  # fmt: skip
    groups = {"layers/dense/vars": "predictions", "layers/dropout/vars": "output_dropout",
              "optimizer/vars": "adam", "vars": "vi_t_image_classifier"}  # fmt: skip
    # A freshly compiled task's optimizer state (iterations 0, keras-hub's default learning rate 5e-5), which
    # keras-hub saves with every task and expects back.
    data = {"layers/dense/vars/0": params["head/kernel"], "layers/dense/vars/1": params["head/bias"],
            "optimizer/vars/0": np.array(0, np.int64), "optimizer/vars/1": np.array(5e-5, np.float32)}  # fmt: skip
    write_h5(os.path.join(folder, "task.weights.h5"), groups, data)
    write_json(os.path.join(folder, "task.json"), task)
    return ["ImageClassifier"]


def _backbone_tree(params, config):
    """({group: its `name` attribute}, {dataset path: array}) of a ViTBackbone's `model.weights.h5`."""
    enc, emb = "layers/vi_t_encoder", "layers/vi_t_patching_and_embedding"
    groups = {"layers/input_layer/vars": "images", f"{enc}/dropout/vars": "dropout", f"{enc}/layer_norm/vars": "ln",
              f"{enc}/vars": "vit_encoder", f"{emb}/patch_embedding/vars": "patch_embedding",
              f"{emb}/position_embedding/vars": "position_embedding", f"{emb}/vars": "vit_patching_and_embedding",
              "vars": "vi_t_backbone"}  # fmt: skip
    data = {
        f"{emb}/patch_embedding/vars/0": params["embedding/kernel"],
        f"{emb}/patch_embedding/vars/1": params["embedding/bias"],
        f"{emb}/position_embedding/vars/0": np.asarray(params[POSEMB_KEY])[0],
        f"{emb}/vars/0": params["cls"],
        f"{enc}/layer_norm/vars/0": params["Transformer/encoder_norm/scale"],
        f"{enc}/layer_norm/vars/1": params["Transformer/encoder_norm/bias"],
    }
    for i in range(config.num_layers):
        block = f"{enc}/encoder_layers/vi_t_encoder_block" + (f"_{i}" if i else "")
        groups[f"{block}/vars"] = f"transformer_block_{i + 1}"
        for src, name in _EMPTY_IN_BLOCK.items():
            groups[f"{block}/{src}/vars"] = name
        # Keras' own numbering of the auto-named layers inside MultiHeadAttention (loading ignores these names).
        suffix = f"_{i}" if i else ""
        groups[f"{block}/mha/_dropout_layer/vars"], groups[f"{block}/mha/_softmax/vars"] = (
            f"dropout{suffix}",
            f"softmax{suffix}",
        )
        for src, name in _BLOCK_NAMES.items():
            groups[f"{block}/{src}/vars"] = name
            dst, (first, second) = _BLOCK[src]
            data[f"{block}/{src}/vars/0"] = params[f"Transformer/encoderblock_{i}/{dst}/{first}"]
            data[f"{block}/{src}/vars/1"] = params[f"Transformer/encoderblock_{i}/{dst}/{second}"]
    return groups, data
