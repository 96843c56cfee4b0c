"""`--strategy fsdp` on the JAX route: the ViT's large kernels and their optimizer state split over the devices
(docs/multihost.md); checkpoints hold whole arrays, so a sharded run resumes on any number of devices."""

import dataclasses
import math

import keras

from . import processes
from .placements import JaxPlacement

AXIS = "fsdp"

# Each large kernel, split along its hidden-size (D) axis; the MLP's along its wider M axis. Paths are
# `keras_vit.create_model`'s (the checkpoint names); `LayoutMap` matches a whole path.
LAYOUTS = {
    "embedding/kernel": (None, None, None, AXIS),  # (P, P, C, D)
    "posembed_input/pos_embedding": (None, None, AXIS),  # (1, N, D)
    r"encoderblock_\d+/MultiHeadDotProductAttention_1/(query|key|value)/kernel": (AXIS, None, None),  # (D, H, D_h)
    r"encoderblock_\d+/MultiHeadDotProductAttention_1/out/kernel": (None, None, AXIS),  # (H, D_h, D)
    r"encoderblock_\d+/MlpBlock_3/Dense_0/kernel": (None, AXIS),  # (D, M)
    r"encoderblock_\d+/MlpBlock_3/Dense_1/kernel": (AXIS, None),  # (M, D)
    "pre_logits/kernel": (AXIS, None),  # (D, R)
    "head/kernel": (AXIS, None),  # (D, K)
    # A hybrid's ResNet stem (`keras_vit.layers.resnet`): convolutions along their output channels.
    r"conv_root/kernel|block\d+/unit\d+/conv(1|2|3|_proj)/kernel": (None, None, None, AXIS),  # (kh, kw, C_in, C)
}


class FullySharded(keras.distribution.ModelParallel):
    """`ModelParallel` over a one-axis mesh that splits both the batch and the `LAYOUTS` kernels.

    A kernel whose split axis does not divide by the devices is kept whole; its path is added to `kept_whole`.
    """

    def __init__(self, devices):
        mesh = keras.distribution.DeviceMesh(shape=(len(devices),), axis_names=(AXIS,), devices=devices)
        layout_map = keras.distribution.LayoutMap(mesh)
        for pattern, axes in LAYOUTS.items():
            layout_map[pattern] = axes
        # The trainer feeds each process its own rows (training.data): Keras must not shard the dataset again.
        super().__init__(layout_map=layout_map, batch_dim_name=AXIS, auto_shard_dataset=False)
        self.kept_whole = []

    def get_variable_layout(self, variable):
        layout = super().get_variable_layout(variable)
        devices = self.device_mesh.devices.size
        if all(size % devices == 0 for size, axis in zip(variable.shape, layout.axes) if axis is not None):
            return layout
        self.kept_whole.append(variable.path)
        return keras.distribution.TensorLayout([None] * len(variable.shape), self.device_mesh)


@dataclasses.dataclass
class ShardedPlacement(JaxPlacement):
    """A `JaxPlacement` whose `distribution` is `FullySharded`; `prepare_model` says what it split."""

    sharded_fraction: float | None = None

    def prepare_model(self, model):
        """The model as it is; prints (and `metrics` records) the share of its parameters that is split."""
        sharded, total = split_parameters(model)
        self.sharded_fraction = sharded / total if total else 0.0
        devices = self.num_replicas
        per_device = (total - sharded + sharded / devices) * 4 / 2**20
        line = (
            f"[training] fsdp: {100 * self.sharded_fraction:.1f}% of the {total:,} trainable parameters split over "
            f"{devices} devices; the weights and each optimizer slot take {per_device:.3g} MiB per device "
            f"instead of {total * 4 / 2**20:.3g} (float32)"
        )
        print(line, flush=True)
        kept = list(dict.fromkeys(self.distribution.kept_whole))  # model variables: slots take their layout
        if kept:
            print(
                f"[training] fsdp: kept whole, their split axis does not divide by {devices}: {', '.join(kept[:4])}"
                + (f" and {len(kept) - 4} more" if len(kept) > 4 else ""),
                flush=True,
            )
        return model

    def whole_weights(self, model):
        """With several processes, lays every model weight out whole on every device (gathered from the processes
        that hold its shards), so that the chief can write model.keras; the optimizer state stays split. A collective:
        every process calls it. One process already reads its split weights whole."""
        if self.num_processes == 1:
            return
        whole = keras.distribution.TensorLayout
        for variable in model.weights:
            if processes.spans_processes(variable.value):
                value = processes.gather(variable.value)
                # Keras' JAX variables keep their layout in `_layout` (no public setter); `assign` places by it.
                variable._layout = whole([None] * len(variable.shape), self.distribution.device_mesh)
                variable.assign(value)

    def metrics(self):
        """`JaxPlacement.metrics`, and the share of the trainable parameters split once a model has been prepared."""
        known = {} if self.sharded_fraction is None else {"sharded_parameters": self.sharded_fraction}
        return {**super().metrics(), **known}


def split_parameters(model):
    """(trainable parameters split over more than one device, all trainable parameters) of a built model."""
    sharded = total = 0
    for variable in model.trainable_variables:
        size = math.prod(variable.shape)
        total += size
        if not variable.value.sharding.is_fully_replicated:
            sharded += size
    return sharded, total
