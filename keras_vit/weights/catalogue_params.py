"""Parameter counts of catalogue entries, from their architecture, and the float32 size they give a file."""

from keras_vit.models.configs import get_variant

MIB = 2**20


def _resnet_stem(layers, width):
    """Parameters of a BiT ResNet stem (vit_jax models_resnet.py: bias-free convs, GroupNorm scale and bias)."""
    base = 64 * width
    total = 7 * 7 * 3 * base + 2 * base  # root conv and its GroupNorm
    cin = base
    for stage, units in enumerate(layers):
        w = base * 2**stage
        for unit in range(units):
            total += cin * w + 9 * w * w + w * 4 * w + 2 * (w + w + 4 * w)  # three convs, three GroupNorms
            if unit == 0:
                total += cin * 4 * w + 2 * 4 * w  # the projection and its GroupNorm
            cin = 4 * w
    return total, cin


def parameter_count(entry):
    """The parameters of `entry`'s file as the architecture gives them: stem, embeddings, blocks, norm, pre_logits
    (when `representation_size` says so) and head, at the entry's resolution and class count."""
    config = get_variant(entry.variant)
    d, mlp = config.hidden_size, config.mlp_dim
    grid = entry.image_size // (config.patch_size * config.feature_stride)
    total, channels = _resnet_stem(config.resnet_layers, config.resnet_width) if config.resnet_layers else (0, 3)
    total += channels * config.patch_size**2 * d + d  # patch embedding
    tokens = grid * grid + (entry.pooling == "token")
    total += d * (entry.pooling == "token")  # class token
    total += tokens * d * (entry.position_embedding == "learned")
    block = 2 * 2 * d + 4 * (d * d + d) + (d * mlp + mlp) + (mlp * d + d)  # two LayerNorms, attention, MLP
    total += config.num_layers * block + 2 * d  # the blocks and the encoder norm
    width = entry.representation_size or d
    if entry.representation_size:
        total += d * width + width
    return total + width * entry.num_classes + entry.num_classes


def float32_mib(entry):
    """The size in MiB of `entry`'s parameters as float32 (an `.npz` adds a few hundred bytes per array)."""
    return parameter_count(entry) * 4 / MIB
