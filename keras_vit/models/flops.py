"""Analytical FLOP counts of a ViT (multiply-add = 2 FLOPs): the basis of the benchmark's MFU and of the
trainer's choice of the nearest measured model (training/advice.py). Pure Python: no Keras import."""


def vit_forward_flops(
    image_size,
    patch_size,
    hidden_size,
    num_layers,
    mlp_dim,
    num_classes,
    channels=3,
    class_token=True,
    *,
    distillation_token=False,
    num_registers=0,
    pooling="token",
    representation_size=None,
    swiglu=False,
):
    """FLOPs of one image's forward pass, counting only matmuls/convolutions (the >99% that matters).

    Per block with T tokens, width D, MLP width M: the Q/K/V projections 2*T*D*3D, the scores and the
    weighted sum 2 * 2*T*T*D, the output projection 2*T*D*D, the MLP 2 * 2*T*D*M (3 * 2*T*D*M with `swiglu`, whose
    gate is a third product). T counts every token the blocks see: the patches, the class and distillation tokens
    and the registers. The attention-pooling head
    (`pooling="map"`: one learned query over the T tokens) adds its query 2*D*D, keys and values 2*T*D*2D, scores
    and sum 2 * 2*T*D, output 2*D*D and MLP 2 * 2*D*M; `pre_logits` 2*D*R; each head (two with a distillation
    token) 2*width*classes. LayerNorms (`norm_pre`, `fc_norm`, the blocks') have no matmul: they add nothing here.
    Ti/16 at 224 px: 2.51 GFLOP.
    """
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    patches = (h // patch_size) * (w // patch_size)
    t = patches + int(class_token) + int(distillation_token) + int(num_registers)
    d, m = hidden_size, mlp_dim
    embed = 2 * patches * patch_size * patch_size * channels * d
    block = 2 * t * d * 3 * d + 2 * 2 * t * t * d + 2 * t * d * d + (3 if swiglu else 2) * 2 * t * d * m
    pool = 0
    if pooling == "map":
        pool = 2 * d * d + 2 * t * d * 2 * d + 2 * 2 * t * d + 2 * d * d + 2 * 2 * d * m
    width = d
    if representation_size:
        pool += 2 * d * representation_size
        width = representation_size
    head = (2 if distillation_token else 1) * 2 * width * num_classes
    return embed + num_layers * block + pool + head


def training_flops(forward_flops):
    """Forward + backward: the backward pass costs two forward passes (gradients w.r.t. inputs and weights)."""
    return 3 * forward_flops


def config_forward_flops(config):
    """`vit_forward_flops` of a `ViTConfig`; None for a hybrid, whose ResNet stem this count does not cover."""
    if getattr(config, "resnet_layers", None) is not None:
        return None
    return vit_forward_flops(config.image_size, config.patch_size, config.hidden_size, config.num_layers,
                             config.mlp_dim, config.num_classes, channels=config.channels,
                             class_token=config.class_token,
                             distillation_token=getattr(config, "distillation_token", False),
                             num_registers=getattr(config, "num_registers", 0),
                             pooling=getattr(config, "pooling", "token"),
                             representation_size=getattr(config, "representation_size", None),
                             swiglu=getattr(config, "mlp_type", "gelu") == "swiglu")  # fmt: skip
