"""LoRA fine-tuning: Keras' own `enable_lora` on a ViT's attention projections in one call (`enable_lora`), and the
merge back into plain kernels for export (`merge_lora`); docs/training.md ("LoRA fine-tuning")."""

import math

from keras import ops

from keras_vit.layers.attention import PROJECTIONS, MultiHeadSelfAttention
from keras_vit.layers.mlp import MlpBlock

TARGETS = (*PROJECTIONS, "mlp")
DEFAULT_TARGETS = PROJECTIONS
# Named sets of targets (the trainer's `lora_targets`): "qkv" is PEFT's usual first choice on timm ViTs.
TARGET_GROUPS = {"attention": PROJECTIONS, "qkv": ("query", "key", "value"), "all": TARGETS}
_TARGET_WORDS = (
    "query, key, value, out (the attention projections) and mlp (the MLP's Dense_0 and Dense_1), or one of the "
    "sets 'attention' (query, key, value, out), 'qkv' (query, key, value), 'all'"
)


def _check_targets(targets):
    if isinstance(targets, str):
        targets = TARGET_GROUPS.get(targets, (targets,))
    targets = tuple(targets)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        what = f"unknown target(s) {', '.join(map(repr, unknown))}" if unknown else "no target"
        raise ValueError(f"enable_lora: {what}. Valid targets: {_TARGET_WORDS}. Received: targets={targets!r}")
    return targets


def lora_layers(model, targets=TARGETS):
    """The `Dense`/`EinsumDense` layers of `model` that `targets` names, in model order.

    Every `MultiHeadSelfAttention` (each encoder block's, and the MAP head's) contributes its `query`, `key`,
    `value` and `out` projections as named; every `MlpBlock` its `Dense_0` and `Dense_1` for "mlp".
    """
    targets = _check_targets(targets)
    found = []
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, MultiHeadSelfAttention):
            found += [getattr(layer, name) for name in PROJECTIONS if name in targets]
        elif isinstance(layer, MlpBlock) and "mlp" in targets:
            found += [layer.dense_0, layer.dense_1]
    return found


def enable_lora(model, rank, targets=DEFAULT_TARGETS, alpha=None):
    """Adds LoRA factors to `targets` of every attention (and MLP) of `model` and freezes everything else but the head.

    After the call `model.trainable_weights` are exactly the LoRA factors (A and B of each targeted layer) and the
    classifier `head`'s kernel and bias (and a distilled model's `head_dist`'s): the pretrained kernels, biases,
    norms, embeddings and MLPs stay fixed (a targeted MLP trains its factors, not its kernels). With B at zero the
    model's outputs are unchanged until it trains. Compile (or build the optimizer) after this call, so that it
    sees the new variables.

    Args:
        model: a built keras_vit model (`create_model`, `from_pretrained`).
        rank: the rank of each update, a positive integer (8 and 16 are common).
        targets: which projections: any of "query", "key", "value", "out", "mlp", or the name of a set of them
            (`TARGET_GROUPS`: "attention", "qkv", "all"); default: the four attention projections.
        alpha: LoRA's scale numerator: the update is scaled by alpha / rank (default: rank, a scale of 1).

    Returns:
        The layers LoRA was enabled on.
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"enable_lora: rank must be a positive integer, e.g. 8. Received: rank={rank!r}")
    layers = lora_layers(model, targets)
    if not layers:
        raise ValueError(
            f"enable_lora: {getattr(model, 'name', model)!r} has no MultiHeadSelfAttention or MlpBlock layers; "
            f"pass a keras_vit model (keras_vit.create_model or keras_vit.from_pretrained)."
        )
    _check_rank(rank, layers)
    enabled = [layer.path for layer in layers if layer.lora_enabled]
    if enabled:
        raise ValueError(
            f"enable_lora: LoRA is already enabled on {enabled[0]} (and {len(enabled) - 1} more); merge it first "
            f"(model = keras_vit.merge_lora(model)) to add new factors."
        )
    for layer in layers:
        layer.enable_lora(rank, lora_alpha=alpha)
    trainable = {id(v) for layer in layers for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    trainable |= {id(v) for head in _heads(model) for v in head.weights}
    for variable in model.weights:
        variable.trainable = id(variable) in trainable
    return layers


def _check_rank(rank, layers):
    """A rank above a targeted projection's smallest width adds parameters (and memory) but no capacity."""
    widths = {layer.path: min(_widths(layer)) for layer in layers}
    path = min(widths, key=widths.get)
    if rank > widths[path]:
        raise ValueError(
            f"enable_lora: rank={rank} exceeds the smallest width of the projections it adapts ({widths[path]}, "
            f"{path}); a higher rank adds parameters but no capacity. Use a rank of at most {widths[path]} "
            f"(8 or 16 are common)."
        )


