"""The one table every weight format loads through: original vit_jax checkpoint key -> the model's variable; all or
nothing, with a new head, an interpolated position embedding or a dropped `pre_logits` bridged on purpose."""

import dataclasses
import logging
import mmap
import os
import warnings

import keras
import numpy as np

from keras_vit.layers.position_embedding import RESIZE_METHODS, infer_grid, resize_position_embedding
from keras_vit.weights.errors import CheckpointError

logger = logging.getLogger("keras_vit")

POSEMB_KEY = "Transformer/posembed_input/pos_embedding"


@dataclasses.dataclass
class LoadReport:
    """What `load_npz` did: keys copied, keys interpolated, keys skipped (with the reason)."""

    loaded: list
    resized: dict
    skipped: dict


def checkpoint_variables(model):
    """{original checkpoint key: Keras variable} for a model built by `create_model`."""
    table = {}

    def add(key, variable):
        table[key] = variable

    def norm(prefix, layer):
        add(f"{prefix}/scale", layer.gamma)
        if getattr(layer, "beta", None) is not None:  # RMSNorm has none
            add(f"{prefix}/bias", layer.beta)

    names = {layer.name for layer in model.layers}
    if "conv_root" in names:
        _resnet_variables(model, names, add, norm)
    embedding = model.get_layer("embedding")
    add("embedding/kernel", embedding.kernel)
    if embedding.bias is not None:
        add("embedding/bias", embedding.bias)
    for name, key in (("cls", "cls"), ("dist", "dist")):
        if name in names:
            add(key, model.get_layer(name).cls)
    if "registers" in names:
        add("registers", model.get_layer("registers").tokens)
    if "patch_norm" in names:
        norm("patch_norm", model.get_layer("patch_norm"))
    if "posembed_input" in names:  # none with rotary embeddings alone (DINOv3)
        add(POSEMB_KEY, model.get_layer("posembed_input").pos_embedding)
    if "norm_pre" in names:
        norm("Transformer/norm_pre", model.get_layer("norm_pre"))
    i = 0
    while f"encoderblock_{i}" in names:
        _encoder_block_variables(model.get_layer(f"encoderblock_{i}"), f"Transformer/encoderblock_{i}", add, norm)
        i += 1
    for name, key in (("encoder_norm", "Transformer/encoder_norm"), ("fc_norm", "fc_norm")):
        if name in names:
            norm(key, model.get_layer(name))
    if "MAPHead_0" in names:
        _map_head_variables(model.get_layer("MAPHead_0"), add, norm)
    for name in ("pre_logits", "head", "head_dist"):
        if name in names:
            add(f"{name}/kernel", model.get_layer(name).kernel)
            add(f"{name}/bias", model.get_layer(name).bias)
    return table


def _resnet_variables(model, names, add, norm):
    """A hybrid's stem: `conv_root`, `gn_root`, then every unit of `block1`, `block2`, ... in order."""
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


def _encoder_block_variables(block, prefix, add, norm):
    norm(f"{prefix}/LayerNorm_0", block.norm_1)
    attention = block.attention
    for part in ("query", "key", "value", "out"):
        add(f"{prefix}/MultiHeadDotProductAttention_1/{part}/kernel", getattr(attention, f"{part}_kernel"))
        if getattr(attention, f"{part}_bias") is not None:  # RotaryAttention's bias flags
            add(f"{prefix}/MultiHeadDotProductAttention_1/{part}/bias", getattr(attention, f"{part}_bias"))
    if getattr(attention, "norm", None) is not None:
        norm(f"{prefix}/MultiHeadDotProductAttention_1/norm", attention.norm)
    norm(f"{prefix}/LayerNorm_2", block.norm_2)
    mlp = block.mlp
    denses = (mlp.gate, mlp.up, mlp.dense_1) if hasattr(mlp, "gate") else (mlp.dense_0, mlp.dense_1)
    for dense in denses:
        add(f"{prefix}/MlpBlock_3/{dense.name}/kernel", dense.kernel)
        if dense.bias is not None:
            add(f"{prefix}/MlpBlock_3/{dense.name}/bias", dense.bias)
    if getattr(mlp, "norm", None) is not None:
        norm(f"{prefix}/MlpBlock_3/norm", mlp.norm)
    for scale in (block.ls_1, block.ls_2):
        if scale is not None:
            add(f"{prefix}/{scale.name}/scale", scale.scale)


