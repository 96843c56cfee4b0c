"""The moving average of the weights (`--set ema_decay=D`): the average against its definition computed in numpy
from the weights after each update, with and without gradient accumulation; a run killed in mid-epoch resumes to
the uninterrupted run's average bit for bit on both backends (the digits recipe, from the command line); both
weight sets are evaluated and the chosen one is what model.keras (which every export reads) holds."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import training
from tests import support
from tests.support import runs
from tests.support.processes import call_cli
from training import ema
from training.checkpoints import checkpoint_file
from training.options.overrides import parse_overrides

ROOT = str(support.ROOT)
# The shared tiny run, 5 steps. TensorFlow without XLA (its compile is most of a 5-step run, and XLA is not what
# these tests check); JAX keeps its jitted step, which is where `ema.once_per_update` meets tracing.
TINY = dict(runs.TINY_CONFIG, steps_per_epoch=5, warmup_steps=1, learning_rate=3e-3,
            jit_compile=False if keras.backend.backend() == "tensorflow" else "auto")  # fmt: skip
# The digits recipe, short: 3 epochs of its 22 steps, checkpoints at steps 8, 16, 22, 30, 38, 44, ... 66. A kill right
# after step 30's checkpoint resumes in mid-epoch, so the resumed run calls `fit` twice (the rest of epoch 1, then 2).
SHORT = "checkpoint_every=8 warmup_steps=4 eval_every=0 num_samples=16 num_calibration=16 plots=False"
DIGITS = ["--config", "digits", "--epochs", "3"] + [
    arg for option in f"{SHORT} deterministic=True ema_decay=0.9".split() for arg in ("--set", option)
]


class _WeightsAfterEachUpdate(keras.callbacks.Callback):
    """The trainable weights after every optimiser step (fit runs one update per execution here)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append([np.array(v.numpy()) for v in self.model.trainable_variables])


def checkpoint_averages(path):
    """{weight path: its average} of a checkpoint file (Keras names an average after its weight's path)."""
    header, arrays = checkpoint_file.read(str(path))
    paths = header["paths"]["optimizer"]
    return {
        path.split("/", 1)[1][: -len(ema.AVERAGE_SUFFIX)]: arrays[f"optimizer/{paths.index(path):05d}"]
        for path in ema.average_paths(paths)
    }


def _averages(path, variables):
    averages = checkpoint_averages(path)
    return [averages[variable.path.replace("/", "_")] for variable in variables]


DECAY = 0.8
CHOICES = {1: True, 2: False}  # accum_steps: ema_export (the average exported without accumulation, the raw with)


def _recorded_run(workdir, accum_steps, export_average):
    """The tiny run with the average (decay 0.8), the weights recorded after each update: (config, record, result)."""
    record = _WeightsAfterEachUpdate()
    config = training.TrainConfig(**TINY, accum_steps=accum_steps, ema_decay=DECAY, ema_export=export_average)
    return config, record, training.train(config, str(workdir), callbacks=[record], verbose=0)


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory):
    """{accum_steps: (workdir, config, record, result, the final checkpoint's averages)} of the default strategy's
    runs: checked against numpy below, and the reference of the MirroredStrategy runs."""
    runs = {}
    for accum_steps, export_average in CHOICES.items():
        workdir = tmp_path_factory.mktemp(f"default-{accum_steps}")
        runs[accum_steps] = (workdir, *_recorded_run(workdir, accum_steps, export_average))
        runs[accum_steps] += (checkpoint_averages(workdir / "checkpoints" / "ckpt-00000005.npz"),)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("accum_steps", sorted(CHOICES))
def test_the_average_is_the_numpy_moving_average_of_the_weights_after_each_update(default_runs, accum_steps):
    workdir, config, record, result, _ = default_runs[accum_steps]
    _check_the_numpy_average(workdir, config, record, result)


