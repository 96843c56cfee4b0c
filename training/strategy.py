"""Choosing a `tf.distribute` strategy: TPU, multi-worker, mirrored or the default one.

`auto` picks, in this order: a TPU when there is evidence of one (TPU_NAME / COLAB_TPU_ADDR / a TPU VM's
/dev/accel* or /dev/vfio devices), MultiWorkerMirrored when TF_CONFIG names more than one task, Mirrored when
there are at least two GPUs, else the default strategy. It says what it picked and why. The TPU path is only
touched with evidence (or when asked) because `TPUClusterResolver` with a name queries a metadata server with no
time-out, and a `grpc://` address nobody serves hangs; asked for explicitly without a TPU, it fails at once.
"""

import glob
import json
import os

import tensorflow as tf

STRATEGIES = ("auto", "tpu", "multi_worker", "mirrored", "default")


class StrategyError(RuntimeError):
    """The requested strategy cannot run on this machine."""


def tpu_evidence():
    """A short reason string when this machine looks like it has a TPU, else None."""
    for variable in ("TPU_NAME", "COLAB_TPU_ADDR"):
        if os.environ.get(variable):
            return f"{variable}={os.environ[variable]}"
    devices = glob.glob("/dev/accel*") + glob.glob("/dev/vfio/[0-9]*")
    if devices:
        return f"TPU VM devices {devices[:2]}"
    return None


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
        raise StrategyError(
            f"No usable TPU (tried TPUClusterResolver(tpu={address!r})): {type(err).__name__}: {err}. "
            f"On a TPU VM or Colab TPU runtime this works without settings; elsewhere set TPU_NAME, or use "
            f"--strategy auto/default."
        ) from err
    return tf.distribute.TPUStrategy(resolver)


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
    if name not in STRATEGIES:
        raise StrategyError(f"Unknown strategy {name!r}. Use one of: {', '.join(STRATEGIES)}.")
    if name == "tpu":
        evidence = tpu_evidence()
        if evidence is None:
            raise StrategyError(
                "--strategy tpu, but this machine shows no TPU (no TPU_NAME or COLAB_TPU_ADDR variable, no "
                "/dev/accel* or /dev/vfio devices). Run on a TPU VM / Colab TPU runtime, set TPU_NAME, or use "
                "--strategy auto."
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
