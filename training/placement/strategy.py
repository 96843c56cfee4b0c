"""Choosing a `tf.distribute` strategy: TPU (only on evidence of one: a TPU resolver can hang), multi-worker, mirrored
or the default one, with the reason."""

import json
import os

import tensorflow as tf

from keras_vit import _tpu_runtime
from keras_vit._tpu_runtime import tpu_evidence

from ..options import StrategyError, check_strategy


def _tpu_address():
    if os.environ.get("TPU_NAME"):
        return os.environ["TPU_NAME"]
    if os.environ.get("COLAB_TPU_ADDR"):
        return "grpc://" + os.environ["COLAB_TPU_ADDR"]
    return "local"  # TPU VMs and new Colab runtimes


def connect_tpu():
    """TPUStrategy on the TPU named by the environment ("local" on a TPU VM). Raises StrategyError if none."""
    address = _tpu_address()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address)
        if address != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as err:
        raise StrategyError(_tpu_failure(address, err)) from err
    return tf.distribute.TPUStrategy(resolver)


def _tpu_failure(address, err):
    """The message for a TPU that could not be initialised: the likely cause first, then the error itself."""
    text = f"{type(err).__name__}: {str(err)[:600]}"
    installed = _tpu_runtime.installed_tensorflow() or "no TensorFlow distribution found"
    if "ConfigureDistributedTPU" in str(err) or (address == "local" and not installed.startswith("tensorflow-tpu")):
        # Plain `tensorflow` has no TPU kernels (tensorflow/tensorflow#96203) and does not load libtpu.
        return (
            f"This TensorFlow ({installed}) cannot drive a TPU: it has no TPU kernels ({text}). Install the TPU "
            f"build: {_tpu_runtime.TPU_INSTALL_HINT}, then restart Python; or use KERAS_BACKEND=jax, or "
            f"--strategy default for the CPU."
        )
    if installed.startswith("tensorflow-tpu") and os.environ.get("TPU_LOAD_LIBRARY") == "0":
        return (
            f"TPU_LOAD_LIBRARY=0 is set, so TensorFlow did not load libtpu ({text}). Unset it on a TPU machine "
            f"(keras_vit sets it only when it sees no TPU evidence), or use --strategy default."
        )
    return (
        f"No usable TPU (tried TPUClusterResolver(tpu={address!r})): {text}. On a Cloud TPU VM the local TPU "
        f"needs {_tpu_runtime.TPU_INSTALL_HINT} and no other process holding the chips; a TPU Node needs "
        f"TPU_NAME. Colab TPU runtimes have no TensorFlow preinstalled: install as above, or use "
        f"KERAS_BACKEND=jax. Elsewhere use --strategy auto/default."
    )


