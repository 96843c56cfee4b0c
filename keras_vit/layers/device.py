"""Where a layer's tensors are computed: what picks fused kernels and elementwise precision per platform."""

import functools

import keras


@functools.cache
def _jax_platform():
    devices = keras.distribution.list_devices()
    return devices[0].split(":")[0].lower() if devices else "cpu"


def platform(tensor):
    """ "gpu", "tpu" or "cpu": where `tensor` is computed (on TensorFlow always "cpu": its paths are the CPU's)."""
    backend = keras.config.backend()
    if backend == "jax":
        return _jax_platform()
    if backend == "torch":
        device = getattr(getattr(tensor, "device", None), "type", "cpu")
        return "gpu" if device == "cuda" else str(device)
    return "cpu"
