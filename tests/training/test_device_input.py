"""uint8 images to the device (`--set device_input=true`, `training.device_input`): the uint8 stream, scaled and mixed
in numpy with the weights it carries, is the float stream (resumed and sharded too); the wrapper's train step is the
plain model's on the float stream (TensorFlow, and JAX in the JAX session); a command-line run killed mid-epoch resumes,
ends like the host-route run and writes the plain model; "auto" is off on a CPU and says so in metrics.json."""

import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from tests import support
from tests.support import processes
from training import data
from training.device_input import DeviceInput, resolve_device_input
from training.options.config import TrainConfig
from training.placement.placements import Placement

ROOT = str(support.ROOT)
TINY = dict(dataset="synthetic", image_size=16, batch_size=8, mixup_alpha=0.2, randaugment=(2, 10), seed=3)
HALF_LEVEL = 0.5 / 127.5  # the most rounding to whole 0..255 levels moves a scaled pixel


def _host(x, weights=None):
    """What the device does, in numpy: scale to [-1, 1], then mix rows rolled by i with weight i."""
    x = (x.astype(np.float32) - np.float32(127.5)) / np.float32(127.5)
    if weights is None:
        return x
    return sum(np.float32(w) * np.roll(x, i, axis=0) for i, w in enumerate(weights[0]))


def _pairs(config, n, **kwargs):
    source = data.load_source(config.dataset, seed=config.seed)
    floats = list(data.train_dataset(source, config, num_steps=n, **kwargs).as_numpy_iterator())
    uint8 = list(data.train_dataset(source, config, num_steps=n, device_input=True, **kwargs).as_numpy_iterator())
    return floats, uint8


@pytest.mark.slow
@pytest.mark.parametrize("kwargs", [{}, {"start_step": 5}, {"shard": (1, 2)}])
def test_with_randaugment_the_uint8_stream_scaled_and_mixed_is_the_float_stream(kwargs):
    floats, uint8 = _pairs(TrainConfig(**TINY), 3, **kwargs)
    for (x, y), (inputs, labels) in zip(floats, uint8):
        images, weights = inputs["images"], inputs["mixup_weights"]
        assert images.dtype == np.uint8 and weights.shape == (len(images), 2)
        assert (weights == weights[:1]).all() and weights[0, 0] >= weights[0, 1]  # one draw per batch, sorted
        np.testing.assert_array_equal(labels, y)
        np.testing.assert_allclose(_host(images, weights), x, atol=1e-6)
    if kwargs:  # the unmixed check below once, from step 0 of the whole stream: resuming and sharding are checked above
        return
    # Unmixed, RandAugment's whole levels are the float stream's exactly.
    floats, uint8 = _pairs(TrainConfig(**{**TINY, "mixup_alpha": 0.0}), 2)
    for (x, y), (images, labels) in zip(floats, uint8):
        np.testing.assert_array_equal(_host(images), x)
        np.testing.assert_array_equal(labels, y)


def test_without_randaugment_the_resized_images_are_rounded_and_eval_batches_too():
    config = TrainConfig(**{**TINY, "randaugment": None, "mixup_alpha": 0.0})
    floats, uint8 = _pairs(config, 2)
    for (x, y), (images, labels) in zip(floats, uint8):
        assert np.abs(_host(images) - x).max() <= HALF_LEVEL + 1e-6
        np.testing.assert_array_equal(labels, y)
    assert any(not np.array_equal(_host(images), x) for (x, _), (images, _) in zip(floats, uint8))  # rounded
    source = data.load_source("digits")
    for resize_small in (None, 18):
        config = TrainConfig(image_size=16, batch_size=64, eval_resize_small=resize_small)
        batches = zip(data.eval_dataset(source, config), data.eval_dataset(source, config, device_input=True))
        for (x, y, w), (images, labels, weights) in batches:
            assert images.dtype == np.uint8
            np.testing.assert_array_equal(labels, y)
            np.testing.assert_array_equal(weights, w)
            real = w.numpy() > 0  # padding: 0 (-1 scaled) instead of 0.0, weight 0 either way
            assert np.abs(_host(images.numpy())[real] - x.numpy()[real]).max() <= HALF_LEVEL + 1e-6


@pytest.mark.slow
def test_mixup_with_accumulation_is_refused_and_accumulation_alone_splits_uint8_batches():
    source = data.load_source("synthetic")
    with pytest.raises(ValueError, match="Use device_input=false or accum_steps=1"):
        data.train_dataset(source, TrainConfig(**TINY, accum_steps=2), device_input=True)
    config = TrainConfig(**{**TINY, "mixup_alpha": 0.0, "accum_steps": 2})
    floats, uint8 = _pairs(config, 1)
    assert len(uint8) == 2 and uint8[0][0].shape == (4, 16, 16, 3)
    for (x, _), (images, _) in zip(floats, uint8):
        np.testing.assert_array_equal(_host(images), x)


