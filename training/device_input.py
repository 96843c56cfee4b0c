"""uint8 images to the device (`TrainConfig.device_input`): `DeviceInput` scales to [-1, 1] and mixes Mixup's images
inside the compiled step; it wraps the model for `fit` and `evaluate` only and is never saved."""

import keras
from keras import ops

from keras_vit.preprocessing import PIXEL_CENTER, PIXEL_SCALE

_ACCELERATORS = ("gpu", "tpu")


class DeviceInput(keras.Model):
    """`model` fed uint8 images: scales them to [-1, 1] and, given Mixup's weights, mixes them as
    `training.data.preprocess.mixup` does (sum_i w_i * roll(images, i)), then calls `model`.

    Args:
        model: the run's model (a `keras_vit` VisionTransformer), whose variables this one trains.

    Inputs: uint8 images (B, S, S, 3), or {"images": those, "mixup_weights": float32 (B, n)}, every row the
    batch's n weights (`training.data.train_dataset`).
    """

    def __init__(self, model, **kwargs):
        # float32 whatever the global policy: the mixing is the host's float32 arithmetic; the model casts itself.
        super().__init__(dtype="float32", **kwargs)
        self.inner = model
        self.built = True  # no weights of its own; the model's are built

    def call(self, inputs, training=False):
        if isinstance(inputs, dict):
            images, weights = inputs["images"], inputs.get("mixup_weights")
        else:
            images, weights = inputs, None
        images = (ops.cast(images, "float32") - PIXEL_CENTER) / PIXEL_SCALE
        if weights is not None:
            weights = ops.cast(weights[0], "float32")  # every row holds the batch's weights
            mixed = weights[0] * images
            for i in range(1, weights.shape[-1]):
                mixed = mixed + weights[i] * ops.roll(images, i, axis=0)
            images = mixed
        return self.inner(images, training=training)


def resolve_device_input(config, placement):
    """(device_input on or off, why): "auto" is on for a GPU or TPU; True is refused where it cannot mix the batch.

    Mixup mixes a step's batch in tf.data; on the device the same mix needs the whole batch in one call: not with
    gradient accumulation (micro-batches), several JAX processes (each mixes its own rows) or several TensorFlow
    replicas (each calls the model on its own rows).
    """
    requested = config.device_input
    if config.naflex:  # its patches are cut from each image at its own size, in tf.data
        if requested is True:
            raise ValueError("device_input=True sends whole images, but a NaFlex run feeds patches made in tf.data. "
                             "Use device_input=auto or false.")  # fmt: skip
        return False, "naflex: patches made in tf.data"
    obstacle = _mixing_obstacle(config, placement)
    if requested == "auto":
        if placement.device_kind not in _ACCELERATORS:
            return False, f"device_input=auto: images scaled in tf.data (a {placement.device_kind} run)"
        if obstacle:
            return False, f"device_input=auto: images scaled and mixed in tf.data ({obstacle})"
        mixed = " and mixed" if config.mixup_alpha else ""
        return True, f"device_input=auto: uint8 images, scaled{mixed} on the device"
    if requested and obstacle:
        raise ValueError(
            f"device_input=True cannot mix Mixup's batch on the device: {obstacle}. Use device_input=false, or "
            f"accum_steps=1 on one process (TensorFlow: one replica)."
        )
    where = "on the device (uint8 images)" if requested else "in tf.data"
    return bool(requested), f"device_input={requested}: images scaled {where}"


def _mixing_obstacle(config, placement):
    """Why a step on the device would not see the batch the host mixes, or None."""
    if not config.mixup_alpha:
        return None
    if config.accum_steps > 1:
        return f"accum_steps={config.accum_steps} splits the mixed batch into micro-batches"
    if placement.num_processes > 1:
        return f"each of the {placement.num_processes} processes mixes its own rows"
    if placement.backend == "tensorflow" and placement.num_replicas > 1:
        return f"each of the {placement.num_replicas} replicas calls the model on its own rows"
    return None