def _widths(layer):
    """(input features, output features) of a `Dense` or `EinsumDense` kernel (its axes split by the equation)."""
    shape = tuple(int(d) for d in layer.kernel.shape)
    equation = getattr(layer, "equation", None)
    if equation is None:
        return shape[0], math.prod(shape[1:])
    inputs, kernel = equation.split("->")[0].split(",")
    contracted = [size for letter, size in zip(kernel, shape, strict=True) if letter in inputs]
    produced = [size for letter, size in zip(kernel, shape, strict=True) if letter not in inputs]
    return math.prod(contracted), math.prod(produced)


def _heads(model):
    """The classifier heads: `head` (and a distilled model's `head_dist`); none on a feature model."""
    return [layer for layer in model.layers if layer.name in ("head", "head_dist")]


def merged_kernel(layer):
    """The kernel of a LoRA-enabled `Dense`/`EinsumDense` with its update folded in, in the variable's dtype.

    Computed in float32 from the stored kernel: Keras' own `layer.kernel` rounds the merged kernel to the compute
    dtype (bfloat16 under mixed precision).
    """
    scale = layer.lora_alpha / layer.lora_rank
    update = ops.matmul(layer.lora_kernel_a, layer.lora_kernel_b) * scale
    return ops.cast(ops.add(ops.cast(layer._kernel, "float32"), update), layer._kernel.dtype)


def merge_lora(model):
    """A plain copy of `model` whose kernels hold the LoRA updates: no LoRA variables, the same outputs.

    What to save or export after LoRA fine-tuning (the trainer's model.keras is this). A model without LoRA comes
    back as a plain copy. The copy is built from `model.get_config()`, so its variables are all trainable again.
    """
    layers = [layer for layer in model._flatten_layers(include_self=False) if getattr(layer, "lora_enabled", False)]
    quantized = [layer for layer in layers if layer.quantization_mode is not None]
    if quantized:
        raise ValueError(
            f"merge_lora folds factors into float kernels; {quantized[0].path} is quantized "
            f"({quantized[0].quantization_mode}). Enable LoRA on the float model, then quantize the merged one: "
            f"keras_vit.merge_lora(model).quantize({quantized[0].quantization_mode!r})."
        )
    kernels = {id(layer._kernel): merged_kernel(layer) for layer in layers}
    factors = {id(v) for layer in layers for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    values = [
        ops.convert_to_numpy(kernels[id(v)]) if id(v) in kernels else v.numpy()
        for v in model.weights
        if id(v) not in factors
    ]
    plain = model.__class__.from_config(model.get_config())
    # set_weights checks the count and every shape, so a layout that stopped lining up fails here, not silently.
    plain.set_weights(values)
    return plain


def lora_parameter_count(model):
    """(LoRA factor parameters, all trainable parameters) of `model`."""
    factors = sum(
        int(ops.size(v))
        for layer in model._flatten_layers(include_self=False)
        if getattr(layer, "lora_enabled", False)
        for v in (layer.lora_kernel_a, layer.lora_kernel_b)
    )
    return factors, sum(int(ops.size(v)) for v in model.trainable_weights)
