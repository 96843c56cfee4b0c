"""The ResNet stem of the hybrid R50+ViT (BiT-style: weight-standardised convs, GroupNorm)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Conv2D):
    """Conv2D with weight standardisation: each output filter's kernel is shifted to zero mean and divided by
    (its standard deviation + epsilon) before the convolution, as in BiT and the original hybrid ViT
    (epsilon 1e-5, added to the std)."""

    def __init__(self, *args, ws_epsilon=1e-5, **kwargs):
        super().__init__(*args, **kwargs)
        self.ws_epsilon = float(ws_epsilon)

    def convolution_op(self, inputs, kernel):
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        std = ops.sqrt(ops.mean(ops.square(kernel - mean), axis=(0, 1, 2), keepdims=True))
        return super().convolution_op(inputs, (kernel - mean) / (std + self.ws_epsilon))

    def get_config(self):
        config = super().get_config()
        config.update(ws_epsilon=self.ws_epsilon)
        return config


def _conv(filters, kernel, strides, name, policy):
    return StdConv2D(filters, kernel, strides=strides, padding="same", use_bias=False, name=name, dtype=policy)


def _norm(name, policy, gamma="ones"):
    return keras.layers.GroupNormalization(groups=32, epsilon=1e-6, gamma_initializer=gamma, name=name, dtype=policy)


@keras.saving.register_keras_serializable(package="keras_vit")
class ResidualUnit(keras.layers.Layer):
    """Bottleneck unit: 1x1 (width) -> 3x3 (width, stride) -> 1x1 (4 x width), GroupNorm after each conv,
    projection shortcut when the shape changes, ReLU after the sum. Sub-layer names follow the checkpoint
    (`conv1..3`, `gn1..3`, `conv_proj`, `gn_proj`)."""

    def __init__(self, width, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.width = int(width)
        self.strides = int(strides)
        policy = self.dtype_policy
        self.conv1 = _conv(self.width, 1, 1, "conv1", policy)
        self.gn1 = _norm("gn1", policy)
        self.conv2 = _conv(self.width, 3, self.strides, "conv2", policy)
        self.gn2 = _norm("gn2", policy)
        self.conv3 = _conv(self.width * 4, 1, 1, "conv3", policy)
        self.gn3 = _norm("gn3", policy, gamma="zeros")
        self.conv_proj = self.gn_proj = None

    def build(self, input_shape):
        if input_shape[-1] != self.width * 4 or self.strides != 1:
            self.conv_proj = _conv(self.width * 4, 1, self.strides, "conv_proj", self.dtype_policy)
            self.gn_proj = _norm("gn_proj", self.dtype_policy)
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
        config.update(width=self.width, strides=self.strides)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStage(keras.layers.Layer):
    """`num_units` residual units (`unit1`, `unit2`, ...); the first one carries the stage's stride."""

    def __init__(self, num_units, width, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.num_units = int(num_units)
        self.width = int(width)
        self.strides = int(strides)
        self.units = [
            ResidualUnit(self.width, self.strides if i == 0 else 1, name=f"unit{i + 1}", dtype=self.dtype_policy)
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
        config.update(num_units=self.num_units, width=self.width, strides=self.strides)
        return config