def _check_the_numpy_average(workdir, config, record, result):
    export_average = config.ema_export
    assert len(record.seen) == 5  # one record per optimiser step, micro-batches or not
    expected = record.seen[0]  # the first update starts the average at its weights (Keras' rule)
    for weights in record.seen[1:]:
        expected = [np.float32(DECAY) * a + np.float32(1 - DECAY) * w for a, w in zip(expected, weights)]
    model = result.model
    averages = _averages(workdir / "checkpoints" / "ckpt-00000005.npz", model.trainable_variables)
    for average, reference in zip(averages, expected):
        np.testing.assert_allclose(average, reference, rtol=1e-5, atol=1e-7)
    raw = record.seen[-1]
    assert max(float(np.abs(a - w).max()) for a, w in zip(averages, raw)) > 1e-4  # not the raw weights again
    # The model (and so model.keras) holds the chosen set; the checkpoint keeps the raw weights for a resume.
    chosen = averages if export_average else raw
    for variable, value in zip(model.trainable_variables, chosen):
        np.testing.assert_array_equal(variable.numpy(), value)
    report = result.metrics["ema"]
    assert report["decay"] == DECAY and report["exported"] == ("average" if export_average else "raw")
    assert set(report["raw"]) == set(report["average"]) == {"top1", "top5", "loss"}
    assert report["raw"]["loss"] != report["average"]["loss"]  # two weight sets were evaluated
    assert result.metrics["loss"] == report["average" if export_average else "raw"]["loss"]
    header, arrays = checkpoint_file.read(str(workdir / "checkpoints" / "ckpt-00000005.npz"))
    for variable, value in zip(model.trainable_variables, raw):  # the checkpoint keeps the raw weights either way
        np.testing.assert_array_equal(arrays[f"model/{header['paths']['model'].index(variable.path):05d}"], value)
    # The finished run, started again with the other choice: nothing trains, the model holds the other set.
    again = training.train(config.replace(ema_export=not export_average), str(workdir), verbose=0)
    assert again.metrics["resumed_from_step"] == 5 and again.metrics["ema"]["exported"] != report["exported"]
    for variable, value in zip(again.model.trainable_variables, raw if export_average else averages):
        np.testing.assert_array_equal(variable.numpy(), value)
    for name in ("raw", "average"):
        assert again.metrics["ema"][name] == pytest.approx(report[name], rel=1e-6)


@pytest.mark.jax
@pytest.mark.slow  # two tiny runs: 28 s on 2 busy cores (in a JAX process of their own)
def test_accumulation_and_the_average_train_under_jax_to_the_numpy_average(tmp_path):
    """The test above with accum_steps=2 on Keras' JAX backend, where `ema.once_per_update` once handed a Variable
    to `keras.ops.where` (JAX refuses its `__jax_array__` while tracing)."""
    assert keras.backend.backend() == "jax"
    _check_the_numpy_average(tmp_path, *_recorded_run(tmp_path, 2, True))


@pytest.mark.slow
def test_keras_fit_still_writes_the_average_over_the_weights():
    """Pins `ema.hold_until_the_end`: Keras' `fit` ends by replacing the weights with their average; held, it does
    not. Once Keras stops doing it, the hold is unnecessary."""
    x, y = np.random.default_rng(0).normal(size=(2, 8, 4)).astype("float32")
    for hold in (False, True):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
        optimizer = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
        model.compile(optimizer=ema.hold_until_the_end(optimizer) if hold else optimizer, loss="mse")
        model.fit(x, y, batch_size=2, epochs=1, verbose=0)
        average = optimizer._model_variables_moving_average[0].numpy()
        kernel = model.trainable_variables[0].numpy()
        assert np.array_equal(kernel, average) != hold


def test_the_options_parse_and_bad_values_are_refused():
    assert parse_overrides(["ema_decay=0.9998", "ema_export=false"]) == {"ema_decay": 0.9998, "ema_export": False}
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=rf"ema_decay must be a finite number > 0 and < 1, or None .*{bad}"):
            training.TrainConfig(ema_decay=bad)
    with pytest.raises(ValueError, match="ema_export=False picks the raw weights .* set ema_decay"):
        training.TrainConfig(ema_export=False)


