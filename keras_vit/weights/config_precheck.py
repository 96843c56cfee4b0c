"""A checkpoint folder's config.json decided without Keras: an object of a known layout whose sizes are possible
and agree with what the safetensors header says the tensors are (`check_folder`).
"""

import json
import os
import re
import zipfile

from keras_vit.weights import content
from keras_vit.weights.errors import CheckpointError

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TIMM_WRAPPER_PREFIX = "timm_model."
_LAYOUTS = "timm ('architecture'), transformers ('model_type') or keras-hub ('registered_name' keras_hub>...)"
# Each layout's fields: (width, heads, depth, patch), as its config.json names them.
_TIMM = ("embed_dim", "num_heads", "depth", "patch_size")
_TRANSFORMERS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "patch_size")
_KERAS_HUB = ("hidden_dim", "num_heads", "num_layers", "patch_size")
_TIMM_BLOCK = re.compile(r"^blocks\.(\d+)\.")
_HF_LAYER = re.compile(r"^(?:(?P<prefix>[a-z_0-9]+)\.)?encoder\.layers?\.(?P<i>\d+)\.")
_HF_PATCH = re.compile(r"(?:^|\.)patch_embeddings?(?:\.projection)?\.weight$")


def check_folder(folder):
    """Raises `CheckpointError` (one line: the file, the field, what it holds, what would work) for a folder
    whose config.json no reader could take or that describes a model its tensors are not. Reads the JSON and the
    safetensors header only."""
    path = os.path.join(folder, CONFIG)
    if not os.path.isfile(path):
        return
    cfg = _read(path)
    if "architecture" in cfg:
        model_args = cfg.get("model_args") or {}
        if not isinstance(model_args, dict):
            raise _error(path, "model_args", model_args, "an object of timm's VisionTransformer arguments")
        _check(path, folder, model_args, _TIMM, "model_args.", _timm_tensors, None)
    elif "model_type" in cfg:
        vision = cfg.get("vision_config")
        if isinstance(vision, dict):  # a dual encoder: the image tower's fields, its tensors under vision_model.
            _check(path, folder, vision, _TRANSFORMERS, "vision_config.", _hf_tensors, "vision_model")
        else:
            _check(path, folder, cfg, _TRANSFORMERS, "", _hf_tensors, None)
    elif str(cfg.get("registered_name", "")).startswith("keras_hub>") or "keras_hub" in str(cfg.get("module", "")):
        inner = cfg.get("config")
        if not isinstance(inner, dict):
            raise _error(path, "config", inner, "an object of the backbone's arguments")
        _check(path, folder, inner, _KERAS_HUB, "config.", None, None)
    else:
        _check_unknown(path, folder, cfg)


