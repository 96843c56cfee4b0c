"""training.strategy: every selection branch, with TPU resolvers, TF_CONFIG and GPUs simulated."""

import json
import os
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from training import strategy as strategy_module
from training.strategy import StrategyError, select_strategy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for variable in ("TPU_NAME", "COLAB_TPU_ADDR", "TF_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(strategy_module.glob, "glob", lambda pattern: [])


class FakeResolver:
    def __init__(self, tpu=None):
        self.tpu = tpu


def _fake_tpu(monkeypatch, *, resolver_error=None, init_error=None):
    calls = {}

    def resolver(tpu=None):
        calls["tpu"] = tpu
        if resolver_error:
            raise resolver_error
        return FakeResolver(tpu)

    def initialize(resolver):
        if init_error:
            raise init_error
        calls["initialized"] = resolver.tpu

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", resolver)
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda r: calls.setdefault("connected", r.tpu))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", initialize)
    monkeypatch.setattr(tf.distribute, "TPUStrategy", lambda r: ("TPUStrategy", r.tpu))
    return calls


def test_auto_picks_tpu_vm_with_local_resolver(monkeypatch):
    monkeypatch.setattr(strategy_module.glob, "glob", lambda p: ["/dev/accel0"] if "accel" in p else [])
    calls = _fake_tpu(monkeypatch)
    strategy, reason = select_strategy("auto")
    assert strategy == ("TPUStrategy", "local") and calls["tpu"] == "local" and "connected" not in calls
    assert "TPU" in reason and "/dev/accel0" in reason


def test_auto_picks_colab_tpu_address(monkeypatch):
    monkeypatch.setenv("COLAB_TPU_ADDR", "10.0.0.2:8470")
    calls = _fake_tpu(monkeypatch)
    strategy, _ = select_strategy("auto")
    assert strategy == ("TPUStrategy", "grpc://10.0.0.2:8470") and calls["connected"] == "grpc://10.0.0.2:8470"


def test_tpu_evidence_but_no_tpu_fails_loudly(monkeypatch):
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    _fake_tpu(monkeypatch, init_error=tf.errors.NotFoundError(None, None, "no TPU devices"))
    with pytest.raises(StrategyError, match="No usable TPU.*my-tpu.*NotFoundError"):
        select_strategy("auto")
    _fake_tpu(monkeypatch, resolver_error=ValueError("Please provide a TPU Name"))
    with pytest.raises(StrategyError, match="No usable TPU.*ValueError"):
        select_strategy("tpu")


def test_explicit_tpu_without_evidence_fails_fast_without_touching_a_resolver(monkeypatch):
    calls = _fake_tpu(monkeypatch)
    started = time.time()
    with pytest.raises(StrategyError, match="shows no TPU.*TPU_NAME.*--strategy auto"):
        select_strategy("tpu")
    assert time.time() - started < 1.0 and "tpu" not in calls


def test_auto_picks_multi_worker_from_tf_config(monkeypatch):
    cluster = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    monkeypatch.setattr(strategy_module, "make_multi_worker", lambda: "MWMS")
    strategy, reason = select_strategy("auto")
    assert strategy == "MWMS" and "2 tasks" in reason
    assert select_strategy("multi_worker")[0] == "MWMS"


def test_single_task_tf_config_is_not_multi_worker(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["127.0.0.1:1"]}}))
    strategy, reason = select_strategy("auto")
    assert strategy is tf.distribute.get_strategy() and "default" in reason


def test_bad_tf_config_and_missing_tf_config(monkeypatch):
    with pytest.raises(StrategyError, match="needs TF_CONFIG"):
        select_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(StrategyError, match="TF_CONFIG is not a JSON object"):
        select_strategy("auto")


def test_auto_picks_mirrored_with_two_gpus(monkeypatch):
    gpus = [tf.config.LogicalDevice("/device:GPU:0", "GPU"), tf.config.LogicalDevice("/device:GPU:1", "GPU")]
    real = tf.config.list_logical_devices
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: gpus if kind == "GPU" else real(kind))
    made = {}
    monkeypatch.setattr(tf.distribute, "MirroredStrategy", lambda devices: made.setdefault("devices", devices))
    strategy, reason = select_strategy("auto")
    assert made["devices"] == ["/device:GPU:0", "/device:GPU:1"] and "2 GPUs" in reason


def test_auto_with_one_gpu_or_cpu_is_default(monkeypatch):
    strategy, reason = select_strategy("auto")
    assert strategy is tf.distribute.get_strategy() and "default strategy" in reason
    one = [tf.config.LogicalDevice("/device:GPU:0", "GPU")]
    real = tf.config.list_logical_devices
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: one if kind == "GPU" else real(kind))
    strategy, reason = select_strategy("auto")
    assert strategy is tf.distribute.get_strategy() and "1 GPU" in reason


def test_explicit_mirrored_and_default_on_cpu():
    strategy, reason = select_strategy("mirrored")
    assert isinstance(strategy, tf.distribute.MirroredStrategy) and strategy.num_replicas_in_sync >= 1
    assert select_strategy("default")[0] is tf.distribute.get_strategy()
    with pytest.raises(StrategyError, match="Unknown strategy 'gpu'"):
        select_strategy("gpu")


def test_cli_strategy_tpu_without_tpu_fails_fast_with_a_clear_message(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TPU_NAME", "COLAB_TPU_ADDR", "TF_CONFIG")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    started = time.time()
    result = subprocess.run([sys.executable, "-m", "training", "--strategy", "tpu", "--workdir", str(tmp_path)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.time() - started
    assert result.returncode == 2, result.stderr[-2000:]
    assert "shows no TPU" in result.stderr and "Epoch" not in result.stdout
    assert elapsed < 60  # TensorFlow's import dominates; no resolver, no data loading, no training
    assert not os.path.exists(tmp_path / "checkpoints")
