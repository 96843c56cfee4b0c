"""The Vision Transformer as a functional Keras model, and `create_model`."""

import keras

from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.map_head import MAPHead
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import PositionEmbedding
from keras_vit.layers.register_tokens import RegisterTokens
from keras_vit.layers.resnet import ResNetStage, group_norm, std_conv
from keras_vit.layers.rms_norm import make_norm
from keras_vit.layers.rotary_embedding import VARIANTS, RotaryEmbedding
from keras_vit.models.checks import check_class_names, check_images, validate
from keras_vit.models.configs import ViTConfig, get_variant


def _dtype_name_and_map(dtype):
    """The dtype's name for the config, and the DTypePolicyMap it came as (how Keras builds a quantized model
    before loading it: every layer takes its own entry by path; `quantized_layers` records the rest), else None."""
    policy = dtype if isinstance(dtype, keras.dtype_policies.DTypePolicyMap) else None
    if policy is not None:
        dtype = policy.default_policy.name
    return (dtype.name if isinstance(dtype, keras.DTypePolicy) else dtype), policy


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(keras.Model):
    """Vision Transformer ("An Image is Worth 16x16 Words", Dosovitskiy et al., ICLR 2021), plain or hybrid.

    A functional model: NHWC float images scaled to [-1, 1] in, logits (or pooled features when
    `num_classes == 0`) out. Layer names follow the released checkpoints (`embedding`, `cls`,
    `posembed_input`, `encoderblock_{i}`, `encoder_norm`, `pre_logits`, `head`; for a hybrid also
    `conv_root`, `gn_root`, `block{s}`), so `keras_vit.load_npz` is a table lookup and intermediates can be
    read with `model.get_layer(...)`. The arguments are the fields of `ViTConfig` (see there).

    Example:
    ```python
    model = VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=2,
                              num_heads=2, mlp_dim=128, num_classes=10)
    logits = model(np.zeros((1, 32, 32, 3), "float32"))
    ```
    Most users call `keras_vit.create_model("B/16", ...)` instead.
    """

    def __init__(
        self,
        image_size=(224, 224),
        patch_size=16,
        hidden_size=768,
        num_layers=12,
        num_heads=12,
        mlp_dim=3072,
        num_classes=1000,
        channels=3,
        pooling="token",
        class_token=True,
        position_embedding="learned",
        representation_size=None,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        stochastic_depth_rate=0.0,
        layer_norm_epsilon=1e-6,
        gelu="tanh",
        head_bias_init=0.0,
        resnet_layers=None,
        resnet_width=1,
        dtype=None,
        dynamic_image_size=False,
        dynamic_resize_method="zoom",
        remat=False,
        layer_scale=None,
        num_registers=0,
        distillation_token=False,
        no_embed_class=False,
        pre_norm=False,
        patch_bias=True,
        fc_norm=False,
        resnet_norm="vit_jax",
        class_names=None,
        name="vit",
        **kwargs,
    ):
        dtype, policy = _dtype_name_and_map(dtype)
        # The second generation's options (ViTConfig documents them), absent from first-generation configs.
        extended = {k: kwargs.pop(k) for k in _EXTENDED if k in kwargs}
        config = ViTConfig(
            image_size=image_size, patch_size=patch_size, hidden_size=hidden_size, num_layers=num_layers,
            num_heads=num_heads, mlp_dim=mlp_dim, num_classes=num_classes, channels=channels, pooling=pooling,
            class_token=class_token, position_embedding=position_embedding,
            representation_size=representation_size, dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate, stochastic_depth_rate=stochastic_depth_rate,
            layer_norm_epsilon=layer_norm_epsilon, gelu=gelu, head_bias_init=head_bias_init,
            resnet_layers=resnet_layers, resnet_width=resnet_width, dtype=dtype,
            dynamic_image_size=bool(dynamic_image_size), dynamic_resize_method=dynamic_resize_method, remat=remat,
            layer_scale=layer_scale, num_registers=int(num_registers), distillation_token=bool(distillation_token),
            no_embed_class=bool(no_embed_class), pre_norm=bool(pre_norm), patch_bias=bool(patch_bias),
            fc_norm=bool(fc_norm), resnet_norm=resnet_norm, **extended,
        )  # fmt: skip
        validate(config)
        class_names = check_class_names(class_names, config.num_classes)
        policy = policy or (keras.dtype_policies.get(config.dtype) if config.dtype else keras.config.dtype_policy())
        images, outputs = _graph(config, policy)
        # The model reports the policy it was given (compute_dtype, dtype_policy), as its layers do.
        super().__init__(inputs=images, outputs=outputs, name=name, **kwargs)
        if policy.quantization_mode is None:  # a functional model takes no dtype: its layers already have theirs
            self.dtype_policy = policy
        self.config = config
        # The head's class names in output order (a pretrained checkpoint's label space), or None.
        self.class_names = class_names

    # Keras' generic input-spec check would answer first with a terser message; `call` checks instead.
    @property
    def input_spec(self):
        return None

    @input_spec.setter
    def input_spec(self, value):
        pass

    def call(self, inputs, training=None, mask=None):
        check_images(inputs, self.config, self.name)
        return super().call(inputs, training=training, mask=mask)

    def compute_output_spec(self, inputs, training=None, mask=None):
        # Arrays as symbolic tensors: the layers' compute_output_shape read the shape of a tensor argument only.
        if not isinstance(inputs, keras.KerasTensor) and hasattr(inputs, "shape"):
            inputs = keras.KerasTensor(tuple(inputs.shape), dtype=keras.backend.standardize_dtype(inputs.dtype))
        return super().compute_output_spec(inputs, training=training, mask=mask)

    def get_config(self):
        config = self.config.to_dict()
        if not config["remat"]:  # absent when off, as in models saved before the option existed
            del config["remat"]
        config.update(name=self.name, trainable=self.trainable)
        if self.class_names is not None:
            config["class_names"] = list(self.class_names)
        quantized = {layer.path: layer.quantization_mode for layer in self._flatten_layers() if _quantized_leaf(layer)}
        if quantized:  # absent unless `model.quantize` ran: the layers to quantize again before the weights load
            config["quantized_layers"] = quantized
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        quantized = config.pop("quantized_layers", None) or {}
        # int8 / float8 layers built quantized, as Keras builds a quantized model before loading it (the same
        # variables in the same order); int4, whose quantize() takes options a policy name cannot state, after.
        built = {path: mode for path, mode in quantized.items() if mode in ("int8", "float8")}
        if built:
            default = keras.dtype_policies.get(config.get("dtype") or keras.config.dtype_policy())
            policy_map = keras.dtype_policies.DTypePolicyMap(default)
            for path, mode in built.items():
                policy_map[path] = keras.dtype_policies.get(f"{mode}_from_{default.name}")
            config["dtype"] = policy_map
        model = cls(**config)
        layers = {layer.path: layer for layer in model._flatten_layers()}
        for path, mode in quantized.items():
            if path not in built:
                layers[path].quantize(mode)
        return model


