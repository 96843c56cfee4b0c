"""timm's hybrid layout (`vit_base_r50_s16_*`, `vit_small_r26_s32_*`, `vit_tiny_r_s16_p8_*`) in and out.

No timm fixture exists for the hybrids, so each test folder here is made from the layout timm's sources give
(`timm/models/vision_transformer_hybrid.py`, `resnetv2.py`): `patch_embed.backbone` is a ResNetV2 without
pre-activation (`stem.conv`, `stem.norm`, `stages.{s}.blocks.{u}.{conv,norm}{1,2,3}`, `downsample.{conv,norm}`; the
root alone, `conv` / `norm`, when it has no stages), `patch_embed.proj` a convolution on its map, then timm's ViT.
The weights are random; the reference is the numpy forward pass below, written from timm's maths (StdConv2dSame
with eps 1e-8 inside the square root, GroupNormAct's epsilon 1e-5, TF-style SAME padding, exact GELU, LayerNorm 1e-6),
on timm's own NCHW / (out, in) layouts: it shares no code with keras_vit.
"""

import json
import math

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from scipy.special import erf

import keras_vit
from tests.support import numpy_vit
from tests.support.checkpoints import resnet_checkpoint, vit_checkpoint
from tests.support.numerics import scaled_diff

TOL = 1e-5
BB = "patch_embed.backbone."

# ----- the reference: timm's hybrid in numpy, NCHW -----


