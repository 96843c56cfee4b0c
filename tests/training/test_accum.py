"""Gradient accumulation (`accum_steps`): N micro-batches update as one batch N times larger, on TensorFlow, on
JAX and under MirroredStrategy; the schedule counts optimiser steps; a resume from a mid-run checkpoint is exact.

The reference for each accumulated run is the same optimiser on the whole batch (Keras' plain path, no
accumulation code involved), with AdamW weight decay, a warm-up and clipping that is active at every step, so a
clip of each micro-batch, a decay per micro-step or a schedule that counts micro-steps would all show.
"""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import training
from tests import support
from training.checkpoints.checkpointing import CheckpointManager
from training.optim import PerUpdate, WarmupDecay

ROOT = str(support.ROOT)
BATCH, UPDATES, PEAK, WARMUP = 8, 3, 1e-2, 5
ACCUMS = (4,)


def updates(accum_steps, strategy="default"):
    """Trains the tiny model for UPDATES optimiser steps of BATCH images; returns (start, end weights, lr, steps)."""
    from training.optim import make_optimizer
    from training.placement.distribution import select_placement

    keras.utils.set_random_seed(0)
    placement = select_placement(strategy)
    config = training.TrainConfig(
        batch_size=BATCH, accum_steps=accum_steps, learning_rate=PEAK, warmup_steps=WARMUP, weight_decay=0.1,
        global_clipnorm=1e-3,  # far below the gradient norms here: clipping acts at every step
    )  # fmt: skip
    rng = np.random.default_rng(0)
    with placement.scope():
        model = keras_vit_model()
        head = model.get_layer("head")
        head.kernel.assign(rng.normal(0, 0.5, head.kernel.shape).astype("float32"))  # gradients everywhere at step 1
        optimizer = placement.prepare_optimizer(make_optimizer(config, total_steps=10))
        optimizer.build(model.trainable_variables)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.CategoricalCrossentropy(from_logits=True),
            steps_per_execution=placement.fit_steps_per_execution(1, accum_steps),
            jit_compile=False if keras.backend.backend() == "tensorflow" else "auto",
        )
    start = [np.asarray(w) for w in model.get_weights()]
    images = rng.uniform(-1, 1, (UPDATES * BATCH, 16, 16, 3)).astype("float32")
    labels = np.eye(3, dtype="float32")[rng.integers(0, 3, UPDATES * BATCH)]
    model.fit(images, labels, batch_size=BATCH // accum_steps, epochs=1, shuffle=False, verbose=0)
    end = [np.asarray(w) for w in model.get_weights()]
    steps = int(keras.ops.convert_to_numpy(optimizer.iterations))
    return start, end, float(keras.ops.convert_to_numpy(optimizer.learning_rate)), steps


def keras_vit_model():
    import keras_vit

    return keras_vit.create_model("testing", image_size=16, num_classes=3)


def compare(strategy="default"):
    """{accum: max abs weight difference to accum 1} for ACCUMS, plus the checks' raw numbers (JSON-able)."""
    start, whole, lr_whole, steps_whole = updates(1, strategy)
    out = {"moved": max(float(np.abs(a - b).max()) for a, b in zip(start, whole)), "steps": {1: steps_whole}}
    out["lr"] = {1: lr_whole}
    for accum in ACCUMS:
        _, accumulated, lr, steps = updates(accum, strategy)
        out[accum] = max(float(np.abs(a - b).max()) for a, b in zip(whole, accumulated))
        out["lr"][accum], out["steps"][accum] = lr, steps
    return out


def _check(out):
    print("accumulation:", json.dumps(out))  # the figures, for `pytest -s`
    assert out["moved"] > 1e-3  # the updates did something: equality below is not vacuous
    for accum in map(str, ACCUMS):
        assert out[accum] < 1e-6, out
        assert out["steps"][accum] == UPDATES
        # After 3 updates the warm-up's lr is peak * (3 + 1) / 5 (`WarmupDecay`), computed by hand; a schedule
        # reading micro-steps would be at its peak already.
        assert out["lr"][accum] == pytest.approx(PEAK * (UPDATES + 1) / WARMUP, rel=1e-6)


def _subprocess(code, backend):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "XLA_FLAGS")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, KERAS_BACKEND=backend)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return json.loads(result.stdout.split("RESULT", 1)[1])


@pytest.mark.slow
def test_micro_batches_update_as_one_batch_on_tensorflow():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the in-process case is the TensorFlow backend's")
    _check(json.loads(json.dumps(compare())))