_EXTENDED = (
    "rope", "rope_ref_grid", "rope_offset", "rope_base", "rope_rescale", "mlp_type", "mlp_norm", "attention_norm",
    "qkv_bias", "proj_bias", "mlp_bias", "norm", "patch_norm", "encoder_norm", "map_heads", "map_mlp_dim",
)  # fmt: skip


def _default(policy):
    return policy.default_policy if isinstance(policy, keras.dtype_policies.DTypePolicyMap) else policy


def _quantized_leaf(layer):
    return getattr(layer, "quantization_mode", None) is not None and len(list(layer._flatten_layers())) == 1


def _graph(config, policy):
    """(images input, output tensor) of the functional model `config` describes, its layers under `policy` (a
    `DTypePolicy`, or a `DTypePolicyMap` from which each layer takes its own entry)."""
    spatial = (None, None) if config.dynamic_image_size else config.image_size
    images = keras.Input(shape=(*spatial, config.channels), name="images")
    x = images
    if config.resnet_layers is not None:
        x = _resnet_stem(x, config, policy)
    x = PatchEmbedding(
        config.hidden_size, config.patch_size, use_bias=config.patch_bias, name="embedding", dtype=policy
    )(x)
    if config.patch_norm:
        x = make_norm(config.norm, config.layer_norm_epsilon, name="patch_norm", dtype=policy)(x)
    x = _tokens(x, images, config, policy)
    x = keras.layers.Dropout(config.dropout_rate, name="dropout", dtype=policy)(x)
    if config.pre_norm:
        x = make_norm(config.norm, config.layer_norm_epsilon, name="norm_pre", dtype=policy)(x)
    x = _encoder(x, config, policy, _rope(images, config, policy))
    return images, _head(x, config, policy)


