"""training.placement.sharding: `--strategy fsdp` on 4 host devices against data parallelism, its layouts, and resume
across layouts (a sharded run's checkpoint on one device and the other way round).

The backend and the host device count are fixed when JAX is first imported, so the runs go in one fresh process
with KERAS_BACKEND=jax and XLA_FLAGS=--xla_force_host_platform_device_count=4 (as tests/training/test_jax.py does).
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests import support
from tests.support import multiprocess
from tests.support.runs import losses, steps_saved, weights
from training.checkpoints.checkpoint_file import _AUTO_SUFFIX
from training.placement.strategy import StrategyError, select_strategy

ROOT = str(support.ROOT)
DEVICES = 4
# Tiny and dropout-free (hidden 32, MLP 128: both divide by 4); 2 epochs of 2 steps, checkpoints at steps 2 and 4.
CONFIG = (
    "training.TrainConfig(dataset='synthetic', image_size=16, batch_size=16, epochs=2, steps_per_epoch=2, "
    "eval_every=0, checkpoint_every=2, learning_rate=3e-3, num_samples=4, num_calibration=4, plots=False, seed=1)"
)

RUNS = textwrap.dedent(f"""
    import glob, json, os, shutil, sys
    import jax, keras, numpy as np
    import keras_vit, training
    from training.placement import sharding
    from training.checkpoints.checkpoint_file import read

    root = sys.argv[1]

    def train(strategy, name):
        result = training.train({CONFIG}.replace(strategy=strategy), root + "/" + name, verbose=0)
        newest = sorted(glob.glob(root + "/" + name + "/checkpoints/ckpt-*.npz"))[-1]
        header, arrays = read(newest)
        return result, {{
            "losses": [loss for history in result.histories for loss in history["loss"]],
            "metrics": {{k: result.metrics.get(k) for k in ("strategy", "devices", "resumed_from_step",
                                                           "sharded_parameters")}},
            "paths": header["paths"],
            "shapes": {{key: list(value.shape) for key, value in arrays.items()}},
            "weights": [np.asarray(w).ravel().tolist() for w in result.model.get_weights()],
        }}

    def layouts(variables):
        def spec(v):
            return list(v.value.sharding.spec) + [None] * (len(v.shape) - len(v.value.sharding.spec))

        return {{v.path: {{"spec": spec(v),
                          "shards": sorted({{tuple(s.data.shape) for s in v.value.addressable_shards}}),
                          "devices": len(v.value.sharding.device_set), "shape": list(v.shape)}}
                for v in variables}}

    def resume_from_step_2(source, name, strategy):
        shutil.copytree(root + "/" + source, root + "/" + name)
        os.remove(root + "/" + name + "/checkpoints/ckpt-00000004.npz")
        return train(strategy, name)[1]

    out = {{}}
    out["data_parallel"] = train("auto", "data_parallel")[1]
    fsdp, out["fsdp"] = train("fsdp", "fsdp")
    out["model_layouts"] = layouts(fsdp.model.weights)
    out["optimizer_layouts"] = layouts(fsdp.model.optimizer.variables)
    # The slots of accum_steps and ema_decay (built here, under the fsdp run's distribution, not trained).
    extra = keras.optimizers.AdamW(1e-3, use_ema=True, gradient_accumulation_steps=2)
    extra.build(fsdp.model.trainable_variables)
    out["extra_slot_layouts"] = layouts(extra.variables)
    out["one_device"] = train("default", "one_device")[1]
    out["fsdp_then_one_device"] = resume_from_step_2("fsdp", "fsdp_then_one_device", "default")
    out["one_device_then_fsdp"] = resume_from_step_2("one_device", "one_device_then_fsdp", "fsdp")

    # A kernel whose split axis does not divide by the devices (hidden 30) is kept whole; the MLP's (120) is split.
    distribution = sharding.FullySharded(jax.devices())
    with distribution.scope():
        odd = keras_vit.create_model("testing", image_size=16, num_classes=3, hidden_size=30, mlp_dim=120)
    out["odd_kept_whole"] = distribution.kept_whole
    out["odd_layouts"] = layouts(odd.weights)
    with sharding.FullySharded(jax.devices()).scope():  # a hybrid: its ResNet stem's convolutions are split too
        hybrid = keras_vit.create_model("testing", image_size=16, resnet_layers=(1,), patch_size=1)
    out["hybrid_layouts"] = layouts(hybrid.weights)
    print("RESULT" + json.dumps(out))
