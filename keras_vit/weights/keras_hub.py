"""keras-hub ViT preset folders (`config.json`, `model.weights.h5`, `metadata.json`, `task.json`,
`task.weights.h5`), read with h5py: no keras-hub needed.

A Keras 3 `.weights.h5` file stores each layer's variables under the path of attribute names from the model
down (`layers/vi_t_encoder/encoder_layers/vi_t_encoder_block_1/mha/query_dense/vars/0`), numbered in creation
order. keras-hub's kernels already have the original layout ((D, H, Dh) attention kernels, HWIO patches); the
position embedding is (N + 1, D) without the batch axis and the class token lives on the embedding layer itself.
"""

import os
import re

import numpy as np

from keras_vit import files
from keras_vit.weights.checkpoint import CONTRACT_MEAN, CONTRACT_STD, Checkpoint, leftover_error, read_json
from keras_vit.weights.config_inference import infer_options
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
    if cfg.get("class_name") != "ViTBackbone":
        raise CheckpointError(
            f"{folder!r} is a keras-hub {cfg.get('class_name')!r} preset; keras-vit reads ViTBackbone presets only."
        )
    backbone = cfg["config"]
    if not backbone.get("use_mlp_bias", True):
        raise CheckpointError(f"{folder!r}: use_mlp_bias=False; keras-vit's MLP has biases.")
    state = _read_h5(os.path.join(folder, "model.weights.h5"))
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
            head = _read_h5(os.path.join(folder, "task.weights.h5"))
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


def _read_h5(path):
    """{variable path: array} of a Keras 3 `.weights.h5` file."""
    import h5py

    out = {}
    try:
        with h5py.File(files.absolute(path), "r") as f:
            f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    except OSError as err:
        message = f"Cannot read {path!r} as a Keras weights file ({err}); it is truncated or corrupt."
        raise CheckpointError(message) from err
    return out


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