def _rope(images, config, policy):
    """The `RotaryEmbedding` table of the input's grid (None without rotary embeddings)."""
    if config.rope is None:
        return None
    step = config.feature_stride * config.patch_size
    return RotaryEmbedding(
        config.rope, config.hidden_size // config.num_heads, config.grid_size, config.num_prefix_tokens,
        ref_grid=config.rope_ref_grid, base=config.rope_base, offset=config.rope_offset,
        patch_stride=step if config.dynamic_image_size else None, rescale=config.rope_rescale, name="rope",
        dtype=policy,
    )(images)  # fmt: skip


def _block_options(config):
    """`EncoderBlock`'s second-generation arguments, only where they differ from its defaults."""
    options = dict(
        mlp_type=config.mlp_type, mlp_norm=config.mlp_norm, attention_norm=config.attention_norm,
        biases=config.attention_biases, mlp_bias=config.mlp_bias, norm=config.norm,
        rope_layout=VARIANTS[config.rope][0] if config.rope else None,
    )  # fmt: skip
    defaults = dict(
        mlp_type="gelu", mlp_norm=False, attention_norm=False, biases=("query", "key", "value", "out"),
        mlp_bias=True, norm="layer", rope_layout=None,
    )  # fmt: skip
    return {k: v for k, v in options.items() if v != defaults[k]}


def _encoder(x, config, policy, rope=None):
    """The `encoderblock_{i}` stack, its stochastic-depth rate rising linearly from 0 to the configured rate."""
    extra = {} if rope is None else {"rope": rope}
    for i in range(config.num_layers):
        x = EncoderBlock(
            config.num_heads,
            config.mlp_dim,
            dropout_rate=config.dropout_rate,
            attention_dropout_rate=config.attention_dropout_rate,
            drop_path_rate=config.stochastic_depth_rate * i / max(config.num_layers - 1, 1),
            layer_norm_epsilon=config.layer_norm_epsilon,
            gelu=config.gelu,
            remat=config.remat,
            layer_scale=config.layer_scale,
            name=f"encoderblock_{i}",
            dtype=policy,
            **_block_options(config),
        )(x, **extra)
    return x


def _tokens(x, images, config, policy):
    """Patch tokens -> the encoder's input: prefix tokens (class, distillation, registers) and position embedding."""
    prefix = int(config.class_token) + int(config.distillation_token)

    def position(x, rows):
        if not config.dynamic_image_size:
            return PositionEmbedding(
                config.grid_size, rows, kind=config.position_embedding, name="posembed_input", dtype=policy
            )(x)
        step = config.feature_stride * config.patch_size
        return PositionEmbedding(
            config.grid_size, rows, kind=config.position_embedding, name="posembed_input", dtype=policy,
            resize_method=config.dynamic_resize_method, patch_stride=step,
        )(x, images=images)  # fmt: skip

    if config.position_embedding == "none":  # DINOv3: rotary embeddings alone
        position = lambda x, rows: x  # noqa: E731
    if config.no_embed_class:
        x = position(x, 0)
    if config.distillation_token:
        x = ClassToken(name="dist", dtype=policy)(x)
    if config.class_token:
        x = ClassToken(name="cls", dtype=policy)(x)
    if not config.no_embed_class:
        x = position(x, prefix)
    if config.num_registers:
        x = RegisterTokens(config.num_registers, insert_at=prefix, name="registers", dtype=policy)(x)
    return x


