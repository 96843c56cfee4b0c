"""A Keras-quantized keras-vit model (`model.quantize("int8" | "int4" | "float8")`) as float weights: each
quantized projection's kernel read through the layer itself, codes and scales together, never the codes alone.
"""

import numpy as np

from keras_vit.weights.errors import CheckpointError

# Modes whose float kernel the layer's own call gives back exactly (int8, int4) or that keep it (float8).
READABLE_MODES = ("int8", "int4", "float8")
# The projections' equations whose kernel is (contracted axes..., output axes...), as keras-vit builds them.
_EQUATIONS = ("btd,dhk->bthk", "bthk,hkd->btd")


def quantized_layers(model):
    """{path: layer} of the model's quantized leaf layers (empty for a float model)."""
    return {
        layer.path: layer
        for layer in model._flatten_layers()
        if getattr(layer, "quantization_mode", None) is not None and len(list(layer._flatten_layers())) == 1
    }


def float_twin(model, *, source):
    """The float model `model` was quantized from, as far as its files tell: a `VisionTransformer` of the same
    config, every variable copied, and each int8 / int4 kernel replaced by what the layer multiplies by (its codes
    divided by their scales). A float8 layer keeps its float kernel (Keras stores it; the scales only round it).

    Raises:
        CheckpointError: a quantization mode this reader cannot undo (GPTQ, AWQ), naming the way out.
    """
    from keras_vit.models import VisionTransformer

    quantized = quantized_layers(model)
    other = sorted({layer.quantization_mode for layer in quantized.values()} - set(READABLE_MODES))
    if other:
        raise CheckpointError(
            f"{source!r} is quantized with {other[0]!r}, whose kernels keras-vit cannot turn back into float weights "
            f"(it reads {', '.join(READABLE_MODES)}); load the float model the file was quantized from instead."
        )
    config = dict(model.get_config())
    config.pop("quantized_layers", None)
    twin = VisionTransformer.from_config(config)
    variables = {variable.path: variable for variable in model.weights}
    for variable in twin.weights:
        found = variables.get(variable.path)
        if found is not None and tuple(found.shape) == tuple(variable.shape) and found.dtype == variable.dtype:
            variable.assign(found)
    layers = {layer.path: layer for layer in twin._flatten_layers()}
    for path, layer in quantized.items():
        if layer.quantization_mode in ("int8", "int4"):
            layers[path].kernel.assign(_effective_kernel(layer, tuple(layers[path].kernel.shape), source))
    return twin


def _effective_kernel(layer, shape, source):
    """The float kernel a quantized `Dense` / `EinsumDense` multiplies by: its response to one-hot inputs, less its
    bias. A one-hot row quantizes exactly (its abs-max is its one value), so this is codes / scales to rounding."""
    import keras

    equation = getattr(layer, "equation", None)
    if equation is not None and equation not in _EQUATIONS:
        raise CheckpointError(f"{source!r}: {layer.path} computes {equation!r}, a projection keras-vit does not build.")
    contracted = shape[:1] if equation in (None, "btd,dhk->bthk") else shape[:2]
    n = int(np.prod(contracted))
    probe = np.eye(n, dtype="float32").reshape(1, n, *contracted)
    response = keras.ops.convert_to_numpy(keras.ops.cast(layer(probe), "float32"))[0]
    if layer.bias is not None:
        response = response - keras.ops.convert_to_numpy(layer.bias).astype("float32")
    return response.reshape(shape)
