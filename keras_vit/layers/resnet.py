"""The ResNet stem of the hybrid R50+ViT (BiT-style: weight-standardised convs, GroupNorm)."""

import keras
from keras import ops

# The stem's constants as each library computes them: (weight-standardisation form, its epsilon, GroupNorm epsilon).
# vit_jax (models_resnet.py) divides by std + 1e-5 and uses Flax's GroupNorm (1e-6); timm's hybrids
# (vision_transformer_hybrid.py `_resnetv2`) use StdConv2dSame(eps=1e-8), a batch norm of the kernel, so
# sqrt(var + 1e-8), and GroupNormAct's default epsilon 1e-5.
RESNET_NORMS = {"vit_jax": ("std", 1e-5, 1e-6), "timm": ("var", 1e-8, 1e-5)}


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Conv2D):
    """Conv2D with weight standardisation: each output filter's kernel is shifted to zero mean and divided by
    (its standard deviation + epsilon) before the convolution, as in BiT and the original hybrid ViT
    (epsilon 1e-5, added to the std); with `ws_form="var"` by sqrt(variance + epsilon) instead (timm's)."""

    def __init__(self, *args, ws_epsilon=1e-5, ws_form="std", **kwargs):
        if ws_form not in ("std", "var"):
            raise ValueError(f"ws_form must be 'std' or 'var'. Received: ws_form={ws_form!r}")
        super().__init__(*args, **kwargs)
        self.ws_epsilon = float(ws_epsilon)
        self.ws_form = ws_form

    def convolution_op(self, inputs, kernel):
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        var = ops.mean(ops.square(kernel - mean), axis=(0, 1, 2), keepdims=True)
        if self.ws_form == "var":
            return super().convolution_op(inputs, (kernel - mean) / ops.sqrt(var + self.ws_epsilon))
        return super().convolution_op(inputs, (kernel - mean) / (ops.sqrt(var) + self.ws_epsilon))

    def get_config(self):
        config = super().get_config()
        config.update(ws_epsilon=self.ws_epsilon, ws_form=self.ws_form)
        return config


def std_conv(filters, kernel, strides, name, policy, norm="vit_jax"):
    """A SAME-padded, bias-free `StdConv2D` with the constants of `norm` (a `RESNET_NORMS` key)."""
    form, epsilon, _ = RESNET_NORMS[norm]
    return StdConv2D(
        filters, kernel, strides=strides, padding="same", use_bias=False, ws_epsilon=epsilon, ws_form=form,
        name=name, dtype=policy,
    )  # fmt: skip


def group_norm(name, policy, norm="vit_jax", gamma="ones"):
    """GroupNorm over 32 groups with the epsilon of `norm` (a `RESNET_NORMS` key)."""
    epsilon = RESNET_NORMS[norm][2]
    return keras.layers.GroupNormalization(groups=32, epsilon=epsilon, gamma_initializer=gamma, name=name, dtype=policy)


@keras.saving.register_keras_serializable(package="keras_vit")
class ResidualUnit(keras.layers.Layer):
    """Bottleneck unit: 1x1 (width) -> 3x3 (width, stride) -> 1x1 (4 x width), GroupNorm after each conv,
    projection shortcut when the shape changes, ReLU after the sum. Sub-layer names follow the checkpoint
    (`conv1..3`, `gn1..3`, `conv_proj`, `gn_proj`); `norm` names the constants (`RESNET_NORMS`)."""

    def __init__(self, width, strides=1, norm="vit_jax", **kwargs):
        if norm not in RESNET_NORMS:
            raise ValueError(f"norm must be one of {tuple(RESNET_NORMS)}. Received: norm={norm!r}")
        super().__init__(**kwargs)
        self.width = int(width)
        self.strides = int(strides)
        self.norm = norm
        policy = self.dtype_policy
        self.conv1 = std_conv(self.width, 1, 1, "conv1", policy, norm)
        self.gn1 = group_norm("gn1", policy, norm)
        self.conv2 = std_conv(self.width, 3, self.strides, "conv2", policy, norm)
        self.gn2 = group_norm("gn2", policy, norm)
        self.conv3 = std_conv(self.width * 4, 1, 1, "conv3", policy, norm)
        self.gn3 = group_norm("gn3", policy, norm, gamma="zeros")
        self.conv_proj = self.gn_proj = None

    def build(self, input_shape):
        if input_shape[-1] != self.width * 4 or self.strides != 1:
            self.conv_proj = std_conv(self.width * 4, 1, self.strides, "conv_proj", self.dtype_policy, self.norm)
            self.gn_proj = group_norm("gn_proj", self.dtype_policy, self.norm)
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))
        shape = input_shape
        for conv, norm in ((self.conv1, self.gn1), (self.conv2, self.gn2), (self.conv3, self.gn3)):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)

    def call(self, x):
        residual = x if self.conv_proj is None else self.gn_proj(self.conv_proj(x))
        y = ops.relu(self.gn1(self.conv1(x)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(residual + y)

    def compute_output_shape(self, input_shape):
        shape = self.conv2.compute_output_shape((*input_shape[:-1], self.width))
        return (*shape[:-1], self.width * 4)

    def get_config(self):
        config = super().get_config()
        config.update(width=self.width, strides=self.strides, norm=self.norm)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStage(keras.layers.Layer):
    """`num_units` residual units (`unit1`, `unit2`, ...); the first one carries the stage's stride."""

    def __init__(self, num_units, width, strides=1, norm="vit_jax", **kwargs):
        super().__init__(**kwargs)
        self.num_units = int(num_units)
        self.width = int(width)
        self.strides = int(strides)
        self.norm = norm
        self.units = [
            ResidualUnit(
                self.width, self.strides if i == 0 else 1, norm=norm, name=f"unit{i + 1}", dtype=self.dtype_policy
            )
            for i in range(self.num_units)
        ]

    def build(self, input_shape):
        shape = input_shape
        for unit in self.units:
            unit.build(shape)
            shape = unit.compute_output_shape(shape)

    def call(self, x):
        for unit in self.units:
            x = unit(x)
        return x

    def compute_output_shape(self, input_shape):
        for unit in self.units:
            input_shape = unit.compute_output_shape(input_shape)
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(num_units=self.num_units, width=self.width, strides=self.strides, norm=self.norm)
        return config