def _head(x, config, policy):
    """Encoded tokens -> pooled features -> logits (`encoder_norm`, `pool`, `pre_logits`, `head`)."""
    if not config.fc_norm and config.encoder_norm:
        x = make_norm(config.norm, config.layer_norm_epsilon, name="encoder_norm", dtype=policy)(x)
    # Logits in float32 even under a mixed policy, as Keras' mixed-precision guide asks of the last layer.
    head_dtype = "float32" if _default(policy).name.startswith("mixed") else policy

    def head(name):
        return keras.layers.Dense(
            config.num_classes,
            kernel_initializer="zeros",
            bias_initializer=keras.initializers.Constant(config.head_bias_init),
            name=name,
            dtype=head_dtype,
        )

    if config.distillation_token:
        cls = TokenPooling("token", config.num_prefix_tokens, name="pool", dtype=policy)(x)
        dist = TokenPooling("distillation", config.num_prefix_tokens, name="pool_dist", dtype=policy)(x)
        if config.num_classes:
            cls, dist = head("head")(cls), head("head_dist")(dist)
        average = keras.layers.Average(name="head_average", dtype=head_dtype if config.num_classes else policy)
        return average([cls, dist])
    if config.pooling == "map":
        x = MAPHead(
            config.map_heads or config.num_heads, config.map_mlp_dim or config.mlp_dim, gelu=config.gelu,
            layer_norm_epsilon=config.layer_norm_epsilon, name="MAPHead_0", dtype=policy,
        )(x)  # fmt: skip
    else:
        x = TokenPooling(config.pooling, config.num_prefix_tokens, name="pool", dtype=policy)(x)
    if config.fc_norm:
        x = make_norm(config.norm, config.layer_norm_epsilon, name="fc_norm", dtype=policy)(x)
    if config.representation_size:
        x = keras.layers.Dense(config.representation_size, activation="tanh", name="pre_logits", dtype=policy)(x)
    if config.num_classes:
        x = head("head")(x)
    return x


def _resnet_stem(x, config, policy):
    width, norm = 64 * config.resnet_width, config.resnet_norm
    x = std_conv(width, 7, 2, "conv_root", policy, norm)(x)
    x = group_norm("gn_root", policy, norm)(x)
    x = keras.layers.ReLU(name="root_relu", dtype=policy)(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="root_pool", dtype=policy)(x)
    for i, units in enumerate(config.resnet_layers):  # none: the root alone (timm's vit_tiny_r_s16_p8_*)
        x = ResNetStage(units, width * 2**i, strides=1 if i == 0 else 2, norm=norm, name=f"block{i + 1}", dtype=policy)(
            x
        )
    return x


def create_model(variant="B/16", **overrides):
    """Builds a Vision Transformer from a variant name and optional overrides.

    Args:
        variant: "Ti/16", "S/16", "S/32", "B/16", "B/32", "L/16", "L/32", "H/14" (any of Ti/S/B/L/H with patch
            8, 14, 16 or 32), "R50+B/16", "R26+S/32" (hybrids), "testing" (tiny), or a `ViTConfig`.
        **overrides: any `ViTConfig` field, e.g. `image_size=384` or `(h, w)`, `num_classes=10`,
            `pooling="gap"`, `representation_size=768`, `dropout_rate=0.1`, `stochastic_depth_rate=0.1`,
            `layer_norm_epsilon=1e-6`, `gelu="exact"`, `dtype="mixed_bfloat16"`, `dynamic_image_size=True` (any
            image size, position embeddings interpolated at run time), plus `name` and `class_names`
            (one name per output class, kept in the model's config and `model.class_names`).

    Returns:
        A `VisionTransformer` (a functional `keras.Model`): NHWC float32 images in [-1, 1] -> logits.

    Example:
    ```python
    model = keras_vit.create_model("B/16", image_size=384, num_classes=10)
    keras_vit.load_npz(model, "ViT-B_16.npz")  # position embeddings resized 14x14 -> 24x24
    ```
    """
    name = overrides.pop("name", "vit")
    class_names = overrides.pop("class_names", None)
    config = get_variant(variant).replace(**overrides)
    return VisionTransformer(**config.to_dict(), class_names=class_names, name=name)


def fixed_size_model(model):
    """`model` with a fixed (H, W, C) input at its `image_size`, for what needs static shapes (TFLite).

    A model built with `dynamic_image_size=True` is rebuilt without it and given a copy of its weights; on its
    stored grid it computes exactly what the dynamic model computes. Any other model is returned as it is.
    """
    config = getattr(model, "config", None)
    if not isinstance(model, VisionTransformer) or not config.dynamic_image_size:
        return model
    fixed = VisionTransformer.from_config({**model.get_config(), "dynamic_image_size": False})
    fixed.set_weights(model.get_weights())
    return fixed