def _map_head_variables(head, add, norm):
    add("MAPHead_0/probe", head.probe)
    for part in ("query", "key", "value", "out"):
        for kind in ("kernel", "bias"):
            add(f"MAPHead_0/MultiHeadDotProductAttention_0/{part}/{kind}", getattr(head.attention, f"{part}_{kind}"))
    norm("MAPHead_0/LayerNorm_0", head.norm)
    for dense in (head.mlp.dense_0, head.mlp.dense_1):
        add(f"MAPHead_0/MlpBlock_0/{dense.name}/kernel", dense.kernel)
        add(f"MAPHead_0/MlpBlock_0/{dense.name}/bias", dense.bias)


def _checkpoint_prefix_rows(params, table, layer, posemb, checkpoint_grid):
    """Rows of the checkpoint's position table before its patch rows: what resizing must leave as they are."""
    if checkpoint_grid is not None and posemb.shape[1] > checkpoint_grid[0] * checkpoint_grid[1]:
        return int(posemb.shape[1] - checkpoint_grid[0] * checkpoint_grid[1])
    if checkpoint_grid is not None and posemb.shape[1] == checkpoint_grid[0] * checkpoint_grid[1]:
        return 0
    if layer.num_prefix_tokens == 0 and ("cls" in params) == ("cls" in table):
        return 0  # no class token, or no_embed_class
    return int("cls" in params) + int("dist" in params)


def load_params(
    model, params, *, source, resize_method="zoom", checkpoint_grid=None, caller="load_npz", new_head=False
):
    """Loads a checkpoint already in the original vit_jax key layout into a model made by `create_model`.

    Every weight format (`.npz`, timm, transformers, keras-hub) is converted to that layout first, so this one
    table decides for all of them what fits: the position embedding is interpolated when the patch grid differs,
    a head of another class count is skipped, a `pre_logits` layer the model lacks is dropped, and anything else
    that does not fit raises a `CheckpointError` listing it (nothing is loaded then).

    Args:
        model: a `VisionTransformer` of the checkpoint's variant (any image size, any class count).
        params: {original checkpoint key: array}.
        source: what the checkpoint was read from (a path, a URL, a Hub id), for messages.
        resize_method: "zoom" (the original code's corner-aligned linear interpolation), "bilinear", "bicubic".
        checkpoint_grid: the checkpoint's patch grid (gh, gw), needed only when it is not square.
        caller: the public function's name, for warnings.
        new_head: the caller replaces the head (a fine-tuning run): the checkpoint's head is not loaded, and
            not fitting is no surprise, so it is reported in `LoadReport.skipped` without a warning.

    Returns:
        A `LoadReport`.
    """
    if resize_method not in RESIZE_METHODS:
        raise ValueError(f"Unknown resize_method {resize_method!r}; use one of {RESIZE_METHODS}.")
    table = checkpoint_variables(model)
    asked = {"head/kernel", "head/bias"} & set(table) if new_head else set()
    skipped = _skipped(model, params, table, asked)
    problems = _structure_problems(params, table)
    params, resized = _resized_position_embedding(model, params, table, checkpoint_grid, resize_method)
    _check_fit(model, params, table, skipped, problems, source)

    loaded = []
    for key, variable in table.items():
        if key in skipped:
            continue
        variable.assign(_as_tensor(params[key], variable.dtype))
        _release(params[key])
        loaded.append(key)
    for key, reason in resized.items():
        logger.info("%s: resized %s: %s", caller, key, reason)
    for key, reason in skipped.items():
        if key.endswith("/kernel") and key not in asked:
            warnings.warn(f"{caller}: skipped {key.rsplit('/', 1)[0]}: {reason}.", stacklevel=3)
    return LoadReport(loaded=loaded, resized=resized, skipped=skipped)


def _skipped(model, params, table, asked):
    """{key: why} for the tensors bridged on purpose: a head that does not fit (or was not wanted), big_vision's
    computed sin-cos table, a `pre_logits` layer the model lacks."""
    skipped = {}
    for key in ("head/kernel", "head/bias", "head_dist/kernel", "head_dist/bias"):
        if key in asked:
            skipped[key] = "a new head was asked for (new_head=True); kept the model's own"
        elif key in params and key in table and tuple(params[key].shape) != tuple(table[key].shape):
            skipped[key] = (
                f"checkpoint head {tuple(params[key].shape)} does not fit the model's {tuple(table[key].shape)}; "
                f"kept the zero-initialised head"
            )
        elif key in params and key not in table:
            skipped[key] = "the model has no head (num_classes=0)"
        elif key in table and key not in params:
            skipped[key] = "the checkpoint has no head; kept the zero-initialised head"
    names = {layer.name for layer in model.layers}
    if POSEMB_KEY not in params and "posembed_input" in names and model.get_layer("posembed_input").kind == "sincos2d":
        skipped[POSEMB_KEY] = "a fixed sin-cos table, computed by the model (big_vision stores none)"
    for key in ("pre_logits/kernel", "pre_logits/bias"):
        if key in params and key not in table:
            skipped[key] = "the model has no pre_logits layer (representation_size=None); dropped, as for fine-tuning"
    return skipped