def _read(path):
    try:
        with open(path, "rb") as f:
            cfg = json.loads(f.read().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(
            f"Cannot read {path!r} as JSON ({err}); the file is corrupt: restore it from where the checkpoint came."
        ) from None
    if not isinstance(cfg, dict):
        kind = {list: "list", str: "string", type(None): "null", bool: "boolean"}.get(type(cfg), "number")
        raise CheckpointError(
            f"{path!r} holds a JSON {kind} ({_short(cfg)}), not a config object: expected the "
            f"config of {_LAYOUTS}; restore it from where the checkpoint came."
        )
    return cfg


def _check_unknown(path, folder, cfg):
    """A config.json of no layout: the folder may still be one `.npz` checkpoint, but not one holding other arrays."""
    npz = [name for name in os.listdir(folder) if name.endswith(".npz")]
    if len(npz) == 1 and _holds_weights(os.path.join(folder, npz[0])):
        return
    keys = ", ".join(sorted(map(repr, cfg))[:6]) or "no keys"
    raise CheckpointError(
        f"{path!r} is no checkpoint config ({keys}): expected that of {_LAYOUTS}; restore it from where the "
        f"checkpoint came, or pass the weights file itself."
    )


def _holds_weights(path):
    try:
        with zipfile.ZipFile(path) as archive:
            return any("kernel" in name for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return True  # a broken .npz: the precheck of the file itself words it


def _check(path, folder, fields, names, prefix, tensors, tower):
    width_key, heads_key, depth_key, patch_key = names
    stated = {key: fields.get(key) for key in names}
    for key in (width_key, heads_key, depth_key):
        if stated[key] is not None and not _positive_int(stated[key]):
            raise _error(path, prefix + key, stated[key], "a positive integer")
    patch = stated[patch_key]
    sizes = patch if isinstance(patch, list | tuple) else [patch]
    if patch is not None and not (sizes and all(_positive_int(p) for p in sizes)):
        raise _error(path, prefix + patch_key, patch, "a positive integer (the patch side in pixels)")
    found = tensors(folder, tower) if tensors is not None else {}
    for key, what in ((width_key, "width"), (depth_key, "depth"), (patch_key, "patch")):
        if found.get(what) is not None and stated[key] is not None and found[what] != _first(stated[key]):
            raise CheckpointError(
                f"{path!r}: {prefix + key}={_short(stated[key])} does not describe the tensors beside it: "
                f"{WEIGHTS} holds {what} {found[what]} ({found['why'][what]}). Use the config.json that came with "
                f"these weights (or the weights of this config)."
            )
    width = stated[width_key] if stated[width_key] is not None else found.get("width")
    heads = stated[heads_key]
    if heads is not None and width is not None and width % heads:
        near = sorted(sorted((d for d in range(1, width + 1) if width % d == 0), key=lambda d: abs(d - heads))[:2])
        raise _error(
            path, prefix + heads_key, heads, f"a divisor of the width {width}, e.g. {' or '.join(map(str, near))}"
        )


def _first(value):
    return value[0] if isinstance(value, list | tuple) else value


def _positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _header(folder):
    path = os.path.join(folder, WEIGHTS)
    if not os.path.isfile(path):
        return None
    try:
        return content.safetensors_header(path)[0]
    except content.ContentError:
        return None  # the precheck of the file itself words it


def unwrap_timm(state):
    """A timm state dict saved by transformers' `TimmWrapper` classes (`model_type: timm_wrapper`: every tensor under
    its `timm_model.` attribute) with timm's own names; any other state dict as it is."""
    if state and all(k.startswith(TIMM_WRAPPER_PREFIX) for k in state):
        return {k[len(TIMM_WRAPPER_PREFIX) :]: v for k, v in state.items()}
    return state


def _timm_tensors(folder, tower):
    header = _header(folder)
    if header is None:
        return {}
    header = unwrap_timm(header)
    blocks = {int(m.group(1)) for m in map(_TIMM_BLOCK.match, header) if m}
    found = _sizes(header.get("patch_embed.proj.weight"), "patch_embed.proj.weight", blocks, "blocks.N")
    if any(name.startswith("patch_embed.backbone.") for name in header):  # a hybrid: cells of the backbone's map
        found.pop("patch", None)
    return found


def _hf_tensors(folder, tower):
    header = _header(folder)
    if header is None:
        return {}
    layers, patch = set(), None
    for name, info in header.items():
        match = _HF_LAYER.match(name)
        if match and match.group("prefix") in ((tower,) if tower else (None, "vit", "deit", "dinov2", "dinov3")):
            layers.add(int(match.group("i")))
        in_tower = tower is None or name.startswith(tower + ".")
        if in_tower and _HF_PATCH.search(name) and len(info.get("shape", ())) == 4:
            patch = (name, info)
    found = _sizes(patch[1] if patch else None, patch[0] if patch else "", layers, "encoder.layer.N")
    if any(".backbone." in name for name in header):  # a hybrid: its patches are cells of the backbone's map
        found.pop("patch", None)
    return found


def _sizes(conv, conv_name, blocks, block_name):
    """{width, depth, patch, why} of a 4-D (out, in, P, P) patch convolution and the block indices found."""
    found = {"why": {}}
    shape = (conv or {}).get("shape") or ()
    if len(shape) == 4 and shape[2] == shape[3]:
        found.update(width=shape[0], patch=shape[2])
        found["why"].update(width=f"{conv_name} is {list(shape)}", patch=f"{conv_name} is {list(shape)}")
    if blocks and blocks == set(range(len(blocks))):
        found["depth"] = len(blocks)
        found["why"]["depth"] = f"{block_name} for N = 0..{len(blocks) - 1}"
    return found


def _error(path, field, received, expected):
    return CheckpointError(f"{path!r}: {field}={_short(received)} is impossible; expected {expected}.")


def _short(value):
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
