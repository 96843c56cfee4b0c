"""training.placement.strategy: every selection branch, with TPU resolvers, TF_CONFIG and GPUs simulated."""

import json
import os
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from keras_vit import _tpu_runtime
from tests import support
from training.placement import strategy as strategy_module
from training.placement.strategy import StrategyError, resolve_jit_compile, select_strategy

ROOT = str(support.ROOT)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for variable in ("TPU_NAME", "COLAB_TPU_ADDR", "TF_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    # An empty /dev and /sys: no TPU devices unless a test makes some.
    for root in ("dev", "sys"):
        (tmp_path / root).mkdir()
    monkeypatch.setattr(_tpu_runtime, "DEV_ROOT", str(tmp_path / "dev"))
    monkeypatch.setattr(_tpu_runtime, "SYS_ROOT", str(tmp_path / "sys"))


def _char_device(path):
    """A character device at `path` without mknod: a link to /dev/null."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink("/dev/null", path)


def _pci_device(sys_root, address, vendor):
    folder = sys_root / "bus" / "pci" / "devices" / address
    folder.mkdir(parents=True)
    (folder / "vendor").write_text(f"{vendor:#06x}\n")


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


def test_auto_picks_tpu_vm_with_local_resolver(monkeypatch, tmp_path):
    _char_device(tmp_path / "dev" / "accel0")
    calls = _fake_tpu(monkeypatch)
    strategy, reason = select_strategy("auto")
    assert strategy == ("TPUStrategy", "local") and calls["tpu"] == "local" and "connected" not in calls
    assert "TPU" in reason and "accel0" in reason


def test_tpu_devices_accel_character_devices_only(tmp_path):
    dev, sys_root = tmp_path / "dev", tmp_path / "sys"
    # Linux's DRM accel subsystem (NPUs): a folder /dev/accel/ holding accel0. Not a TPU.
    _char_device(dev / "accel" / "accel0")
    assert _tpu_runtime.tpu_devices() == [] and _tpu_runtime.tpu_evidence() is None
    (dev / "accel_notes").write_text("a regular file is not a device")
    assert _tpu_runtime.tpu_devices() == []
    # A v2-v4 TPU VM: /dev/accel0..N character devices.
    _char_device(dev / "accel0")
    _char_device(dev / "accel1")
    assert _tpu_runtime.tpu_devices() == [str(dev / "accel0"), str(dev / "accel1")]
    assert _tpu_runtime.tpu_devices(dev_root=str(tmp_path / "elsewhere"), sys_root=str(sys_root)) == []


def test_tpu_devices_vfio_only_with_a_google_pci_device(tmp_path):
    dev, sys_root = tmp_path / "dev", tmp_path / "sys"
    _char_device(dev / "vfio" / "0")
    _char_device(dev / "vfio" / "vfio")  # the VFIO control device is no chip
    assert _tpu_runtime.tpu_devices() == []  # VFIO without any PCI device listed: another pass-through
    _pci_device(sys_root, "0000:00:03.0", 0x10DE)  # an NVIDIA GPU passed through
    assert _tpu_runtime.tpu_devices() == []
    _pci_device(sys_root, "0000:00:04.0", 0x1AE0)  # v5e and later: Google's vendor id
    assert _tpu_runtime.tpu_devices() == [str(dev / "vfio" / "0")]
    assert "vfio" in _tpu_runtime.tpu_evidence()


def test_libtpu_disabled_only_without_tpu_evidence_and_user_setting(tmp_path):
    environ = {}
    assert _tpu_runtime.disable_libtpu_without_tpu(environ) == "0" and environ["TPU_LOAD_LIBRARY"] == "0"
    environ = {"TPU_LOAD_LIBRARY": "1"}  # the user's choice wins
    assert _tpu_runtime.disable_libtpu_without_tpu(environ) == "1"
    environ = {"TPU_NAME": "my-tpu"}
    assert _tpu_runtime.disable_libtpu_without_tpu(environ) is None and "TPU_LOAD_LIBRARY" not in environ
    _char_device(tmp_path / "dev" / "accel0")
    environ = {}
    assert _tpu_runtime.disable_libtpu_without_tpu(environ) is None and environ == {}


# Records TPU_LOAD_LIBRARY at the moment something first imports tensorflow, then stops that import (fast). The
# packages import TensorFlow only when a name that needs it is first used (keras_vit/_lazy.py), so after importing
# the package the probe imports it itself, as that first use would: the guard must have run by then.
_IMPORT_PROBE = """
import os, sys
class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            print("TPU_LOAD_LIBRARY at tensorflow import:", os.environ.get("TPU_LOAD_LIBRARY"))
            raise ImportError("stopped by the probe")
sys.meta_path.insert(0, Probe())
try:
    import {module}
    import tensorflow
except ImportError:
    pass
"""


@pytest.mark.parametrize("module", ["training", "export", "keras_vit.inspect.__main__"])
def test_tpu_load_library_is_set_before_anything_imports_tensorflow(module):
    env = {k: v for k, v in os.environ.items() if k not in ("TPU_LOAD_LIBRARY", "TPU_NAME", "COLAB_TPU_ADDR")}
    env["PYTHONPATH"] = ROOT
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE.format(module=module)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    expected = "0" if _tpu_runtime.tpu_evidence(env, "/dev", "/sys") is None else "None"  # this machine's truth
    assert result.stdout.strip() == f"TPU_LOAD_LIBRARY at tensorflow import: {expected}", result.stdout


def test_tpu_runtime_module_imports_no_tensorflow():
    code = (
        "import importlib.util, sys;"
        " spec = importlib.util.spec_from_file_location('m', 'keras_vit/_tpu_runtime.py');"
        " m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m);"
        " print(sorted(k for k in ('tensorflow', 'keras', 'numpy') if k in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr[-2000:]


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


def test_tpu_vm_with_plain_tensorflow_names_the_install_line(monkeypatch, tmp_path):
    _char_device(tmp_path / "dev" / "accel0")
    # What plain `tensorflow` says on a TPU VM (tensorflow/tensorflow#96203).
    error = tf.errors.NotFoundError(
        None,
        None,
        "No OpKernel was registered to support Op 'ConfigureDistributedTPU' "
        "used by {{node ConfigureDistributedTPU}}. Registered devices: [CPU]",
    )
    _fake_tpu(monkeypatch, init_error=error)
    with pytest.raises(StrategyError) as raised:
        select_strategy("tpu")
    message = str(raised.value)
    assert "no TPU kernels" in message and "pip install -r requirements-tpu.txt" in message
    assert "tensorflow-tpu[gcs-filesystem]==2.20.0 libtpu==0.0.31" in message and "KERAS_BACKEND=jax" in message
    assert "works without settings" not in message
    # The same machine with tensorflow-tpu installed but libtpu switched off by TPU_LOAD_LIBRARY=0:
    monkeypatch.setattr(_tpu_runtime, "installed_tensorflow", lambda: "tensorflow-tpu==2.20.0")
    monkeypatch.setenv("TPU_LOAD_LIBRARY", "0")
    _fake_tpu(monkeypatch, init_error=tf.errors.NotFoundError(None, None, "no TPU devices"))
    with pytest.raises(StrategyError, match="TPU_LOAD_LIBRARY=0 is set.*Unset it"):
        select_strategy("tpu")


def test_tpu_install_hint_matches_requirements_tpu():
    with open(os.path.join(ROOT, "requirements-tpu.txt")) as f:
        pins = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    for pin in _tpu_runtime.TPU_INSTALL_HINT.split("(")[1].rstrip(")").split():
        assert pin in pins, (pin, pins)


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
    _, reason = select_strategy("auto")
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
    strategy, _ = select_strategy("mirrored")
    assert isinstance(strategy, tf.distribute.MirroredStrategy) and strategy.num_replicas_in_sync >= 1
    assert select_strategy("default")[0] is tf.distribute.get_strategy()
    with pytest.raises(StrategyError, match="Unknown strategy 'gpu'"):
        select_strategy("gpu")


@pytest.mark.slow
def test_cli_strategy_tpu_without_tpu_fails_fast_with_a_clear_message(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TPU_NAME", "COLAB_TPU_ADDR", "TF_CONFIG")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    started = time.time()
    result = subprocess.run(
        [sys.executable, "-m", "training", "--strategy", "tpu", "--workdir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.time() - started
    assert result.returncode == 2, result.stderr[-2000:]
    assert "shows no TPU" in result.stderr and "Epoch" not in result.stdout
    assert elapsed < 60  # TensorFlow's import dominates; no resolver, no data loading, no training
    assert not os.path.exists(tmp_path / "checkpoints")


def test_jit_compile_forced_or_chosen_per_strategy(monkeypatch):
    default = tf.distribute.get_strategy()
    assert resolve_jit_compile(True, default)[0] is True and resolve_jit_compile(False, default)[0] is False
    # Plain tensorflow compiles on the CPU: XLA on for the default strategy (tests/training/test_digits.py sees
    # XLA's "Compiled cluster" line of the digits run).
    assert strategy_module._xla_compiles_here() is True
    value, reason = resolve_jit_compile("auto", default)
    assert value is True and "XLA on" in reason
    # tensorflow-tpu on a CPU has no XLA CPU backend (.ci/tpu_install_check runs the real one): XLA off.
    monkeypatch.setattr(strategy_module, "_xla_compiles_here", lambda: False)
    value, reason = resolve_jit_compile("auto", default)
    assert value is False and "cannot XLA-compile" in reason
    # Any tf.distribute strategy: Keras' own "auto".
    value, reason = resolve_jit_compile("auto", tf.distribute.MirroredStrategy(["/cpu:0"]))
    assert value == "auto" and "MirroredStrategy" in reason
    # TPUStrategy (an uninitialised instance: no TPU here): Keras' choice, TPUStrategy compiling with XLA itself.
    tpu_strategy = tf.distribute.TPUStrategy.__new__(tf.distribute.TPUStrategy)
    value, reason = resolve_jit_compile("auto", tpu_strategy)
    assert value == "auto" and "TPUStrategy compiles the replicated step with XLA" in reason
    assert resolve_jit_compile(True, tpu_strategy)[0] is True  # forcing still forces
    # A value other than True, False and "auto" never gets here: TrainConfig refuses it (test_training_config).
