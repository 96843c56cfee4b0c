"""Where a run's computation goes, on either Keras backend: `select_placement(--strategy)` returns the backend's
`Placement` (a tf.distribute strategy, or a keras.distribution over JAX's devices). docs/multihost.md."""

import logging

import keras

from ..options import StrategyError, check_strategy, option_choices
from .placements import JaxPlacement, TensorFlowPlacement

logger = logging.getLogger("training")
BACKENDS = ("tensorflow", "jax")
MATMUL_PRECISIONS = tuple(p for p in option_choices("matmul_precision") if p is not None)


def backend():
    name = keras.backend.backend()
    if name not in BACKENDS:
        raise StrategyError(
            f"The trainer runs on the TensorFlow or JAX Keras backend. Received: KERAS_BACKEND={name!r}. Set "
            f"KERAS_BACKEND=jax or KERAS_BACKEND=tensorflow (the models themselves run on any backend)."
        )
    return name


def select_placement(name="auto", *, tf_strategy=None, join_timeout=300):
    """The `Placement` for `--strategy NAME` on the current Keras backend.

    Args:
        name: "auto", "tpu", "multi_worker", "mirrored", "default" or "fsdp" (JAX only).
        tf_strategy: a `tf.distribute.Strategy` to use as it is (TensorFlow backend only).
        join_timeout: seconds a process of a multi-process JAX run waits for its peers (`training.placement.processes`).

    Raises:
        StrategyError: the strategy cannot run here (no TPU, an unsupported backend, ...), with what would work.
    """
    if backend() == "tensorflow":
        return _tensorflow_placement(name, tf_strategy)
    if tf_strategy is not None:
        raise StrategyError(
            f"tf_strategy={type(tf_strategy).__name__} was passed, but the Keras backend is JAX. Pass "
            f"config.strategy ('auto', 'tpu', 'mirrored', 'default') instead, or set KERAS_BACKEND=tensorflow."
        )
    return _jax_placement(name, join_timeout)