def _conv_same(x, w, stride, bias=None):
    b, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = -(-h // stride), -(-wd // stride)
    ph, pw = max((oh - 1) * stride + kh - h, 0), max((ow - 1) * stride + kw - wd, 0)
    x = np.pad(x, ((0, 0), (0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)))
    out = np.zeros((b, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            tap = x[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += np.einsum("bchw,oc->bohw", tap, w[:, :, i, j])
    return out if bias is None else out + bias[None, :, None, None]


def _std_conv(x, w, stride):
    flat = w.reshape(w.shape[0], -1)
    mean, var = flat.mean(1), flat.var(1)  # F.batch_norm over each filter: the biased variance
    return _conv_same(x, (w - mean[:, None, None, None]) / np.sqrt(var + 1e-8)[:, None, None, None], stride)


def _group_norm(x, weight, bias, relu=True):
    b, c, h, w = x.shape
    g = x.reshape(b, 32, c // 32, h, w)
    g = (g - g.mean(axis=(2, 3, 4), keepdims=True)) / np.sqrt(g.var(axis=(2, 3, 4), keepdims=True) + 1e-5)
    y = g.reshape(b, c, h, w) * weight[None, :, None, None] + bias[None, :, None, None]
    return np.maximum(y, 0) if relu else y


def _max_pool_same(x):
    b, c, h, w = x.shape
    oh, ow = -(-h // 2), -(-w // 2)
    ph, pw = max((oh - 1) * 2 + 3 - h, 0), max((ow - 1) * 2 + 3 - w, 0)
    x = np.pad(x, ((0, 0), (0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)), constant_values=-np.inf)
    out = np.full((b, c, oh, ow), -np.inf)
    for i in range(3):
        for j in range(3):
            out = np.maximum(out, x[:, :, i : i + 2 * oh : 2, j : j + 2 * ow : 2])
    return out


def _backbone(x, s):
    root = BB + ("stem." if f"{BB}stem.conv.weight" in s else "")
    x = _max_pool_same(
        _group_norm(_std_conv(x, s[f"{root}conv.weight"], 2), s[f"{root}norm.weight"], s[f"{root}norm.bias"])
    )
    stage = 0
    while f"{BB}stages.{stage}.blocks.0.conv1.weight" in s:
        block = 0
        while (p := f"{BB}stages.{stage}.blocks.{block}.") + "conv1.weight" in s:
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            if p + "downsample.conv.weight" in s:
                shortcut = _std_conv(x, s[p + "downsample.conv.weight"], stride)
                shortcut = _group_norm(shortcut, s[p + "downsample.norm.weight"], s[p + "downsample.norm.bias"], False)
            y = _group_norm(_std_conv(x, s[p + "conv1.weight"], 1), s[p + "norm1.weight"], s[p + "norm1.bias"])
            y = _group_norm(_std_conv(y, s[p + "conv2.weight"], stride), s[p + "norm2.weight"], s[p + "norm2.bias"])
            y = _group_norm(_std_conv(y, s[p + "conv3.weight"], 1), s[p + "norm3.weight"], s[p + "norm3.bias"], False)
            x = np.maximum(y + shortcut, 0)
            block += 1
        stage += 1
    return x


def _layer_norm(x, weight, bias):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-6) * weight + bias


def timm_hybrid_logits(images_nhwc, state, num_heads):
    """Logits of timm's hybrid ViT (class token pooling) for NHWC images in [-1, 1] (mean = std = 0.5)."""
    s = {k: np.asarray(v, np.float64) for k, v in state.items()}
    x = _backbone(np.asarray(images_nhwc, np.float64).transpose(0, 3, 1, 2), s)
    proj = s["patch_embed.proj.weight"]
    p = proj.shape[-1]
    b, c, h, w = x.shape
    patches = x.reshape(b, c, h // p, p, w // p, p).transpose(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), -1)
    tokens = patches @ proj.reshape(proj.shape[0], -1).T + s["patch_embed.proj.bias"]
    z = np.concatenate([np.broadcast_to(s["cls_token"], (b, 1, tokens.shape[-1])), tokens], 1) + s["pos_embed"]
    d = z.shape[-1]
    dh = d // num_heads
    i = 0
    while f"blocks.{i}.norm1.weight" in s:
        p = f"blocks.{i}."
        y = _layer_norm(z, s[p + "norm1.weight"], s[p + "norm1.bias"])
        qkv = y @ s[p + "attn.qkv.weight"].T + s[p + "attn.qkv.bias"]
        heads = []
        for hd in range(num_heads):
            q, k, v = (qkv[..., j * d + hd * dh : j * d + (hd + 1) * dh] for j in range(3))
            heads.append(numpy_vit.softmax(q @ k.transpose(0, 2, 1) / math.sqrt(dh)) @ v)
        z = z + np.concatenate(heads, -1) @ s[p + "attn.proj.weight"].T + s[p + "attn.proj.bias"]
        y = (
            _layer_norm(z, s[p + "norm2.weight"], s[p + "norm2.bias"]) @ s[p + "mlp.fc1.weight"].T
            + s[p + "mlp.fc1.bias"]
        )
        y = 0.5 * y * (1 + erf(y / math.sqrt(2)))
        z = z + y @ s[p + "mlp.fc2.weight"].T + s[p + "mlp.fc2.bias"]
        i += 1
    pooled = _layer_norm(z, s["norm.weight"], s["norm.bias"])[:, 0]
    return pooled @ s["head.weight"].T + s["head.bias"]


# ----- test folders in timm's hybrid layout -----


def _conv_weight(rng, o, i, k):
    """Filters with their own offset and spread, some tiny: weight standardisation and its epsilon both matter."""
    spread = np.exp(rng.uniform(np.log(1e-2), np.log(0.3), o))[:, None, None, None]
    return (rng.standard_normal((o, i, k, k)) * spread + rng.normal(0, 0.02, o)[:, None, None, None]).astype("float32")


def timm_hybrid_state(rng, stages, *, hidden, depth, mlp, patch, grid, classes):
    def r(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype("float32")

    def norm(name, c, gain=1.0):
        state[f"{name}.weight"], state[f"{name}.bias"] = gain * (1 + r(c)), r(c)

    state = {}
    root = BB + ("stem." if stages else "")
    state[f"{root}conv.weight"] = _conv_weight(rng, 64, 3, 7)
    norm(f"{root}norm", 64)
    cin = 64
    for si, units in enumerate(stages):
        out, mid = 256 * 2**si, 64 * 2**si
        for u in range(units):
            p = f"{BB}stages.{si}.blocks.{u}."
            for name, (o, i, k) in {"1": (mid, cin, 1), "2": (mid, mid, 3), "3": (out, mid, 1)}.items():
                state[f"{p}conv{name}.weight"] = _conv_weight(rng, o, i, k)
                # The last GroupNorm of a unit gains about 0.25, as in trained BiT stems (initialised at zero):
                # with gains of 1 sixteen units grow the activations until float32 round-off alone nears 1e-5.
                norm(f"{p}norm{name}", o, 0.25 if name == "3" else 1.0)
            if u == 0:
                state[f"{p}downsample.conv.weight"] = _conv_weight(rng, out, cin, 1)
                norm(f"{p}downsample.norm", out)
            cin = out
    state["patch_embed.proj.weight"] = r(hidden, cin, patch, patch, scale=(cin * patch * patch) ** -0.5)
    state["patch_embed.proj.bias"] = r(hidden)
    state["cls_token"] = r(1, 1, hidden)
    state["pos_embed"] = r(1, grid[0] * grid[1] + 1, hidden)
    for i in range(depth):
        p = f"blocks.{i}."
        norm(p + "norm1", hidden)
        norm(p + "norm2", hidden)
        state[p + "attn.qkv.weight"], state[p + "attn.qkv.bias"] = (
            r(3 * hidden, hidden, scale=hidden**-0.5),
            r(3 * hidden),
        )
        state[p + "attn.proj.weight"], state[p + "attn.proj.bias"] = r(hidden, hidden, scale=hidden**-0.5), r(hidden)
        state[p + "mlp.fc1.weight"], state[p + "mlp.fc1.bias"] = r(mlp, hidden, scale=hidden**-0.5), r(mlp)
        state[p + "mlp.fc2.weight"], state[p + "mlp.fc2.bias"] = r(hidden, mlp, scale=mlp**-0.5), r(hidden)
    norm("norm", hidden)
    state["head.weight"], state["head.bias"] = r(classes, hidden, scale=hidden**-0.5), r(classes)
    return state


# name: (architecture, ResNet stages, patch on the map, image size (h, w), heads)
CASES = {
    "r50": ("vit_base_r50_s16_224", (3, 4, 9), 1, (32, 64), 2),  # stride 16: a 2 x 4 grid
    "r26": ("vit_small_r26_s32_224", (2, 2, 2, 2), 1, (64, 64), 4),  # stride 32
    "root_only": ("vit_tiny_r_s16_p8_224", (), 8, (64, 96), 2),  # stride 4 x patch 8
}


def _folder(tmp_path, name, state, architecture, size, heads, classes):
    folder = tmp_path / name
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"))
    cfg = dict(
        architecture=architecture,
        num_classes=classes,
        num_features=int(state["cls_token"].shape[-1]),
        global_pool="token",
        model_args=dict(num_heads=heads, img_size=list(size)),
        pretrained_cfg=dict(input_size=[3, *size], mean=[0.5] * 3, std=[0.5] * 3),
    )
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    """(case name, its timm folder, the model read from it, images, timm-maths logits)."""
    name = request.param
    architecture, stages, patch, size, heads = CASES[name]
    rng = np.random.default_rng(1 + sorted(CASES).index(name))
    step = (4 * 2 ** max(len(stages) - 1, 0)) * patch
    grid = (size[0] // step, size[1] // step)
    state = timm_hybrid_state(rng, stages, hidden=32, depth=2, mlp=64, patch=patch, grid=grid, classes=5)
    folder = _folder(tmp_path_factory.mktemp(name), name, state, architecture, size, heads, 5)
    images = rng.uniform(-1, 1, (2, *size, 3)).astype("float32")
    return name, folder, keras_vit.from_pretrained(folder), images, timm_hybrid_logits(images, state, heads)


@pytest.mark.slow
def test_timm_hybrid_matches_timm_maths(case):
    name, _, model, images, expected = case
    _, stages, patch, size, heads = CASES[name]
    assert (model.config.resnet_layers, model.config.patch_size, model.config.image_size) == (stages, patch, size)
    assert (model.config.num_heads, model.config.channels, model.config.resnet_norm) == (heads, 3, "timm")
    assert scaled_diff(model.predict(images, verbose=0), expected) < TOL


@pytest.mark.slow
def test_timm_hybrid_in_float64_matches_timm_maths_beyond_float32(case):
    """The mapping is exact, not merely close: in float64 the model meets the reference far below float32's
    round-off (what is left, about 1e-7, is the transformer's float32 internals)."""
    _, _, model, images, expected = case
    wide = keras_vit.VisionTransformer.from_config({**model.get_config(), "dtype": "float64"})
    wide.set_weights(model.get_weights())
    assert scaled_diff(wide.predict(images.astype("float64"), verbose=0), expected) < 1e-6


@pytest.mark.slow
def test_vit_jax_constants_would_not_match(case):
    """The same weights with vit_jax's constants (std + 1e-5, GroupNorm 1e-6) miss timm's outputs: the reference
    can tell the two apart, so matching it is a real check of resnet_norm='timm'."""
    _, _, model, images, expected = case
    other = keras_vit.VisionTransformer.from_config({**model.get_config(), "resnet_norm": "vit_jax"})
    other.set_weights(model.get_weights())
    assert scaled_diff(other.predict(images, verbose=0), expected) > 1e-4


@pytest.mark.slow
def test_timm_hybrid_round_trip(case, tmp_path):
    name, folder, model, images, expected = case
    out = keras_vit.save_pretrained(model, tmp_path / name, format="timm")
    written, original = load_file(f"{out}/model.safetensors"), load_file(f"{folder}/model.safetensors")
    assert {k: v.shape for k, v in written.items()} == {k: v.shape for k, v in original.items()}
    assert max(float(np.abs(written[k] - original[k]).max()) for k in original) == 0.0
    with open(f"{out}/config.json") as f:
        cfg = json.load(f)
    assert cfg["architecture"] == CASES[name][0]
    assert cfg["pretrained_cfg"]["first_conv"] == BB + ("stem.conv" if CASES[name][1] else "conv")
    again = keras_vit.from_pretrained(out)
    assert again.config == model.config
    assert scaled_diff(again.predict(images, verbose=0), expected) < TOL


def test_timm_resnet_d_backbones_are_refused_in_one_line(tmp_path):
    rng = np.random.default_rng(7)
    state = timm_hybrid_state(rng, (), hidden=32, depth=1, mlp=64, patch=8, grid=(1, 1), classes=3)
    state[BB + "conv1.0.weight"] = np.ones((32, 3, 3, 3), "float32")  # vit_small_resnet26d_224's first conv
    folder = _folder(tmp_path, "resnet26d", state, "vit_small_resnet26d_224", (32, 32), 2, 3)
    with pytest.raises(keras_vit.CheckpointError, match="uses a timm ResNet-D backbone") as err:
        keras_vit.from_pretrained(folder)
    assert "\n" not in str(err.value)


def test_hybrids_timm_does_not_register_are_refused_on_save(tmp_path):
    model = keras_vit.create_model("R50+B/16", image_size=32, resnet_layers=(1, 1, 1), hidden_size=32, num_layers=1,
                                   num_heads=2, mlp_dim=64, num_classes=3)  # fmt: skip
    with pytest.raises(keras_vit.CheckpointError, match=r"no hybrid with ResNet stages \(1, 1, 1\).*Save it as 'npz'"):
        keras_vit.save_pretrained(model, tmp_path / "t", format="timm")


def test_vit_jax_hybrid_saved_as_timm_warns_about_the_constants(tmp_path):
    model = keras_vit.create_model("R26+S/32", image_size=32, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                   num_classes=3)  # fmt: skip
    with pytest.warns(UserWarning, match="sqrt\\(var \\+ 1e-8\\)"):
        keras_vit.save_pretrained(model, tmp_path / "t", format="timm")


def test_root_only_npz_hybrid_loads_with_vit_jax_maths(tmp_path):
    """The `.npz` form of the root-only hybrid (AugReg's R_Ti_16: conv_root, gn_root, no blocks), against the
    independent vit_jax numpy reference: stride 4, the image's 3 channels (not the map's 64) inferred."""
    rng = np.random.default_rng(11)
    ckpt = resnet_checkpoint(rng, ())
    ckpt.update(vit_checkpoint(rng, hidden=32, layers=1, heads=2, mlp=64, patch=8, grid=(2, 2), classes=4, embed_in=64))
    np.savez(tmp_path / "r_ti.npz", **ckpt)
    model = keras_vit.from_pretrained(tmp_path / "r_ti.npz")
    assert (model.config.resnet_layers, model.config.channels, model.config.resnet_norm) == ((), 3, "vit_jax")
    assert model.config.image_size == (64, 64)
    images = rng.uniform(-1, 1, (2, 64, 64, 3)).astype("float32")
    expected = numpy_vit.vit_forward(None, ckpt, num_layers=1, features=numpy_vit.resnet_stem(images, ckpt, ()))
    assert scaled_diff(model.predict(images, verbose=0), expected) < TOL


@pytest.mark.slow
def test_timm_hybrid_is_refused_as_npz_which_cannot_record_its_constants(tmp_path):
    """A .npz holds arrays only, so reading it back would build the stem with vit_jax's constants (the test above
    shows they give other outputs): refused in one line naming timm's layout, and nothing written."""
    model = keras_vit.create_model("R26+S/32", image_size=32, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                   num_classes=3, resnet_norm="timm")  # fmt: skip
    with pytest.raises(keras_vit.CheckpointError, match=r"cannot record resnet_norm='timm'.*format='timm'") as err:
        keras_vit.save_pretrained(model, tmp_path / "t.npz", format="npz")
    assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []
    vit_jax = keras_vit.VisionTransformer.from_config({**model.get_config(), "resnet_norm": "vit_jax"})
    assert keras_vit.save_pretrained(vit_jax, tmp_path / "t.npz", format="npz").endswith("t.npz")