def _structure_problems(params, table):
    """What no key-by-key listing says plainly: a class token on one side only, another number of blocks."""
    problems = []
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
    return problems


def _resized_position_embedding(model, params, table, checkpoint_grid, resize_method):
    """(params, {key: what was resized}): the position table interpolated to the model's grid when it differs;
    `params` is copied first, never changed."""
    resized = {}
    if POSEMB_KEY in params and POSEMB_KEY in table:
        have, want = params[POSEMB_KEY], table[POSEMB_KEY]
        if tuple(have.shape) != tuple(want.shape) and have.shape[-1] == want.shape[-1]:
            layer = model.get_layer("posembed_input")
            prefix = _checkpoint_prefix_rows(params, table, layer, have, checkpoint_grid)
            old_grid = tuple(checkpoint_grid) if checkpoint_grid else infer_grid(have.shape[1] - prefix)
            params = dict(params)
            params[POSEMB_KEY] = resize_position_embedding(
                have, layer.grid_size, old_grid=old_grid, num_prefix_tokens=prefix, method=resize_method
            )
            resized[POSEMB_KEY] = f"grid {old_grid} -> {layer.grid_size} ({resize_method})"
    return params, resized


def _check_fit(model, params, table, skipped, problems, source):
    """Raises one `CheckpointError` listing everything that does not fit, before anything is loaded."""
    missing = sorted(k for k in table if k not in params and k not in skipped)
    unexpected = sorted(k for k in params if k not in table and k not in skipped)
    mismatched = [
        f"{k}: checkpoint {tuple(params[k].shape)} vs model {tuple(table[k].shape)}"
        for k in sorted(table)
        if k in params and k not in skipped and tuple(params[k].shape) != tuple(table[k].shape)
    ]
    if missing or unexpected or mismatched or problems:
        raise CheckpointError(_mismatch_message(source, model, missing, unexpected, mismatched, problems))


def _as_tensor(array, dtype):
    """`array` as a tensor of `dtype` that owns its memory, with exactly the same values.

    Other libraries' layouts reach here as permuted views of the file's tensors (a PyTorch Linear's (out, in)
    weight seen as the (in, out) kernel): numpy copies such a view element by element across strides, several times
    slower than the backend's transpose, which moves blocks (B/16's timm layout on 2 shared cores: 0.47-0.65 s for
    numpy's copies alone, 0.29-0.31 s for the whole assignment through the backend's transpose). So a view that is
    a permutation of one contiguous block is handed over as that block and transposed by the backend; a transpose
    moves values and computes none. Any other array is copied first: a backend may
    keep the memory it is given (JAX on CPU can), and these are views of a file mapping that `_release` drops.
    """
    array = np.asarray(array)
    if array.ndim > 1 and not array.flags.c_contiguous:
        order = sorted(range(array.ndim), key=lambda axis: -array.strides[axis])
        block = array.transpose(order)
        if block.flags.c_contiguous:
            back = tuple(int(axis) for axis in np.argsort(order))
            return keras.ops.transpose(keras.ops.convert_to_tensor(np.asarray(block, dtype)), back)
    return np.array(array, dtype=dtype, copy=True)


def _release(array):
    """Drops the pages of a memory-mapped checkpoint array from the resident set once it has been copied.

    The readers map local files (npz.py, checkpoint.py); without this, every page read stays resident until the
    arrays are gone, and a load holds the weights twice (file pages and variables). The file and the page cache
    keep the bytes: an array read again is faulted back in, unchanged.
    """
    base = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is not None and hasattr(mmap, "MADV_DONTNEED") and not base.closed:
        base.madvise(mmap.MADV_DONTNEED)


def _mismatch_message(source, model, missing, unexpected, mismatched, problems):
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
    lines = [f"Checkpoint {os.fspath(source)!r} does not fit the model ({shape}); nothing was loaded."]
    lines += [f"  {p}" for p in problems]
    lines += listing("missing from the checkpoint", missing)
    lines += listing("unexpected in the checkpoint", unexpected)
    lines += listing("shape mismatches", mismatched)
    lines.append(
        "  Is it a checkpoint of another variant? Build the model with the checkpoint's variant "
        "(e.g. create_model('B/16') for ViT-B_16.npz)."
    )
    return "\n".join(lines)
