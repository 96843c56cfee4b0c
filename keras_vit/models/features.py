"""Feature maps: a model's chosen encoder blocks as outputs, as timm's `forward_intermediates` offers them."""

import numbers

import keras

from keras_vit.layers.token_split import OUTPUT_FORMS, TokenSplit
from keras_vit.models.configs import ViTConfig


def num_prefix_tokens(model):
    """How many tokens precede the patch tokens in `model`'s sequence: class, distillation and register tokens.

    The one place feature maps read it (`ViTConfig.num_prefix_tokens`).
    """
    return model.config.num_prefix_tokens


def feature_model(model, blocks=(-1,), output="tokens", norm=False, return_prefix_tokens=False, name=None):
    """A functional `keras.Model` giving the outputs of chosen encoder blocks of `model`, sharing its layers.

    The blocks are `model`'s `encoderblock_{i}` layers, and `norm=True` applies its final `encoder_norm` to each
    (timm's `forward_intermediates(norm=True)`); no weight is copied, so weights loaded into `model` later show
    here too. The prefix tokens (the class token) are split off the patch tokens.

    Args:
        model: a keras_vit `VisionTransformer` (plain, hybrid or `dynamic_image_size=True`).
        blocks: block indices, negative ones counted from the end (-1 the last), in the order wanted; or an int n,
            the last n blocks (as timm's `indices`).
        output: "tokens" for (batch, patches, width), or "NHWC" for (batch, grid_h, grid_w, width).
        norm: apply the final LayerNorm (`encoder_norm`) to each block's output.
        return_prefix_tokens: follow each block's patch tokens by its prefix tokens, (batch, prefix, width).
        name: the model's name; default `{model.name}_features`.

    Returns:
        A `keras.Model` from `model`'s images to a flat list, in the order of `blocks`: each block's patch tokens,
        each followed by its prefix tokens with `return_prefix_tokens=True` (`[patches_0, prefix_0, patches_1,
        ...]`). Keras returns a one-tensor list as the tensor itself.

    Example:
    ```python
    model = keras_vit.create_model("B/16")
    features = keras_vit.feature_model(model, blocks=(3, 7, 11), output="NHWC")
    maps = features(images)  # three (batch, 14, 14, 768) arrays
    ```
    """
    config = _config(model)
    indices = block_indices(blocks, config.num_layers)
    if output not in OUTPUT_FORMS:
        raise ValueError(f"output must be one of {OUTPUT_FORMS}. Received: output={output!r}")
    prefix = num_prefix_tokens(model)
    if return_prefix_tokens and not prefix:
        raise ValueError(
            "return_prefix_tokens=True, but the model has no prefix tokens (class_token=False); leave it False."
        )
    step = config.feature_stride * config.patch_size
    outputs = []
    for i in indices:
        block = model.get_layer(f"encoderblock_{i}")
        x = block.output
        if norm:
            x = model.get_layer("encoder_norm")(x)
        split = TokenSplit(
            prefix, output=output, grid_size=config.grid_size, return_prefix=return_prefix_tokens,
            patch_stride=(step, step) if config.dynamic_image_size else None,
            name=f"encoderblock_{i}_features", dtype=block.dtype_policy,
        )  # fmt: skip
        out = split(x, images=model.input) if config.dynamic_image_size else split(x)
        # A flat list, (patches, prefix) pairs one after the other: SavedModel signatures refuse nested outputs.
        outputs.extend(out if return_prefix_tokens else [out])
    return keras.Model(model.input, outputs, name=name or f"{model.name}_features")


def block_indices(blocks, num_layers):
    """`blocks` (indices, negative from the end, or an int n: the last n) as a list of indices in [0, num_layers)."""
    if isinstance(blocks, bool) or not isinstance(blocks, (numbers.Integral, tuple, list)):
        raise ValueError(
            f"blocks must be a sequence of block indices (e.g. blocks=(-1,)) or an int n (the last n blocks). "
            f"Received: blocks={blocks!r}"
        )
    if isinstance(blocks, numbers.Integral):
        blocks = int(blocks)
        if not 1 <= blocks <= num_layers:
            raise ValueError(
                f"blocks={blocks} asks for the last {blocks} blocks of a model with {num_layers}; pass 1 to "
                f"{num_layers}, or a sequence of indices such as blocks=(-1,)."
            )
        return list(range(num_layers - blocks, num_layers))
    if not blocks:
        raise ValueError("blocks is empty; pass at least one block index, e.g. blocks=(-1,).")
    indices = []
    for b in blocks:
        if isinstance(b, bool) or not isinstance(b, numbers.Integral) or not -num_layers <= b < num_layers:
            raise ValueError(
                f"Block index {b!r} is out of range for a model with {num_layers} blocks; use 0 to "
                f"{num_layers - 1}, or -1 to -{num_layers} from the end. Received: blocks={tuple(blocks)}"
            )
        indices.append(int(b) % num_layers)
    if len(set(indices)) != len(indices):
        raise ValueError(f"blocks names a block twice: {tuple(blocks)} is {tuple(indices)}; list each block once.")
    return indices


def _config(model):
    config = getattr(model, "config", None)
    if not isinstance(model, keras.Model) or not isinstance(config, ViTConfig):
        raise ValueError(
            f"feature_model takes a keras_vit VisionTransformer (from create_model, from_pretrained or a loaded "
            f".keras file). Received: {type(model).__name__}"
        )
    return config