@pytest.mark.jax
@pytest.mark.slow
def test_micro_batches_update_as_one_batch_on_jax():
    assert keras.backend.backend() == "jax"
    _check(json.loads(json.dumps(compare())))


MIRRORED = textwrap.dedent("""
    import json
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tests.training.test_accum import compare, updates
    from training.placement import workarounds
    out = compare("mirrored")
    workarounds.accumulate_across_replicas = lambda optimizer, strategy: optimizer  # Keras' own accumulation
    try:
        updates(2, "mirrored")
        out["keras_fails"] = None
    except Exception as err:  # noqa: BLE001
        out["keras_fails"] = str(err)
    print("RESULT" + json.dumps(out))
""")


@pytest.mark.slow
@pytest.mark.process  # logical devices are set before TensorFlow starts
def test_micro_batches_update_as_one_batch_under_mirrored_strategy():
    out = _subprocess(MIRRORED, "tensorflow")
    _check(out)
    # Pins `workarounds.accumulate_across_replicas`: once Keras accumulates under tf.distribute, delete it.
    assert out["keras_fails"] and "merge_call" in out["keras_fails"]


def test_the_schedule_is_read_at_the_optimiser_step():
    schedule = WarmupDecay(1.0, total_steps=40, warmup_steps=8)
    wrapped = PerUpdate(schedule, 4)
    for micro in (0, 3, 4, 11, 12, 27):
        assert float(wrapped(micro)) == pytest.approx((micro // 4 + 1) / 8)  # warm-up: (step + 1) / 8, by hand
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(wrapped))
    assert float(again(13)) == pytest.approx(4 / 8)


def test_batch_size_must_divide_into_micro_batches():
    with pytest.raises(ValueError, match=r"batch_size must be divisible by accum_steps.*accum_steps=4"):
        training.TrainConfig(batch_size=12, accum_steps=5)
    with pytest.raises(ValueError, match=r"accum_steps must be an integer >= 1. Received: accum_steps=0"):
        training.TrainConfig(accum_steps=0)


RUN = dict(
    dataset="synthetic", image_size=16, batch_size=8, accum_steps=2, epochs=2, steps_per_epoch=3, warmup_steps=2,
    checkpoint_every=2, deterministic=True, eval_every=0, num_samples=4, num_calibration=4, learning_rate=3e-3,
    jit_compile=False, plots=False,
)  # fmt: skip


class _Crash(keras.callbacks.Callback):
    """Raises in the first micro-batch of step 6 (epoch 1, fit batch 4): after the checkpoint of step 5."""

    def on_train_batch_end(self, batch, logs=None):
        if self.model.optimizer._iterations.numpy() == 11:
            raise RuntimeError("crash mid-update")


@pytest.mark.slow
def test_a_run_killed_mid_update_resumes_exactly(tmp_path, monkeypatch):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("TensorFlow backend")
    reference = training.train(training.TrainConfig(**RUN), tmp_path / "uninterrupted", verbose=0)
    # One micro-batch per execution, as under MirroredStrategy: callbacks (the crash, the checkpoints) then see
    # every micro-batch, and checkpoint_every must still wait for the update boundary.
    monkeypatch.setattr("training.placement.placements.TensorFlowPlacement.fit_steps_per_execution", lambda *args: 1)
    with pytest.raises(RuntimeError, match="crash mid-update"):
        training.train(training.TrainConfig(**RUN), tmp_path / "crashed", callbacks=[_Crash()], verbose=0)
    manager = CheckpointManager(str(tmp_path / "crashed" / "checkpoints"), None, None)
    resume = manager.load_latest()
    header, arrays = resume.header, resume.arrays
    assert header["step"] == 5  # checkpoint_every=2 after the epoch end at 3; the crash came before step 6
    saved = {path: arrays[f"optimizer/{i:05d}"] for i, path in enumerate(header["paths"]["optimizer"])}
    assert int(saved[next(p for p in saved if p.endswith("/iteration"))]) == 10  # 5 updates x 2 micro-batches
    accumulators = [v for p, v in saved.items() if "gradient_accumulator" in p]
    assert accumulators and all(not v.any() for v in accumulators)  # saved on an update boundary
    resumed = training.train(training.TrainConfig(**RUN), tmp_path / "crashed", verbose=0)
    assert resumed.metrics["steps"] == reference.metrics["steps"] == 6
    assert resumed.metrics["resumed_from_step"] == 5
    for a, b in zip(resumed.model.get_weights(), reference.model.get_weights()):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=0)
