"""Creating weights that a checkpoint is about to overwrite as zeros (`deferred()`), then drawing with their own
initialisers the ones the loader did not assign (`draw_remaining`): the build skips the draws it would discard."""

import contextlib
import threading

import keras

_STATE = threading.local()


@contextlib.contextmanager
def deferred():
    """Layers built inside create their weights as zeros and note them; yields the notes for `draw_remaining`."""
    previous = getattr(_STATE, "notes", None)
    _STATE.notes = notes = []
    try:
        yield notes
    finally:
        _STATE.notes = previous


def add_weight(layer, *, name, shape, initializer, **kwargs):
    """`layer.add_weight(...)`, created as zeros and noted with `initializer` inside `deferred()`."""
    notes = getattr(_STATE, "notes", None)
    if notes is None:
        return layer.add_weight(name=name, shape=shape, initializer=initializer, **kwargs)
    variable = layer.add_weight(name=name, shape=shape, initializer="zeros", **kwargs)
    notes.append((variable, keras.initializers.get(initializer)))
    return variable


def build_deferred(layer, input_shape):
    """`layer.build(input_shape)` for a layer with `kernel`/`bias` initialisers (`Dense`, `EinsumDense`), its kernel
    and bias deferred inside `deferred()`."""
    notes = getattr(_STATE, "notes", None)
    if notes is None:
        return layer.build(input_shape)
    kernel_init, bias_init = layer.kernel_initializer, layer.bias_initializer
    layer.kernel_initializer = layer.bias_initializer = keras.initializers.Zeros()
    try:
        layer.build(input_shape)
    finally:  # the layer keeps its own initialisers: its config, and any later build, are as without deferring
        layer.kernel_initializer, layer.bias_initializer = kernel_init, bias_init
    notes.append((layer.kernel, kernel_init))
    if layer.bias is not None:
        notes.append((layer.bias, bias_init))


def draw_remaining(notes, assigned):
    """Draws every noted weight not among `assigned` (variables) with its own initialiser; returns how many."""
    done = {id(variable) for variable in assigned}
    remaining = [(variable, init) for variable, init in notes if id(variable) not in done]
    for variable, init in remaining:
        variable.assign(init(variable.shape, dtype=variable.dtype))
    return len(remaining)
