"""The Vision Transformer as a functional Keras model, and `create_model`."""

import keras

from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import RESIZE_METHODS, PositionEmbedding
from keras_vit.layers.resnet import ResNetStage, StdConv2D
from keras_vit.models.configs import ViTConfig, get_variant


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
        class_names=None,
        name="vit",
        **kwargs,
    ):
        if isinstance(dtype, keras.DTypePolicy):
            dtype = dtype.name
        config = ViTConfig(
            image_size=image_size, patch_size=patch_size, hidden_size=hidden_size, num_layers=num_layers,
            num_heads=num_heads, mlp_dim=mlp_dim, num_classes=num_classes, channels=channels, pooling=pooling,
            class_token=class_token, position_embedding=position_embedding,
            representation_size=representation_size, dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate, stochastic_depth_rate=stochastic_depth_rate,
            layer_norm_epsilon=layer_norm_epsilon, gelu=gelu, head_bias_init=head_bias_init,
            resnet_layers=resnet_layers, resnet_width=resnet_width, dtype=dtype,
            dynamic_image_size=bool(dynamic_image_size), dynamic_resize_method=dynamic_resize_method, remat=remat,
        )  # fmt: skip
        _validate(config)
        class_names = _check_class_names(class_names, config.num_classes)
        policy = keras.dtype_policies.get(dtype) if dtype else keras.config.dtype_policy()

        spatial = (None, None) if config.dynamic_image_size else config.image_size
        images = keras.Input(shape=(*spatial, config.channels), name="images")
        x = images
        if config.resnet_layers is not None:
            x = _resnet_stem(x, config, policy)
        x = PatchEmbedding(config.hidden_size, config.patch_size, name="embedding", dtype=policy)(x)
        prefix = 1 if config.class_token else 0
        if config.class_token:
            x = ClassToken(name="cls", dtype=policy)(x)
        if config.dynamic_image_size:
            step = config.feature_stride * config.patch_size
            x = PositionEmbedding(
                config.grid_size, prefix, kind=config.position_embedding, name="posembed_input", dtype=policy,
                resize_method=config.dynamic_resize_method, patch_stride=step,
            )(x, images=images)  # fmt: skip
        else:
            x = PositionEmbedding(
                config.grid_size, prefix, kind=config.position_embedding, name="posembed_input", dtype=policy
            )(x)
        x = keras.layers.Dropout(config.dropout_rate, name="dropout", dtype=policy)(x)
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
                name=f"encoderblock_{i}",
                dtype=policy,
            )(x)
        x = LayerNorm(epsilon=config.layer_norm_epsilon, name="encoder_norm", dtype=policy)(x)
        x = TokenPooling(config.pooling, prefix, name="pool", dtype=policy)(x)
        if config.representation_size:
            x = keras.layers.Dense(config.representation_size, activation="tanh", name="pre_logits", dtype=policy)(x)
        if config.num_classes:
            # Logits in float32 even under a mixed policy, as Keras' mixed-precision guide asks of the last layer.
            x = keras.layers.Dense(
                config.num_classes,
                kernel_initializer="zeros",
                bias_initializer=keras.initializers.Constant(config.head_bias_init),
                name="head",
                dtype="float32" if policy.name.startswith("mixed") else policy,
            )(x)
        super().__init__(inputs=images, outputs=x, name=name, **kwargs)
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
        _check_images(inputs, self.config, self.name)
        return super().call(inputs, training=training, mask=mask)

    def get_config(self):
        config = self.config.to_dict()
        if not config["remat"]:  # absent when off, as in models saved before the option existed
            del config["remat"]
        config.update(name=self.name, trainable=self.trainable)
        if self.class_names is not None:
            config["class_names"] = list(self.class_names)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _check_images(images, config, name):
    """Fails early, with the fix, on images the model would reject deep inside (or silently misread)."""
    shape = tuple(images.shape)
    want = (*config.image_size, config.channels)
    step = config.feature_stride * config.patch_size
    if config.dynamic_image_size:
        expected = f"images shaped (batch, height, width, {want[2]}), height and width multiples of {step}"
    else:
        expected = f"images shaped (batch, {want[0]}, {want[1]}, {want[2]})"
    expected += ", NHWC float in [-1, 1]"
    if len(shape) != 4:
        raise ValueError(f"Model '{name}' expects {expected}. Received a tensor of rank {len(shape)}: {shape}.")
    if shape[3] is not None and shape[3] != want[2]:
        fix = " (grey images: repeat the channel 3 times)" if shape[3] == 1 else ""
        raise ValueError(
            f"Model '{name}' expects {want[2]} channels but received {shape[3]}: shape {shape}{fix}. "
            f"Expected {expected}."
        )
    if config.dynamic_image_size:
        bad = [s for s in shape[1:3] if s is not None and (s <= 0 or s % step)]
        if bad:
            near = [max(step, s // step * step) for s in shape[1:3]]
            raise ValueError(
                f"Model '{name}' (dynamic_image_size=True) takes images whose height and width are multiples of "
                f"{step} ({_step_reason(config)}), but received {shape[1]}x{shape[2]} (shape {shape}). "
                f"Resize or crop them, e.g. to {near[0]}x{near[1]}."
            )
    elif shape[1:3] != want[:2] and None not in shape[1:3]:
        raise ValueError(
            f"Model '{name}' was built for {want[0]}x{want[1]} images but received {shape[1]}x{shape[2]} "
            f"(shape {shape}). Resize the images, or build a model for this size "
            f"(create_model(..., image_size={shape[1:3]}) and load_npz, which interpolates position embeddings), "
            f"or one that takes any size (create_model(..., dynamic_image_size=True))."
        )
    dtype = keras.backend.standardize_dtype(images.dtype)
    if "int" in dtype or dtype == "bool":
        raise ValueError(
            f"Model '{name}' received {dtype} images; it expects float images scaled to [-1, 1]. "
            f"Convert first: images = (images.astype('float32') - 127.5) / 127.5."
        )


def _step_reason(config):
    if config.feature_stride == 1:
        return f"patch_size={config.patch_size}"
    return f"the hybrid's ResNet output stride {config.feature_stride} x patch_size {config.patch_size}"


def _validate(config):
    def positive(name):
        value = getattr(config, name)
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer. Received: {name}={value!r}")

    for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "channels"):
        positive(name)
    if config.num_classes < 0:
        raise ValueError(f"num_classes must be >= 0 (0 returns the pooled features). Received: {config.num_classes}")
    if config.hidden_size % config.num_heads:
        raise ValueError(
            f"hidden_size must be divisible by num_heads. Received: hidden_size={config.hidden_size}, "
            f"num_heads={config.num_heads}"
        )
    step = config.feature_stride * config.patch_size
    for size, what in zip(config.image_size, ("height", "width")):
        if size <= 0 or size % step:
            raise ValueError(
                f"The image {what} must be a positive multiple of {step} ({_step_reason(config)}). Received: "
                f"image_size={config.image_size}. Nearest valid sizes: {max(step, size // step * step)} "
                f"or {(size // step + 1) * step}."
            )
    for name in ("dropout_rate", "attention_dropout_rate", "stochastic_depth_rate"):
        value = getattr(config, name)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1). Received: {name}={value}")
    rates = {n: getattr(config, n) for n in ("dropout_rate", "attention_dropout_rate", "stochastic_depth_rate")}
    if config.remat and any(rates.values()):
        received = ", ".join(f"{n}={v}" for n, v in rates.items())
        raise ValueError(
            f"remat=True needs zero dropout and stochastic-depth rates: the backward pass recomputes each block and "
            f"would draw new random masks. Received: {received}; set them to 0 or remat=False."
        )
    if config.pooling == "token" and not config.class_token:
        raise ValueError("pooling='token' needs class_token=True; use pooling='gap' for a model without one.")
    if config.dynamic_resize_method not in RESIZE_METHODS:
        raise ValueError(
            f"dynamic_resize_method must be one of {RESIZE_METHODS}. Received: {config.dynamic_resize_method!r}"
        )
    if config.dynamic_image_size and config.position_embedding != "learned":
        raise ValueError(
            f"dynamic_image_size=True interpolates learned position embeddings; position_embedding="
            f"{config.position_embedding!r} is a fixed table. Build a model per image size "
            f"(create_model(..., image_size=(h, w))) instead."
        )


def _check_class_names(class_names, num_classes):
    if class_names is None:
        return None
    if isinstance(class_names, str):
        raise ValueError("class_names must be a list of names, one per output, not one string.")
    names = [str(n) for n in class_names]
    if len(names) != num_classes:
        raise ValueError(
            f"class_names has {len(names)} names for a head of {num_classes} classes. Pass one name per output "
            f"class, or class_names=None."
        )
    return tuple(names)


def _resnet_stem(x, config, policy):
    width = 64 * config.resnet_width
    x = StdConv2D(width, 7, strides=2, padding="same", use_bias=False, name="conv_root", dtype=policy)(x)
    x = keras.layers.GroupNormalization(groups=32, epsilon=1e-6, name="gn_root", dtype=policy)(x)
    x = keras.layers.ReLU(name="root_relu", dtype=policy)(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="root_pool", dtype=policy)(x)
    for i, units in enumerate(config.resnet_layers):
        x = ResNetStage(units, width * 2**i, strides=1 if i == 0 else 2, name=f"block{i + 1}", dtype=policy)(x)
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
