"""timm's `Eva` models (DINOv3, EVA-02, Perception Encoder) <-> the original key layout."""

import numpy as np


def split_packed_fc1(weight, bias=None):
    """timm's packed SwiGLU `mlp.fc1` ([2H, D] weight, [2H] bias; `GluMlp(gate_last=False)`: the gate first) ->
    ((gate weight, gate bias), (up weight, up bias))."""
    weight = np.asarray(weight)
    half = weight.shape[0] // 2
    biases = (None, None) if bias is None else (np.asarray(bias)[:half], np.asarray(bias)[half:])
    return (weight[:half], biases[0]), (weight[half:], biases[1])