def _placement(kind, backend="tensorflow", replicas=1, processes=1):
    return Placement(backend, "test", "test", replicas, kind, num_processes=processes)


def test_auto_is_on_for_accelerators_off_on_cpus_and_true_is_refused_where_the_mix_would_differ():
    plain, mixed = TrainConfig(), TrainConfig(mixup_alpha=0.2, batch_size=8)
    assert resolve_device_input(plain, _placement("cpu"))[0] is False
    assert "cpu" in resolve_device_input(plain, _placement("cpu"))[1]
    assert resolve_device_input(plain, _placement("gpu", replicas=8))[0] is True
    assert resolve_device_input(mixed, _placement("tpu", "jax", replicas=8))[0] is True  # one global jnp.roll
    assert resolve_device_input(plain.replace(device_input=True), _placement("cpu"))[0] is True
    assert resolve_device_input(mixed.replace(device_input=False), _placement("gpu"))[0] is False
    for config, placement in [
        (mixed.replace(accum_steps=2), _placement("gpu")),
        (mixed, _placement("gpu", replicas=2)),
        (mixed, _placement("gpu", "jax", replicas=2, processes=2)),
    ]:
        on, why = resolve_device_input(config, placement)
        assert on is False and "tf.data" in why
        with pytest.raises(ValueError, match="Use device_input=false"):
            resolve_device_input(config.replace(device_input=True), placement)


def same_step():
    """Two SGD steps of a model on the float stream and of `DeviceInput` over its copy on the uint8 stream: the
    same losses and weights within 1e-6. Returns the backend's name and the figures."""
    config = TrainConfig(**TINY)
    floats, uint8 = _pairs(config, 2)
    plain, other = (keras_vit.create_model("testing", image_size=16, num_classes=10) for _ in range(2))
    other.set_weights(plain.get_weights())
    wrapped = DeviceInput(other)
    for model in (plain, wrapped):
        # SGD: the compiled step's graph rewrites (a division by a reciprocal's product, fused multiply-adds)
        # leave a scaled or mixed pixel up to 1 ulp from tf.data's, which Adam's normalised first steps magnify.
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    for (x, y), (inputs, labels) in zip(floats, uint8):
        a = float(plain.train_on_batch(x, y))
        b = float(wrapped.train_on_batch(inputs, labels))
        assert abs(a - b) <= 1e-6 * max(1.0, abs(a)), (a, b)
    worst = max(float(np.abs(p - q).max()) for p, q in zip(plain.get_weights(), other.get_weights()))
    assert wrapped.inner is other and worst <= 1e-6, worst
    return f"same step {keras.backend.backend()} {a} {b} {worst}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", pytest.param("jax", marks=pytest.mark.jax)])  # in each session
def test_the_wrapper_trains_like_the_plain_model_on_the_float_stream(backend):
    if backend == keras.backend.backend():  # the suite's own backend: here
        assert same_step().startswith(f"same step {backend}")
        return
    code = "from tests.training.test_device_input import same_step; print(same_step())"
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert f"same step {backend}" in result.stdout


