"""The SigLIP 2 NaFlex fixtures (fixtures/interop_families2/): their files, their libraries' inputs, and a check of a
model's outputs against the libraries' own within `TOL` of their scale."""

import os

import keras
import numpy as np

from tests import support
from tests.support.numerics import scaled_diff

FIXTURES = os.path.join(str(support.FIXTURES), "interop_families2")
TOL = 1e-5
HF, TIMM = "hf_siglip2_naflex", "timm_naflex_siglip"


def folder(name):
    return os.path.join(FIXTURES, name)


def io(name, root=FIXTURES):
    return dict(np.load(os.path.join(root, name, "io.npz")))


def library_inputs(name, arrays):
    if name == HF:
        return dict(patches=arrays["pixel_values"], mask=arrays["pixel_attention_mask"], grid=arrays["spatial_shapes"])
    return dict(patches=arrays["patches"], mask=arrays["patch_valid"], grid=arrays["grid_hw"])


def outputs(model, inputs):
    """{fixture output name: value}: the tokens after the final norm, the pooled vector and the logits."""
    inputs = {k: np.asarray(v, np.float32 if k == "patches" else np.int32) for k, v in inputs.items()}
    tokens, pooled = keras.Model(model.inputs, [model.get_layer(n).output for n in ("encoder_norm", "MAPHead_0")])(
        inputs
    )
    got = dict(tokens=tokens, last_hidden_state=tokens, pre_logits=pooled, pooler_output=pooled)
    if model.options["num_classes"]:
        got["logits"] = model(inputs)
    return {k: np.asarray(v) for k, v in got.items()}


def check(model, inputs, arrays, valid):
    names = [k for k in ("last_hidden_state", "pooler_output", "tokens", "pre_logits", "logits") if k in arrays]
    got = outputs(model, inputs)
    worst = {}
    for name in names:
        rows = valid if arrays[name].ndim == 3 else None
        worst[name] = scaled_diff(got[name][:, : arrays[name].shape[1]], arrays[name], rows)
    assert max(worst.values()) <= TOL, worst
    return worst
