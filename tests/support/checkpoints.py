"""Random checkpoints in the original released layout (key names and shapes from ../shared/REFERENCE.md)."""

import numpy as np


def vit_checkpoint(
    rng, *, hidden, layers, heads, mlp, patch, grid, classes, channels=3, cls=True, pre_logits=None, embed_in=None
):
    """A dict of float32 arrays with every key of an original ViT `.npz`; values are non-trivial random numbers."""
    d, dh = hidden, hidden // heads

    def r(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    n = grid[0] * grid[1]
    ckpt = {
        "embedding/kernel": r(patch, patch, embed_in or channels, d, scale=0.05),
        "embedding/bias": r(d),
        "Transformer/posembed_input/pos_embedding": r(1, n + (1 if cls else 0), d),
        "Transformer/encoder_norm/scale": 1 + r(d),
        "Transformer/encoder_norm/bias": r(d),
    }
    if cls:
        ckpt["cls"] = r(1, 1, d)
    for i in range(layers):
        p = f"Transformer/encoderblock_{i}"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            ckpt[f"{p}/{ln}/scale"] = 1 + r(d)
            ckpt[f"{p}/{ln}/bias"] = r(d)
        for part in ("query", "key", "value"):
            ckpt[f"{p}/MultiHeadDotProductAttention_1/{part}/kernel"] = r(d, heads, dh, scale=d**-0.5)
            ckpt[f"{p}/MultiHeadDotProductAttention_1/{part}/bias"] = r(heads, dh)
        ckpt[f"{p}/MultiHeadDotProductAttention_1/out/kernel"] = r(heads, dh, d, scale=d**-0.5)
        ckpt[f"{p}/MultiHeadDotProductAttention_1/out/bias"] = r(d)
        ckpt[f"{p}/MlpBlock_3/Dense_0/kernel"] = r(d, mlp, scale=d**-0.5)
        ckpt[f"{p}/MlpBlock_3/Dense_0/bias"] = r(mlp)
        ckpt[f"{p}/MlpBlock_3/Dense_1/kernel"] = r(mlp, d, scale=mlp**-0.5)
        ckpt[f"{p}/MlpBlock_3/Dense_1/bias"] = r(d)
    last = d
    if pre_logits:
        ckpt["pre_logits/kernel"] = r(d, pre_logits, scale=d**-0.5)
        ckpt["pre_logits/bias"] = r(pre_logits)
        last = pre_logits
    ckpt["head/kernel"] = r(last, classes, scale=last**-0.5)
    ckpt["head/bias"] = r(classes)
    return ckpt


def resnet_checkpoint(rng, stage_units, width=64, channels=3):
    """The hybrid's stem keys: conv_root, gn_root, block{s}/unit{u}/conv{1,2,3}[,_proj] and their GroupNorms."""

    def r(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    ckpt = {"conv_root/kernel": r(7, 7, channels, width), "gn_root/scale": 1 + r(width), "gn_root/bias": r(width)}
    cin = width
    for s, units in enumerate(stage_units):
        w = width * 2**s
        for u in range(units):
            p = f"block{s + 1}/unit{u + 1}"
            shapes = {"conv1": (1, 1, cin, w), "conv2": (3, 3, w, w), "conv3": (1, 1, w, 4 * w)}
            if u == 0:
                shapes["conv_proj"] = (1, 1, cin, 4 * w)
            for name, shape in shapes.items():
                ckpt[f"{p}/{name}/kernel"] = r(*shape)
                gn = name.replace("conv", "gn")
                ckpt[f"{p}/{gn}/scale"] = 1 + r(shape[-1])
                ckpt[f"{p}/{gn}/bias"] = r(shape[-1])
            cin = 4 * w
    return ckpt