def _tensorflow_placement(name, tf_strategy):
    import tensorflow as tf

    from . import strategy as tf_strategies

    if tf_strategy is None:
        tf_strategy, reason = tf_strategies.select_strategy(name)
    else:
        reason = "passed by the caller"
    try:
        devices = tf_strategy.extended.worker_devices
    except RuntimeError:  # the default strategy has no device list: TensorFlow's default device (a GPU first)
        devices = [d.name for d in (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[:1]]
    kinds = {tf.DeviceSpec.from_string(d).device_type for d in devices}
    kind = kinds.pop().lower() if len(kinds) == 1 else "mixed"
    if isinstance(tf_strategy, tf.distribute.TPUStrategy):
        kind = "tpu"
    return TensorFlowPlacement(
        backend="tensorflow",
        name=type(tf_strategy).__name__,
        reason=reason,
        num_replicas=tf_strategy.num_replicas_in_sync,
        device_kind=kind,
        is_chief=tf_strategies.is_chief(tf_strategy),
        device_name=_tensorflow_gpu_name() if kind == "gpu" else None,
        tf_strategy=tf_strategy,
    )


def _tensorflow_gpu_name():
    """The first GPU's name as its driver gives it ("NVIDIA H200"), or None where TensorFlow does not say."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else None


def _jax_placement(name, join_timeout):
    import jax

    from . import processes

    check_strategy(name)
    _join_processes(name, join_timeout)
    accelerator = jax.default_backend()  # "tpu", "gpu" or "cpu": JAX's own choice, accelerators first
    if name == "tpu" and accelerator != "tpu":
        raise StrategyError(
            f"--strategy tpu, but JAX sees no TPU (its devices: {_listing(jax.local_devices())}). Run on a TPU VM "
            f"or Colab TPU runtime with `pip install jax[tpu]`, or use --strategy auto."
        )
    num_processes = jax.process_count()
    devices = jax.devices() if num_processes > 1 else jax.local_devices()
    local = jax.local_device_count()
    kind = devices[0].platform
    gpu_name = _jax_gpu_name(devices[0])
    if num_processes > 1 and name in ("default", "mirrored"):
        raise StrategyError(
            f"--strategy {name} uses the devices of one process, but this run has {num_processes} processes "
            f"({processes.NUM_PROCESSES} or the TPU slice says so). Use --strategy auto or multi_worker, or start a "
            f"single process."
        )
    if name == "default":
        keras.distribution.set_distribution(None)  # an earlier run in this process may have set one
        return JaxPlacement(
            backend="jax",
            name="one device",
            reason=f"default requested ({devices[0]})",
            num_replicas=1,
            device_kind=kind,
            local_devices=1,
            device_name=gpu_name,
        )
    reason = _jax_reason(name, num_processes, devices, accelerator)
    if name == "fsdp":
        from . import sharding

        distribution, placement_class, label = sharding.FullySharded(devices), sharding.ShardedPlacement, "FSDP"
    else:
        # Each process feeds its own rows of every batch (training.data), so Keras must not shard the dataset again.
        distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
        placement_class, label = JaxPlacement, "DataParallel"
    # Process-wide: Keras' JAX trainer looks the distribution up when `fit` shards each batch, outside any scope.
    keras.distribution.set_distribution(distribution)
    return placement_class(
        backend="jax",
        name=label,
        reason=reason,
        num_replicas=len(devices),
        device_kind=kind,
        is_chief=jax.process_index() == 0,
        num_processes=num_processes,
        process_index=jax.process_index(),
        local_devices=local,
        device_name=gpu_name,
        distribution=distribution,
    )


def _jax_gpu_name(device):
    """A JAX GPU's name as its driver gives it ("NVIDIA H200"); None for a CPU or TPU device."""
    return device.device_kind if device.platform == "gpu" else None


def _join_processes(name, join_timeout):
    """Keeps TensorFlow off the accelerators and joins the run's other processes (`training.placement.processes`)."""
    from . import processes

    _keep_tensorflow_off_accelerators()
    try:
        processes.join(name, join_timeout)  # before any other JAX call: it fixes the devices JAX sees
    except processes.JoinError as err:
        raise StrategyError(str(err)) from None


def _jax_reason(name, num_processes, devices, accelerator):
    """Why the JAX run spans these devices, in the words of `describe`."""
    kind, plural = devices[0].platform, "s" if len(devices) != 1 else ""
    if num_processes > 1:
        return f"{name}: {num_processes} processes, {len(devices)} {kind} devices in all"
    if name == "auto":
        if accelerator != "cpu":
            return f"auto: {len(devices)} {kind} devices"
        return f"auto: no accelerator, {len(devices)} host device{plural}"
    if name == "multi_worker":
        return f"multi_worker requested, but the run is one process ({len(devices)} {kind} device{plural})"
    if name == "fsdp":
        return f"fsdp requested: batch and large kernels split over {len(devices)} {kind} device{plural}"
    return f"{name} requested ({len(devices)} {kind} device{plural})"


def _listing(devices):
    return ", ".join(str(d) for d in devices[:4]) + (f", ... ({len(devices)} in all)" if len(devices) > 4 else "")


def _keep_tensorflow_off_accelerators():
    """Under JAX, TensorFlow only runs the input pipeline: it must not reserve GPU memory that JAX needs."""
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TensorFlow initialised its devices already (it ran an op earlier in this process)
        if tf.config.list_logical_devices("GPU"):
            logger.warning(
                "TensorFlow already holds the GPUs (it ran before the trainer started); JAX may run out "
                "of GPU memory. Start training before any TensorFlow op runs in this process."
            )


def set_matmul_precision(precision: str | None):
    """Sets float32 matmul precision process-wide: None keeps the backend's default.

    "highest" computes float32 matmuls in full float32. JAX's default on GPUs and TPUs rounds float32 inputs
    (TF32 or one bfloat16 pass), and TensorFlow uses TF32 on Ampere and newer GPUs; "highest" turns both off.
    "high" and "default" are JAX's names for the faster modes (on TensorFlow both allow TF32). CPUs compute
    float32 matmuls in float32 under every setting.
    """
    if precision is None:
        return
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"Unknown matmul_precision {precision!r}. Use None or one of: {', '.join(MATMUL_PRECISIONS)}.")
    if backend() == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", precision)
    else:
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(precision != "highest")