""")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of this module, in one process on 4 host devices: {name: what it recorded}, and its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "XLA_FLAGS")}
    env.update(
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=ROOT,
        KERAS_BACKEND="jax",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}",
    )
    result = subprocess.run(
        [sys.executable, "-c", RUNS, str(tmp_path_factory.mktemp("fsdp"))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return json.loads(result.stdout.split("RESULT", 1)[1]), result.stdout


@pytest.mark.slow
@pytest.mark.process  # 4 host devices: a JAX process of their own
def test_fsdp_trains_to_the_losses_of_data_parallelism(runs):
    out, stdout = runs
    assert "4 cpu devices, FSDP - fsdp requested: batch and large kernels split over 4 cpu devices" in stdout
    assert "4 cpu devices, DataParallel - auto: no accelerator, 4 host devices" in stdout
    assert out["fsdp"]["metrics"]["strategy"] == "FSDP" and out["fsdp"]["metrics"]["devices"] == DEVICES
    assert out["data_parallel"]["metrics"]["strategy"] == "DataParallel"
    data_parallel, fsdp = np.array(out["data_parallel"]["losses"]), np.array(out["fsdp"]["losses"])
    print(f"max |loss(fsdp) - loss(data parallel)| = {np.abs(fsdp - data_parallel).max():.2e}")
    assert len(fsdp) == 2 and np.all(np.diff(fsdp) < 0)  # it trains
    np.testing.assert_allclose(fsdp, data_parallel, rtol=1e-5, atol=1e-5)
    for a, b in zip(out["fsdp"]["weights"], out["data_parallel"]["weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.process  # 4 host devices: a JAX process of their own
def test_kernels_and_their_optimizer_slots_are_split_and_small_tensors_are_not(runs):
    out, stdout = runs
    model, optimizer = out["model_layouts"], out["optimizer_layouts"]
    split = {
        "embedding/kernel": 3,
        "posembed_input/pos_embedding": 2,
        "encoderblock_1/MultiHeadDotProductAttention_1/query/kernel": 0,
        "encoderblock_1/MultiHeadDotProductAttention_1/key/kernel": 0,
        "encoderblock_1/MultiHeadDotProductAttention_1/value/kernel": 0,
        "encoderblock_1/MultiHeadDotProductAttention_1/out/kernel": 2,
        "encoderblock_1/MlpBlock_3/Dense_0/kernel": 1,
        "encoderblock_1/MlpBlock_3/Dense_1/kernel": 0,
        "head/kernel": 0,
    }
    for path, axis in split.items():
        layout = model[path]
        quarter = list(layout["shape"])
        quarter[axis] //= DEVICES
        assert layout["spec"][axis] == "fsdp" and layout["devices"] == DEVICES, (path, layout)
        assert layout["shards"] == [quarter], (path, layout)  # each device holds a quarter, not the whole
        # AdamW's two moments are split the same way as their variable.
        slots = [v for p, v in optimizer.items() if p.endswith(path.replace("/", "_") + "_momentum")]
        slots += [v for p, v in optimizer.items() if p.endswith(path.replace("/", "_") + "_velocity")]
        assert len(slots) == 2 and all(slot["shards"] == [quarter] for slot in slots), (path, slots)
    # Accumulators and moving averages as well (AdamW with accumulation and EMA: 4 slots per kernel).
    query = "encoderblock_1/MultiHeadDotProductAttention_1/query/kernel"
    slots = [v for p, v in out["extra_slot_layouts"].items() if query.replace("/", "_") in p]
    assert len(slots) == 4 and all(slot["shards"] == [[8, 2, 16]] for slot in slots), slots
    for path in ("embedding/bias", "cls/cls", "encoderblock_0/LayerNorm_0/gamma", "head/bias",
                 "encoderblock_0/MultiHeadDotProductAttention_1/query/bias"):  # fmt: skip
        assert model[path]["shards"] == [model[path]["shape"]] and set(model[path]["spec"]) == {None}, path
    hybrid = out["hybrid_layouts"]
    for path in ("conv_root/kernel", "block1/unit1/conv2/kernel", "block1/unit1/conv_proj/kernel"):
        shape = hybrid[path]["shape"]
        assert hybrid[path]["shards"] == [[*shape[:3], shape[3] // DEVICES]], (path, hybrid[path])
    # All but the biases, norms and class token: the share metrics.json records and the start-up line prints.
    fraction = out["fsdp"]["metrics"]["sharded_parameters"]
    assert 0.9 < fraction < 1.0
    assert f"[training] fsdp: {100 * fraction:.1f}% of the" in stdout


@pytest.mark.slow
@pytest.mark.process  # 4 host devices: a JAX process of their own
def test_checkpoints_have_one_format_and_resume_across_layouts(runs):
    out, _ = runs
    fsdp, one = out["fsdp"], out["one_device"]
    # The same paths (up to the optimizer's per-process `_N` name suffix) and whole-array shapes: a sharded run's
    # checkpoint is the file a one-device run writes.
    stems = {name: {group: [_AUTO_SUFFIX.sub("", p) for p in paths] for group, paths in run["paths"].items()}
             for name, run in (("fsdp", fsdp), ("one", one))}  # fmt: skip
    assert stems["fsdp"] == stems["one"] and fsdp["shapes"] == one["shapes"]
    assert fsdp["paths"]["model"] == one["paths"]["model"]
    assert fsdp["shapes"]["model/00000"] == [8, 8, 3, 32]  # embedding/kernel, gathered
    np.testing.assert_allclose(fsdp["losses"], one["losses"], rtol=1e-5, atol=1e-5)
    for resumed, original in ((out["fsdp_then_one_device"], fsdp), (out["one_device_then_fsdp"], one)):
        assert resumed["metrics"]["resumed_from_step"] == 2
        # The second epoch again: weights, optimizer moments and step counter carried over between layouts.
        np.testing.assert_allclose(resumed["losses"], original["losses"][1:], rtol=1e-5, atol=1e-5)
        for a, b in zip(resumed["weights"], original["weights"]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert out["fsdp_then_one_device"]["metrics"]["strategy"] == "one device"
    assert out["one_device_then_fsdp"]["metrics"]["strategy"] == "FSDP"


@pytest.mark.slow
@pytest.mark.process  # 4 host devices: a JAX process of their own
def test_kernels_that_do_not_divide_stay_whole(runs):
    out, _ = runs
    assert "encoderblock_0/MultiHeadDotProductAttention_1/query/kernel" in out["odd_kept_whole"]
    assert "head/kernel" in out["odd_kept_whole"]
    assert not any("Dense_0" in path or "Dense_1" in path for path in out["odd_kept_whole"])
    assert out["odd_layouts"]["encoderblock_0/MlpBlock_3/Dense_0/kernel"]["shards"] == [[30, 30]]
    assert out["odd_layouts"]["head/kernel"]["shards"] == [[30, 3]]


def test_fsdp_on_tensorflow_says_it_needs_jax():
    with pytest.raises(StrategyError, match=r"--strategy fsdp shards the weights with keras.distribution.*JAX"):
        select_strategy("fsdp")


@pytest.mark.slow
@pytest.mark.process  # several processes
def test_two_processes_of_two_devices_train_and_resume_as_one_process_of_four(tmp_path):
    # `python -m training --strategy fsdp` as 1 process x 4 host devices and as 2 processes x 2 (joined on loopback,
    # as tests/training/test_multiprocess.py does): 3 epochs of 4 steps, checkpoints every 3 steps and at epoch ends.
    one, two = tmp_path / "one", tmp_path / "two"
    multiprocess.run(one, 1, 4, "--strategy", "fsdp")
    outputs = multiprocess.run(two, 2, 2, "--strategy", "fsdp")
    assert "4 cpu devices (2 processes x 2; this is process 0), FSDP" in outputs[0]
    assert "fsdp: 99.2% of the 608,842 trainable parameters split over 4 devices" in outputs[1]
    metrics = json.loads((two / "metrics.json").read_text())
    assert (metrics["strategy"], metrics["processes"], metrics["devices"]) == ("FSDP", 2, 4)
    np.testing.assert_allclose(losses(two), losses(one), rtol=1e-5, atol=1e-5)
    for a, b in zip(weights(two), weights(one)):  # model.keras, written from weights no one process held whole
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # The last checkpoint removed, the same two commands resume from the one before: gathered there, split here.
    uninterrupted = weights(two)
    before, last = sorted(steps_saved(two))[-2:]
    os.remove(two / "checkpoints" / f"ckpt-{last:08d}.npz")
    resumed = multiprocess.run(two, 2, 2, "--strategy", "fsdp")
    assert f"resuming from step {before} of 12" in resumed[0] and before < 12
    for a, b in zip(weights(two), uninterrupted):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