def _env(backend):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "XLA_FLAGS", "KERAS_VIT_KILL_AT_WRITE")}
    return {**env, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT, "KERAS_BACKEND": backend,
            "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}  # fmt: skip


def _cli(workdir, backend, kill_at=None):
    env = {**_env(backend), **({"KERAS_VIT_KILL_AT_WRITE": kill_at} if kill_at else {})}
    strategy = "auto" if backend == "jax" else "default"  # JAX: DataParallel over the 2 host devices
    command = [sys.executable, "-m", "training", "--workdir", str(workdir), *DIGITS, "--strategy", strategy]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _final_state(workdir):
    final = workdir / "checkpoints" / "ckpt-00000066.npz"
    averages = checkpoint_averages(final)
    header, arrays = checkpoint_file.read(str(final))
    raw = [arrays[f"model/{i:05d}"] for i in range(len(header["paths"]["model"]))]
    exported = keras.saving.load_model(str(workdir / "model.keras"), compile=False)
    return averages, raw, exported, json.loads((workdir / "metrics.json").read_text())


def _in_process(workdir, capfd):
    """The same command line as `_cli` (without a kill), run in this session: its backend, and under JAX its 2 host
    devices (tests/conftest.py). A kill is what needs a process, not the runs around it."""
    from training.__main__ import main

    strategy = "auto" if keras.backend.backend() == "jax" else "default"
    return call_cli(main, "--workdir", workdir, *DIGITS, "--strategy", strategy, capfd=capfd)


def _killed_and_resumed_equals_uninterrupted(tmp_path, backend, capfd):
    assert keras.backend.backend() == backend  # the uninterrupted and resumed runs go in this session
    reference, killed = tmp_path / "uninterrupted", tmp_path / "killed"
    result = _in_process(reference, capfd)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "moving average of the weights (ema_decay=0.9): held-out top-1" in result.stdout
    stopped = _cli(killed, backend, kill_at="ckpt-00000030.npz:after")
    assert stopped.returncode == -signal.SIGKILL, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    resumed = _in_process(killed, capfd)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert "resuming from step 30 of 66" in resumed.stdout  # mid-epoch: two `fit` calls to the end
    ours, theirs = _final_state(killed), _final_state(reference)
    assert len(ours[0]) == 39 and list(ours[0]) == list(theirs[0])  # one average per trainable weight
    for path in ours[0]:
        np.testing.assert_array_equal(ours[0][path], theirs[0][path], err_msg=path)
    for a, b in zip(ours[1], theirs[1]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(ours[2].get_weights(), theirs[2].get_weights()):
        np.testing.assert_array_equal(a, b)
    assert ours[3]["ema"] == theirs[3]["ema"] and ours[3]["resumed_from_step"] == 30
    print(f"{backend}: {json.dumps(ours[3]['ema'])}")  # the figures, for `pytest -s`
    return ours


@pytest.mark.slow
@pytest.mark.process  # a run killed
def test_a_digits_ema_run_killed_mid_epoch_resumes_bitwise_and_exports_the_average(tmp_path, capfd):
    averages, raw, exported, metrics = _killed_and_resumed_equals_uninterrupted(tmp_path, "tensorflow", capfd)
    report = metrics["ema"]
    assert report["raw"]["top1"] > 0.3 and report["average"]["top1"] > 0.3  # it trained (chance: 0.1)
    assert report["exported"] == "average" and metrics["top1"] == report["average"]["top1"]
    # model.keras holds the average: each weight equals its average in the final checkpoint, not the raw weight.
    for variable in exported.trainable_variables:
        average = averages[variable.path.replace("/", "_")]
        np.testing.assert_array_equal(variable.numpy(), average)
    # ... which differ from the raw weights. Every export reads model.keras (the export tests check each format
    # against it), so what is exported is the average.
    assert any(not np.array_equal(w, r) for w, r in zip(exported.get_weights(), raw))


@pytest.mark.jax
@pytest.mark.slow
@pytest.mark.process  # a run killed
def test_a_digits_ema_run_killed_mid_epoch_resumes_bitwise_under_jax(tmp_path, capfd):
    _, _, _, metrics = _killed_and_resumed_equals_uninterrupted(tmp_path, "jax", capfd)
    assert metrics["backend"] == "jax" and metrics["devices"] == 2
    assert metrics["ema"]["raw"]["top1"] > 0.3 and metrics["ema"]["average"]["top1"] > 0.3


MIRRORED = textwrap.dedent("""
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import training
    from tests.training.test_ema import DECAY, TINY
    for accum in (1, 2):
        config = training.TrainConfig(**{**TINY, "strategy": "mirrored"}, accum_steps=accum, ema_decay=DECAY)
        training.train(config, f"{sys.argv[1]}/{accum}", verbose=0)
""")


@pytest.mark.slow
@pytest.mark.process  # logical devices are set before TensorFlow starts
def test_mirrored_strategy_keeps_the_same_average_with_and_without_accumulation(default_runs, tmp_path):
    """Two logical CPUs: Keras' own EMA step under MirroredStrategy, and the accumulation work-around's
    (`training.placement.workarounds.accumulate_across_replicas`), against the default strategy's average (the
    runs checked against numpy above)."""
    env = {**_env("tensorflow"), "KERAS_BACKEND": "tensorflow"}
    result = subprocess.run([sys.executable, "-c", MIRRORED, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    out = {}
    for accum in (1, 2):
        one = default_runs[accum][-1]
        two = checkpoint_averages(tmp_path / str(accum) / "checkpoints" / "ckpt-00000005.npz")
        assert list(one) == list(two)
        out[accum] = {"difference": max(float(np.abs(one[k] - two[k]).max()) for k in one),
                      "size": max(float(np.abs(v).max()) for v in one.values()), "count": len(one)}  # fmt: skip
    print("mirrored:", json.dumps(out))
    for accum in (1, 2):
        assert out[accum]["count"] == 40 and out[accum]["size"] > 0.1  # one per weight of "testing", not zeros
        assert out[accum]["difference"] < 1e-6, out
