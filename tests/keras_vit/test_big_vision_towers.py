"""big_vision's two-tower `.npz` (SigLIP / SigLIP 2 at a fixed size, and NaFlex): the image tower under
`params/img/`, read as the fixed-resolution ViT or the NaFlex model, against transformers' own outputs.

No big_vision file is in the fixtures: the test writes one from transformers' tensors under the names big_vision's
`models/vit.py` and `models/proj/image_text/naflex_vit.py` give them (flax modules named by class and index, Dense
kernels (in, out), attention kernels (D, heads, head dim)), beside a text tower and the temperature and bias."""

import math
import os

import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_vit
from keras_vit.weights.errors import CheckpointError
from tests import support
from tests.support.naflex_fixtures import check, io, library_inputs
from tests.support.numerics import scaled_diff

NAFLEX = os.path.join(str(support.FIXTURES), "interop_families2", "hf_siglip2_naflex")
FIXED = os.path.join(str(support.FIXTURES), "interop_families", "hf_siglip_vision")
HEADS = 3


def _attention(state, prefix, heads, q, k, v, out_w, out_b):
    """torch (out, in) projections -> big_vision's MultiHeadDotProductAttention kernels."""
    d = out_w.shape[0]
    arrays = {}
    for name, (w, b) in zip(("query", "key", "value"), (q, k, v), strict=True):
        arrays[f"{prefix}/{name}/kernel"] = w.T.reshape(d, heads, d // heads)
        arrays[f"{prefix}/{name}/bias"] = b.reshape(heads, d // heads)
    arrays[f"{prefix}/out/kernel"] = out_w.T.reshape(heads, d // heads, d)
    arrays[f"{prefix}/out/bias"] = out_b
    return arrays


def _dense(state, source, target):
    return {f"{target}/kernel": state[f"{source}.weight"].T, f"{target}/bias": state[f"{source}.bias"]}


def _norm(state, source, target):
    return {f"{target}/scale": state[f"{source}.weight"], f"{target}/bias": state[f"{source}.bias"]}


def big_vision_file(path, state, naflex):
    """transformers' SigLIP vision tensors -> a big_vision two-tower `.npz` at `path`."""
    s = {k.removeprefix("vision_model."): v for k, v in state.items()}
    patch = s["embeddings.patch_embedding.weight"]
    kernel = patch.T if naflex else patch.transpose(2, 3, 1, 0)  # Dense (P*P*C, D) or conv (P, P, C, D)
    table = s["embeddings.position_embedding.weight"]
    side = math.isqrt(table.shape[0])
    img = {"embedding/kernel": kernel, "embedding/bias": s["embeddings.patch_embedding.bias"],
           "pos_embedding": table.reshape(side, side, -1) if naflex else table[None]}  # fmt: skip
    layers = sorted({int(k.split(".")[2]) for k in s if k.startswith("encoder.layers.")})
    for i in layers:
        src, dst = f"encoder.layers.{i}", f"Transformer/encoderblock_{i}"
        att = [(s[f"{src}.self_attn.{n}_proj.weight"], s[f"{src}.self_attn.{n}_proj.bias"]) for n in "qkv"]
        img.update(_attention(s, f"{dst}/MultiHeadDotProductAttention_0", HEADS, *att,
                              s[f"{src}.self_attn.out_proj.weight"], s[f"{src}.self_attn.out_proj.bias"]))  # fmt: skip
        img.update(_norm(s, f"{src}.layer_norm1", f"{dst}/LayerNorm_0"))
        img.update(_norm(s, f"{src}.layer_norm2", f"{dst}/LayerNorm_1"))
        img.update(_dense(s, f"{src}.mlp.fc1", f"{dst}/MlpBlock_0/Dense_0"))
        img.update(_dense(s, f"{src}.mlp.fc2", f"{dst}/MlpBlock_0/Dense_1"))
    img.update(_norm(s, "post_layernorm", "Transformer/encoder_norm"))
    img["MAPHead_0/probe"] = s["head.probe"]
    w, b = np.split(s["head.attention.in_proj_weight"], 3), np.split(s["head.attention.in_proj_bias"], 3)
    img.update(_attention(s, "MAPHead_0/MultiHeadDotProductAttention_0", HEADS, *zip(w, b, strict=True),
                          s["head.attention.out_proj.weight"], s["head.attention.out_proj.bias"]))  # fmt: skip
    img.update(_norm(s, "head.layernorm", "MAPHead_0/LayerNorm_0"))
    img.update(_dense(s, "head.mlp.fc1", "MAPHead_0/MlpBlock_0/Dense_0"))
    img.update(_dense(s, "head.mlp.fc2", "MAPHead_0/MlpBlock_0/Dense_1"))
    rng = np.random.default_rng(0)
    txt = {"Embed_0/embedding": rng.normal(size=(10, 48)), "Encoder_0/encoder_norm/scale": np.ones(48),
           "head/kernel": rng.normal(size=(48, 48))}  # a text tower's names: never read  # fmt: skip
    arrays = {f"params/img/{k}": v for k, v in img.items()}
    arrays.update({f"params/txt/{k}": v for k, v in txt.items()})
    arrays.update({"params/t": np.array([2.3]), "params/b": np.array([-10.0])})
    np.savez(path, **{k: np.asarray(v, np.float32) for k, v in arrays.items()})
    return path


def test_a_naflex_two_tower_file_gives_transformers_outputs(tmp_path):
    path = big_vision_file(tmp_path / "siglip2_naflex.npz", load_file(os.path.join(NAFLEX, "model.safetensors")),
                           naflex=True)  # fmt: skip
    arrays = io("hf_siglip2_naflex")
    model = keras_vit.from_pretrained(str(path), max_num_patches=16)
    assert type(model).__name__ == "NaFlexViT" and tuple(model.options["position_grid"]) == (4, 4)
    assert model.options["num_classes"] == 0  # the tower's pooled features
    check(model, library_inputs("hf_siglip2_naflex", arrays), arrays, arrays["pixel_attention_mask"].astype(bool))


@pytest.mark.slow
def test_a_fixed_two_tower_file_gives_transformers_outputs_as_either_form(tmp_path):
    path = big_vision_file(tmp_path / "siglip.npz", load_file(os.path.join(FIXED, "model.safetensors")),
                           naflex=False)  # fmt: skip
    arrays = io("hf_siglip_vision", root=os.path.dirname(FIXED))
    model = keras_vit.from_pretrained(str(path))
    assert type(model).__name__ == "VisionTransformer" and model.config.pooling == "map"
    pooled = np.asarray(model.predict(arrays["images"], verbose=0))
    assert scaled_diff(pooled, arrays["pooler_output"]) <= 1e-5
    # The same weights as NaFlex on a full 4x4 grid: the patches of each image, row-major, (ph, pw, C)-flattened.
    naflex = keras_vit.from_pretrained(str(path), naflex=True, max_num_patches=16)
    images = arrays["images"].astype(np.float32)
    patches = images.reshape(-1, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(len(images), 16, 192)
    inputs = dict(patches=patches, mask=np.ones((len(images), 16), np.int32), grid=np.full((len(images), 2), 4))
    assert scaled_diff(np.asarray(naflex.predict(inputs, verbose=0)), arrays["pooler_output"]) <= 1e-5


def test_a_two_tower_file_without_an_image_vit_is_refused_by_name(tmp_path):
    path = tmp_path / "lit_resnet.npz"
    np.savez(path, **{"params/img/root_block/conv_root/kernel": np.zeros((7, 7, 3, 8), np.float32),
                      "params/txt/Embed_0/embedding": np.zeros((10, 8), np.float32)})  # fmt: skip
    with pytest.raises(CheckpointError, match="is not a ViT checkpoint") as err:
        keras_vit.from_pretrained(str(path))
    assert "\n" not in str(err.value)
