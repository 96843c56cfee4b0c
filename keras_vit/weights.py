"""Loading the released `.npz` checkpoints (original vit_jax layout, or big_vision's) into a Keras ViT.

Loading is a table from checkpoint keys to the model's variables (`checkpoint_variables`): every tensor of the
checkpoint must find its variable and every variable its tensor, or nothing is loaded and the error lists
what is missing, unexpected, or of the wrong shape. Three differences are bridged on purpose:
the position embedding is interpolated when the patch grid differs, a head of another class count is skipped
(the zero-initialised head is kept, as when fine-tuning), and a `pre_logits` layer the model does not have is
dropped (the paper replaces it by the new head when fine-tuning).
"""

import dataclasses
import logging
import os
import re
import warnings
import zipfile
import zlib

import numpy as np

from keras_vit import files
from keras_vit.layers.position_embedding import RESIZE_METHODS, infer_grid, resize_position_embedding

logger = logging.getLogger("keras_vit")

POSEMB_KEY = "Transformer/posembed_input/pos_embedding"
# big_vision names -> original names, inside an encoder block.
_BIG_VISION_BLOCK = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or that does not fit the model."""


@dataclasses.dataclass
class LoadReport:
    """What `load_npz` did: keys copied, keys interpolated, keys skipped (with the reason)."""

    loaded: list
    resized: dict
    skipped: dict


def read_npz(path):
    """Reads every array of an `.npz` checkpoint (no pickles); a clear `CheckpointError` if it is unreadable."""
    path = os.fspath(path)
    if not files.exists(path):
        raise FileNotFoundError(f"Checkpoint not found: {path!r}")
    try:
        archive = files.load_numpy(path, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as err:
        raise _unreadable(path, err) from err
    if not hasattr(archive, "files"):  # np.load returns a bare array for an .npy file, whatever its name
        raise CheckpointError(
            f"{path!r} is an .npy file holding one array {tuple(archive.shape)}, not an .npz checkpoint of named "
            f"tensors. Pass the .npz checkpoint (e.g. ViT-B_16.npz), or save named arrays with np.savez."
        )
    try:
        with archive:
            return {key: archive[key] for key in archive.files}
    # zlib.error: a corrupt np.savez_compressed member, found only when that member is decompressed.
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError) as err:
        raise _unreadable(path, err) from err


def _unreadable(path, err):
    return CheckpointError(
        f"Cannot read {path!r} as an .npz checkpoint ({_error_name(err)}: {err}). The file is truncated, "
        f"corrupt or not an .npz; download it again or point to the right file."
    )


def _error_name(err):
    module = type(err).__module__
    return type(err).__name__ if module in ("builtins", "zipfile") else f"{module}.{type(err).__name__}"


def to_original_layout(params):
    """Returns the checkpoint in the original vit_jax key layout, converting big_vision's when found.

    big_vision differs by a `params/` prefix, a top-level `pos_embedding` added before the class token is
    prepended (so it has no class row: a zero row is the exact equivalent), `*_0`/`LayerNorm_1` block names,
    and optionally all blocks stacked along a leading axis under `Transformer/encoderblock/` (scan layout).
    """
    params = {re.sub(r"^(params/|opt/target/)", "", k): v for k, v in params.items()}
    out = {}
    for key, value in params.items():
        if key.startswith("Transformer/encoderblock/"):  # scan layout: unstack the layer axis
            rest = key[len("Transformer/encoderblock/") :]
            for i, layer_value in enumerate(value):
                out[f"Transformer/encoderblock_{i}/{rest}"] = layer_value
        else:
            out[key] = value
    renamed = {}
    for key, value in out.items():
        match = re.match(r"^(Transformer/encoderblock_\d+/)([^/]+)(/.*)$", key)
        if match and match.group(2) in _BIG_VISION_BLOCK:
            key = match.group(1) + _BIG_VISION_BLOCK[match.group(2)] + match.group(3)
        renamed[key] = value
    if "pos_embedding" in renamed:
        posemb = renamed.pop("pos_embedding")
        if "cls" in renamed:
            posemb = np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)
        renamed[POSEMB_KEY] = posemb
    return renamed


def checkpoint_variables(model):
    """{original checkpoint key: Keras variable} for a model built by `create_model`."""
    table = {}

    def add(key, variable):
        table[key] = variable

    def norm(prefix, layer):
        add(f"{prefix}/scale", layer.gamma)
        add(f"{prefix}/bias", layer.beta)

    names = {layer.name for layer in model.layers}
    if "conv_root" in names:
        add("conv_root/kernel", model.get_layer("conv_root").kernel)
        norm("gn_root", model.get_layer("gn_root"))
        stage = 1
        while f"block{stage}" in names:
            for unit in model.get_layer(f"block{stage}").units:
                prefix = f"block{stage}/{unit.name}"
                convs = ["1", "2", "3"] + (["_proj"] if unit.conv_proj is not None else [])
                for suffix in convs:
                    add(f"{prefix}/conv{suffix}/kernel", getattr(unit, f"conv{suffix}").kernel)
                    norm(f"{prefix}/gn{suffix}", getattr(unit, f"gn{suffix}"))
            stage += 1
    embedding = model.get_layer("embedding")
    add("embedding/kernel", embedding.kernel)
    add("embedding/bias", embedding.bias)
    if "cls" in names:
        add("cls", model.get_layer("cls").cls)
    add(POSEMB_KEY, model.get_layer("posembed_input").pos_embedding)
    i = 0
    while f"encoderblock_{i}" in names:
        block = model.get_layer(f"encoderblock_{i}")
        prefix = f"Transformer/encoderblock_{i}"
        norm(f"{prefix}/LayerNorm_0", block.norm_1)
        attention = block.attention
        for part in ("query", "key", "value", "out"):
            add(f"{prefix}/MultiHeadDotProductAttention_1/{part}/kernel", getattr(attention, f"{part}_kernel"))
            add(f"{prefix}/MultiHeadDotProductAttention_1/{part}/bias", getattr(attention, f"{part}_bias"))
        norm(f"{prefix}/LayerNorm_2", block.norm_2)
        for dense in (block.mlp.dense_0, block.mlp.dense_1):
            add(f"{prefix}/MlpBlock_3/{dense.name}/kernel", dense.kernel)
            add(f"{prefix}/MlpBlock_3/{dense.name}/bias", dense.bias)
        i += 1
    norm("Transformer/encoder_norm", model.get_layer("encoder_norm"))
    for name in ("pre_logits", "head"):
        if name in names:
            add(f"{name}/kernel", model.get_layer(name).kernel)
            add(f"{name}/bias", model.get_layer(name).bias)
    return table


def load_npz(model, path, *, resize_method="zoom", checkpoint_grid=None):
    """Loads a released ViT `.npz` checkpoint into a model made by `create_model`.

    Args:
        model: a `VisionTransformer` of the checkpoint's variant (any image size, any class count).
        path: the `.npz` file, in the original vit_jax layout or big_vision's (plain or scan).
        resize_method: how position embeddings are interpolated to the model's patch grid when it differs:
            "zoom" (default; the original code's corner-aligned linear interpolation), "bilinear", "bicubic".
        checkpoint_grid: the checkpoint's patch grid (gh, gw), needed only when it is not square.

    Returns:
        A `LoadReport`.

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: unreadable file, or a checkpoint that does not fit the model (missing, unexpected
            or mis-shaped tensors, listed in the message). Nothing is loaded then.
    """
    if resize_method not in RESIZE_METHODS:
        raise ValueError(f"Unknown resize_method {resize_method!r}; use one of {RESIZE_METHODS}.")
    params = to_original_layout(read_npz(path))
    table = checkpoint_variables(model)
    resized, skipped, problems = {}, {}, []

    for key in ("head/kernel", "head/bias"):
        if key in params and key in table and tuple(params[key].shape) != tuple(table[key].shape):
            skipped[key] = (
                f"checkpoint head {tuple(params[key].shape)} does not fit the model's {tuple(table[key].shape)}; "
                f"kept the zero-initialised head"
            )
        elif key in params and key not in table:
            skipped[key] = "the model has no head (num_classes=0)"
        elif key in table and key not in params:
            skipped[key] = "the checkpoint has no head; kept the zero-initialised head"
    for key in ("pre_logits/kernel", "pre_logits/bias"):
        if key in params and key not in table:
            skipped[key] = "the model has no pre_logits layer (representation_size=None); dropped, as for fine-tuning"
    if "cls" in params and "cls" not in table:
        problems.append("the checkpoint has a class token but the model was built with class_token=False")
    if "cls" in table and "cls" not in params:
        problems.append(
            "the model has a class token but the checkpoint has none: build it with class_token=False, pooling='gap'"
        )

    depth = {
        name: len({k.split("/")[1] for k in keys if k.startswith("Transformer/encoderblock_")})
        for name, keys in (("checkpoint", params), ("model", table))
    }
    if depth["checkpoint"] != depth["model"]:
        problems.append(f"the checkpoint has {depth['checkpoint']} encoder blocks, the model {depth['model']}")

    if POSEMB_KEY in params and POSEMB_KEY in table:
        have, want = params[POSEMB_KEY], table[POSEMB_KEY]
        if tuple(have.shape) != tuple(want.shape) and have.shape[-1] == want.shape[-1]:
            prefix = 1 if "cls" in params else 0
            layer = model.get_layer("posembed_input")
            old_grid = tuple(checkpoint_grid) if checkpoint_grid else infer_grid(have.shape[1] - prefix)
            params = dict(params)
            params[POSEMB_KEY] = resize_position_embedding(
                have, layer.grid_size, old_grid=old_grid, num_prefix_tokens=prefix, method=resize_method
            )
            resized[POSEMB_KEY] = f"grid {old_grid} -> {layer.grid_size} ({resize_method})"

    missing = sorted(k for k in table if k not in params and k not in skipped)
    unexpected = sorted(k for k in params if k not in table and k not in skipped)
    mismatched = [
        f"{k}: checkpoint {tuple(params[k].shape)} vs model {tuple(table[k].shape)}"
        for k in sorted(table)
        if k in params and k not in skipped and tuple(params[k].shape) != tuple(table[k].shape)
    ]
    if missing or unexpected or mismatched or problems:
        raise CheckpointError(_mismatch_message(path, model, missing, unexpected, mismatched, problems))

    loaded = []
    for key, variable in table.items():
        if key in skipped:
            continue
        variable.assign(np.asarray(params[key]).astype(variable.dtype))
        loaded.append(key)
    for key, reason in resized.items():
        logger.info("load_npz: resized %s: %s", key, reason)
    for key, reason in skipped.items():
        if key.endswith("/kernel"):
            warnings.warn(f"load_npz: skipped {key.rsplit('/', 1)[0]}: {reason}.", stacklevel=2)
    return LoadReport(loaded=loaded, resized=resized, skipped=skipped)


def _mismatch_message(path, model, missing, unexpected, mismatched, problems):
    def listing(title, items, limit=12):
        if not items:
            return []
        more = [f"    ... and {len(items) - limit} more"] if len(items) > limit else []
        return [f"  {title} ({len(items)}):"] + [f"    {item}" for item in items[:limit]] + more

    config = getattr(model, "config", None)
    shape = (
        f"hidden_size={config.hidden_size}, num_layers={config.num_layers}, patch_size={config.patch_size}"
        if config is not None
        else model.name
    )
    lines = [f"Checkpoint {os.fspath(path)!r} does not fit the model ({shape}); nothing was loaded."]
    lines += [f"  {p}" for p in problems]
    lines += listing("missing from the checkpoint", missing)
    lines += listing("unexpected in the checkpoint", unexpected)
    lines += listing("shape mismatches", mismatched)
    lines.append(
        "  Is it a checkpoint of another variant? Build the model with the checkpoint's variant "
        "(e.g. create_model('B/16') for ViT-B_16.npz)."
    )
    return "\n".join(lines)