def tf_config_workers():
    """Number of tasks in TF_CONFIG's cluster (0 when unset); a clear error when it is not valid JSON."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        return 0
    try:
        cluster = json.loads(text).get("cluster", {})
    except (json.JSONDecodeError, AttributeError) as err:
        raise StrategyError(f"TF_CONFIG is not a JSON object with a 'cluster': {text[:200]!r} ({err}).") from err
    return sum(len(tasks) for name, tasks in cluster.items() if name in ("worker", "chief"))


def _mirrored():
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return tf.distribute.MirroredStrategy([d.name for d in gpus])
    # No GPU: mirror over the logical CPU devices (several only when configured, as in tests).
    return tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])


def select_strategy(name="auto"):
    """Returns (strategy, reason) for "auto", "tpu", "multi_worker", "mirrored" or "default".

    Raises:
        StrategyError: `tpu` without a TPU, `multi_worker` without TF_CONFIG, an unknown name.
    """
    check_strategy(name)
    if name == "fsdp":
        raise StrategyError(
            "--strategy fsdp shards the weights with keras.distribution, which only Keras' JAX backend has. Set "
            "KERAS_BACKEND=jax, or use --strategy auto on TensorFlow (every device holds all the weights)."
        )
    if name == "tpu":
        evidence = tpu_evidence()
        if evidence is None:
            raise StrategyError(
                "--strategy tpu, but this machine shows no TPU (no TPU_NAME or COLAB_TPU_ADDR variable, no "
                "/dev/accelN character devices, no /dev/vfio/N with a Google PCI device). Run on a TPU VM / Colab "
                f"TPU runtime with {_tpu_runtime.TPU_INSTALL_HINT}, set TPU_NAME, or use --strategy auto."
            )
        return connect_tpu(), f"TPU requested ({evidence})"
    if name == "multi_worker":
        if tf_config_workers() == 0:
            raise StrategyError("--strategy multi_worker needs TF_CONFIG describing the cluster and this task.")
        return make_multi_worker(), f"multi-worker requested ({tf_config_workers()} tasks in TF_CONFIG)"
    if name == "mirrored":
        strategy = _mirrored()
        return strategy, f"mirrored requested ({strategy.num_replicas_in_sync} replicas)"
    if name == "default":
        return tf.distribute.get_strategy(), "default strategy requested (one device)"

    evidence = tpu_evidence()
    if evidence is not None:
        return connect_tpu(), f"auto: TPU found ({evidence})"
    workers = tf_config_workers()
    if workers > 1:
        return make_multi_worker(), f"auto: TF_CONFIG names {workers} tasks"
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) >= 2:
        return _mirrored(), f"auto: {len(gpus)} GPUs"
    device = "1 GPU" if gpus else "CPU"
    return tf.distribute.get_strategy(), f"auto: no TPU, no TF_CONFIG cluster, {device} -> default strategy"


def _xla_compiles_here():
    """Whether this TensorFlow build can XLA-compile on the default device (tensorflow-tpu on a CPU cannot)."""
    try:
        probe = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
        return float(probe(tf.constant(1.0))) == 3.0
    except (tf.errors.OpError, RuntimeError, ValueError):
        # e.g. NotFoundError "could not find registered transfer manager for platform Host" (no XLA CPU backend)
        return False


def resolve_jit_compile(requested, strategy, measured=None):
    """The `jit_compile` for `Model.compile` and why: True/False as requested, or resolved from "auto".

    "auto" leaves TPUStrategy and the other tf.distribute strategies to Keras' own "auto": under TPUStrategy the
    replicated step is compiled with XLA by TPUStrategy itself, and Keras turns its own XLA off around
    `strategy.run` (keras-team/keras#19005). With the default strategy, XLA is on when this TensorFlow build can
    compile there, unless `measured` (a `training.advice.Advice`: the benchmark's figures for this CPU class and
    the nearest measured model size) found TensorFlow without XLA faster.
    """
    if requested != "auto":  # True or False: `TrainConfig` allows nothing else
        return requested, f"jit_compile={requested} as configured"
    if isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy)):
        return "auto", "jit_compile=auto: Keras' choice; TPUStrategy compiles the replicated step with XLA itself"
    if strategy is not tf.distribute.get_strategy():
        return "auto", f"jit_compile=auto: Keras' choice under {type(strategy).__name__} (no XLA around strategy.run)"
    if not _xla_compiles_here():
        return (
            False,
            "jit_compile=auto: XLA off (this TensorFlow build cannot XLA-compile here: tensorflow-tpu on a CPU?)",
        )
    if measured is not None and measured.xla_faster() is not None:
        plain, xla = measured.figures["TensorFlow"], measured.figures["TensorFlow+XLA"]
        on = measured.xla_faster()
        verdict = "XLA off: measured faster without it" if not on else "XLA on: not measured slower"
        return on, (
            f"jit_compile=auto: {verdict} on this CPU class ({xla:.1f} img/s with XLA, {plain:.1f} without; "
            f"{measured.source()})"
        )
    return True, "jit_compile=auto: XLA on (this TensorFlow compiles on the default device)"


def make_multi_worker():
    return tf.distribute.MultiWorkerMirroredStrategy()


def is_chief(strategy):
    """True on the task that writes files: the only task, or worker 0 / the chief of a cluster."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def num_workers(strategy):
    return getattr(strategy.extended, "_num_workers", 1) or 1
