"""SigLIP 2 NaFlex: the Vision Transformer on padded patch sequences of any aspect ratio (a functional model)."""

import keras

from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.map_head import MAPHead
from keras_vit.layers.mlp import GELU_FLAVOURS
from keras_vit.layers.naflex_position_embedding import NaFlexPositionEmbedding
from keras_vit.layers.pooling import TokenPooling
from keras_vit.models.checks import check_class_names

INPUTS = ("patches", "mask", "grid")
POOLINGS = ("map", "gap")


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexViT(keras.Model):
    """A ViT that takes each image at its own aspect ratio as up to `max_num_patches` patches (NaViT / FlexiViT;
    SigLIP 2's NaFlex form, "SigLIP 2", Tschannen et al., 2025).

    Inputs (a dict, or a list in this order), from `keras_vit.naflex_inputs.naflex_batch`:
        patches: (B, N, P * P * C) float32, each image's patches in row-major order, each flattened (ph, pw, C),
            zero rows after them; N = `max_num_patches`.
        mask: (B, N) int32, 1 on an image's patches, 0 on padding.
        grid: (B, 2) int32, each image's (rows, columns) of patches.

    The same layers and names as `VisionTransformer`: `embedding` (a Dense on flattened patches: the patch conv's
    kernel reshaped), `posembed_input` (`NaFlexPositionEmbedding`: the (gh, gw) table resized per image),
    `encoderblock_{i}` (padded keys masked), `encoder_norm`, `MAPHead_0` or `pool` and `head`.
    Padding rows of the encoder's outputs carry no meaning. N is fixed per model, so that every export format
    takes it.

    Args:
        max_num_patches: N.
        patch_size: P in pixels.
        position_grid: (gh, gw) of the learned position table.
        hidden_size, num_layers, num_heads, mlp_dim: D, L, H, M.
        num_classes: size of the linear head; 0 returns the pooled features.
        channels: C.
        pooling: "map" (SigLIP's attention-pooling head, padded keys masked) or "gap" (the mean of the valid patch
            tokens after `encoder_norm`, as SigLIP's `gap` towers).
        layer_norm_epsilon, gelu, dropout_rate, attention_dropout_rate, stochastic_depth_rate: as `ViTConfig`.
        class_names: one name per output class, or None.
    """

    def __init__(
        self,
        max_num_patches=256,
        patch_size=16,
        position_grid=(16, 16),
        hidden_size=768,
        num_layers=12,
        num_heads=12,
        mlp_dim=3072,
        num_classes=0,
        channels=3,
        pooling="map",
        layer_norm_epsilon=1e-6,
        gelu="tanh",
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        stochastic_depth_rate=0.0,
        dtype=None,
        class_names=None,
        name="naflex_vit",
        **kwargs,
    ):
        dtype = dtype.name if isinstance(dtype, keras.DTypePolicy) else dtype
        options = dict(
            max_num_patches=int(max_num_patches), patch_size=int(patch_size),
            position_grid=[int(g) for g in position_grid], hidden_size=int(hidden_size), num_layers=int(num_layers),
            num_heads=int(num_heads), mlp_dim=int(mlp_dim), num_classes=int(num_classes), channels=int(channels),
            pooling=pooling, layer_norm_epsilon=float(layer_norm_epsilon), gelu=gelu,
            dropout_rate=float(dropout_rate), attention_dropout_rate=float(attention_dropout_rate),
            stochastic_depth_rate=float(stochastic_depth_rate), dtype=dtype,
        )  # fmt: skip
        _validate(options)
        class_names = check_class_names(class_names, options["num_classes"])
        inputs, outputs = _graph(options)
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        self.options = options
        self.class_names = class_names

    def get_config(self):
        config = dict(self.options, name=self.name, trainable=self.trainable)
        if self.class_names is not None:
            config["class_names"] = list(self.class_names)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _validate(options):
    for key in ("max_num_patches", "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "channels"):
        if options[key] < 1:
            raise ValueError(f"{key} must be a positive integer. Received: {key}={options[key]}")
    if len(options["position_grid"]) != 2 or min(options["position_grid"]) < 1:
        raise ValueError(f"position_grid must be two positive ints. Received: position_grid={options['position_grid']}")
    if options["hidden_size"] % options["num_heads"]:
        raise ValueError(
            f"hidden_size must be divisible by num_heads. Received: hidden_size={options['hidden_size']}, "
            f"num_heads={options['num_heads']}"
        )
    if options["pooling"] not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}. Received: pooling={options['pooling']!r}")
    if options["gelu"] not in GELU_FLAVOURS:
        raise ValueError(f"gelu must be one of {GELU_FLAVOURS}. Received: gelu={options['gelu']!r}")


def _graph(options):
    """([patches, mask, grid] inputs, output tensor) of the functional model."""
    policy = keras.dtype_policies.get(options["dtype"]) if options["dtype"] else keras.config.dtype_policy()
    n, p, c = options["max_num_patches"], options["patch_size"], options["channels"]
    patches = keras.Input(shape=(n, p * p * c), name="patches")
    mask = keras.Input(shape=(n,), dtype="int32", name="mask")
    grid = keras.Input(shape=(2,), dtype="int32", name="grid")
    x = keras.layers.Dense(options["hidden_size"], name="embedding", dtype=policy)(patches)
    x = NaFlexPositionEmbedding(options["position_grid"], name="posembed_input", dtype=policy)(x, grid)
    x = keras.layers.Dropout(options["dropout_rate"], name="dropout", dtype=policy)(x)
    layers = options["num_layers"]
    for i in range(layers):
        x = EncoderBlock(
            options["num_heads"], options["mlp_dim"], dropout_rate=options["dropout_rate"],
            attention_dropout_rate=options["attention_dropout_rate"],
            drop_path_rate=options["stochastic_depth_rate"] * i / max(layers - 1, 1),
            layer_norm_epsilon=options["layer_norm_epsilon"], gelu=options["gelu"], name=f"encoderblock_{i}",
            dtype=policy,
        )(x, key_mask=mask)  # fmt: skip
    x = LayerNorm(epsilon=options["layer_norm_epsilon"], name="encoder_norm", dtype=policy)(x)
    if options["pooling"] == "map":
        x = MAPHead(
            options["num_heads"], options["mlp_dim"], gelu=options["gelu"],
            layer_norm_epsilon=options["layer_norm_epsilon"], name="MAPHead_0", dtype=policy,
        )(x, key_mask=mask)  # fmt: skip
    else:  # the mean of the valid patch tokens (SigLIP's `gap` towers)
        x = TokenPooling("gap", 0, name="pool", dtype=policy)(x, valid=mask)
    if options["num_classes"]:
        head_dtype = "float32" if policy.name.startswith("mixed") else policy
        x = keras.layers.Dense(options["num_classes"], kernel_initializer="zeros", name="head", dtype=head_dtype)(x)
    return [patches, mask, grid], x