def test_the_wrapper_scales_uint8_images_and_owns_no_variables():
    model = keras.Sequential([keras.Input((2, 2, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
    wrapped = DeviceInput(model)
    out = wrapped(np.full((3, 2, 2, 3), 255, np.uint8))
    np.testing.assert_allclose(out, model(np.ones((3, 2, 2, 3), np.float32)), atol=1e-6)
    assert wrapped.trainable_variables == model.trainable_variables  # the same variables, nothing of its own


def test_under_mixed_bfloat16_the_wrapper_still_scales_and_mixes_in_float32():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = keras.Sequential([keras.Input((2, 2, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
        wrapped = DeviceInput(model)
        images = np.arange(24, dtype=np.uint8).reshape(2, 2, 2, 3) * 10
        weights = np.tile(np.float32([[0.75, 0.25]]), (2, 1))
        out = wrapped({"images": images, "mixup_weights": weights})
        expected = model(_host(images, weights))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert wrapped.compute_dtype == "float32" and model.compute_dtype == "bfloat16"
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(expected, np.float32))


# A run with Mixup and RandAugment, checkpoints at steps 3, 4, 6, 8; killed after step 3's, it resumes mid-epoch. JAX's
# default jit_compile=auto (the step one jitted program, as a JAX user runs it; op by op took longer than compiling).
SETTINGS = (
    "image_size=16 steps_per_epoch=4 checkpoint_every=3 eval_every=0 num_samples=8 num_calibration=8 "
    "mixup_alpha=0.2 randaugment=(2,10) deterministic=True warmup_steps=1 plots=false"
)
RUN = ["--dataset", "synthetic", "--epochs", "2", "--batch-size", "8"]
RUN += [arg for option in SETTINGS.split(" ") for arg in ("--set", option)]


def _cli(workdir, *extra, kill_at=None):
    """The run as a JAX process of its own with the JAX session's 2 host devices: the killed run."""
    env = processes.env(backend="jax", devices=2, **({"KERAS_VIT_KILL_AT_WRITE": kill_at} if kill_at else {}))
    return processes.run_cli("-m", "training", "--workdir", workdir, *RUN, *extra, env=env, timeout=600, check=False)


def _in_process(workdir, capfd, *extra):
    """The same command line in this (JAX) session: a kill is what needs a process, not the runs around it."""
    from training.__main__ import main

    return processes.call_cli(main, "--workdir", workdir, *RUN, *extra, capfd=capfd)


# On JAX, where a checkpoint syncs the fitted wrapper's training state: the route with most to get wrong. TensorFlow's
# fit through the wrapper is checked in-process (the wrapper's train step, the EMA and LoRA runs below). The host
# and resumed runs go in the JAX session (DataParallel over its 2 host devices, as the killed process's).
@pytest.mark.jax
@pytest.mark.slow  # three short runs, one a process
@pytest.mark.process  # a run killed
def test_a_device_input_run_killed_mid_epoch_resumes_to_the_host_runs_weights_and_writes_the_plain_model(
    tmp_path, capfd
):
    assert keras.backend.backend() == "jax"
    host, device = tmp_path / "host", tmp_path / "device"
    reference = _in_process(host, capfd)  # device_input=auto: off on this CPU
    assert reference.returncode == 0, reference.stdout[-2000:] + reference.stderr[-3000:]
    assert "device_input=auto: images scaled in tf.data (a cpu run)" in reference.stdout
    stopped = _cli(device, "--set", "device_input=true", kill_at="ckpt-00000003.npz:after")
    assert stopped.returncode == -signal.SIGKILL, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    resumed = _in_process(device, capfd, "--set", "device_input=true")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert "resuming from step 3 of 8" in resumed.stdout
    metrics = {name: json.loads((path / "metrics.json").read_text()) for name, path in (("h", host), ("d", device))}
    assert metrics["h"]["device_input"] is False and "cpu run" in metrics["h"]["device_input_reason"]
    assert metrics["d"]["device_input"] is True and metrics["d"]["resumed_from_step"] == 3
    assert metrics["h"]["devices"] == metrics["d"]["devices"] == 2
    models = [keras.saving.load_model(str(path / "model.keras"), compile=False) for path in (host, device)]
    assert type(models[1]).__name__ == "VisionTransformer" and models[1].inputs[0].dtype == "float32"
    worst = max(float(np.abs(a - b).max()) for a, b in zip(*(m.get_weights() for m in models)))
    print(f"largest weight difference from the host route after 8 AdamW steps: {worst:.2e}")  # for `pytest -s`
    assert worst < 1e-5  # only where the scaling and the mixing ran moved (1-ulp differences, see above)
    assert abs(metrics["h"]["loss"] - metrics["d"]["loss"]) < 1e-4


@pytest.mark.slow
def test_the_moving_average_and_lora_runs_write_the_plain_model_with_device_input(tmp_path):
    import training

    tiny = dict(TINY, epochs=1, steps_per_epoch=3, warmup_steps=1, eval_every=0, num_samples=4,
                num_calibration=4, strategy="default", device_input=True, jit_compile=False)  # fmt: skip
    averaged = training.train(TrainConfig(**tiny, ema_decay=0.9), str(tmp_path / "ema"), verbose=0)
    assert averaged.metrics["device_input"] is True and averaged.metrics["ema"]["exported"] == "average"
    init = str(tmp_path / "ema" / "model.keras")
    lora = training.train(TrainConfig(**tiny, init=init, lora_rank=2), str(tmp_path / "lora"), verbose=0)
    assert lora.metrics["device_input"] is True
    for result in (averaged, lora):
        assert type(result.model).__name__ == "VisionTransformer"
        saved = keras.saving.load_model(os.path.join(result.workdir, "model.keras"), compile=False)
        assert type(saved).__name__ == "VisionTransformer" and saved.inputs[0].dtype == "float32"
