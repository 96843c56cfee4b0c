"""Multi-process JAX training on loopback: two processes x 2 host devices against one process x 4.

Each process is a `python -m training` started the way Keras documents it (KERAS_DISTRIBUTION_JOB_ADDRESSES,
KERAS_DISTRIBUTION_NUM_PROCESSES, KERAS_DISTRIBUTION_PROCESS_ID), with XLA_FLAGS giving it its host devices and
JAX's gloo collectives between the processes: a pod slice's program on one CPU machine.
"""

import json
import os
import re
import shutil
import signal
import textwrap
import time

import numpy as np
import pytest

from tests.support import multiprocess
from tests.support.processes import env, free_ports, run_cli, wait_all
from tests.support.runs import losses, steps_saved, weights

RUN = multiprocess.RUN
_start, _run = multiprocess.start, multiprocess.run


def _files(workdir):
    return sorted(
        os.path.relpath(os.path.join(d, f), workdir)
        for d, _, names in os.walk(workdir)
        for f in names
        if "checkpoints" not in d and "logs" not in d  # event files and checkpoint names carry times and steps
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same run as one process x 4 devices and as two processes x 2 devices (uninterrupted)."""
    root = tmp_path_factory.mktemp("multiprocess")
    one = _run(root / "one", 1, 4)
    two = _run(root / "two", 2, 2)
    return root, one, two


@pytest.mark.slow
@pytest.mark.process
def test_two_processes_of_two_devices_equal_one_process_of_four(runs):
    root, one, two = runs
    assert "backend jax, 4 cpu devices, DataParallel" in one[0]
    for index, output in enumerate(two):
        assert f"4 cpu devices (2 processes x 2; this is process {index}), DataParallel" in output
    first, second = losses(root / "one"), losses(root / "two")
    print(f"max |loss(2 processes x 2) - loss(1 process x 4)| per epoch = {np.abs(first - second).max():.2e}")
    assert len(first) == 3 and first[-1] < first[0]  # it trains
    # docs/multihost.md: "the per-epoch losses agree within 2.4e-7" (a float32 rounding step at these losses).
    np.testing.assert_allclose(second, first, rtol=0, atol=2.4e-7)
    for a, b in zip(weights(root / "two"), weights(root / "one")):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    metrics = json.loads((root / "two" / "metrics.json").read_text())
    assert (metrics["processes"], metrics["local_devices"], metrics["devices"]) == (2, 2, 4)
    single = json.loads((root / "one" / "metrics.json").read_text())
    assert (single["processes"], single["local_devices"], single["devices"]) == (1, 4, 4)
    # Held-out evaluation covers the split once: the same metrics as the one-process run, not a doubled count.
    assert metrics["num_heldout"] == single["num_heldout"] == 64
    assert metrics["top1"] == pytest.approx(single["top1"], abs=1e-6)
    assert metrics["loss"] == pytest.approx(single["loss"], rel=1e-4)


@pytest.mark.slow
@pytest.mark.process
def test_only_process_zero_writes_the_workdir(runs):
    root, _, two = runs
    assert _files(root / "two") == _files(root / "one")  # one set of outputs, the one-process run's files
    assert len((root / "two" / "log.csv").read_text().splitlines()) == 1 + 3  # one row per epoch, not two
    assert "plots (" in two[0] and "plots (" not in two[1]
    assert "saved the checkpoint" not in two[1]


@pytest.mark.slow
@pytest.mark.process
def test_sigkill_of_both_processes_then_the_same_command_resumes_at_the_exact_step(runs, tmp_path):
    root, _, _ = runs
    workdir = tmp_path / "killed"
    processes = _start(workdir, 2, 2)
    deadline = time.time() + 300
    while not any(s > 4 and s % 4 for s in steps_saved(workdir)):  # a mid-epoch checkpoint of epoch 2 or 3
        if any(p.poll() is not None for p in processes) or time.time() > deadline:
            for p in processes:
                p.kill()
            pytest.fail("no mid-epoch checkpoint:\n" + "\n\n".join(p.communicate()[0][-3000:] for p in processes))
        time.sleep(0.02)
    for p in processes:
        p.send_signal(signal.SIGKILL)
        p.wait()
    saved = max(steps_saved(workdir))
    outputs = _run(workdir, 2, 2)
    starts = [int(re.search(r"resuming from step (\d+) of 12", o).group(1)) for o in outputs]
    assert starts == [saved, saved] and saved % 4
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["steps"] == 12 and metrics["resumed_from_step"] == saved
    np.testing.assert_array_equal(losses(workdir), losses(root / "two"))  # log.csv rows too
    for a, b in zip(weights(workdir), weights(root / "two")):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@pytest.mark.process
def test_sigterm_to_one_process_stops_both_at_the_same_step(tmp_path):
    workdir = tmp_path / "run"
    processes = _start(workdir, 2, 2, "--epochs", "1000")  # far longer than the test waits
    deadline = time.time() + 300
    while not steps_saved(workdir):
        if any(p.poll() is not None for p in processes) or time.time() > deadline:
            for p in processes:
                p.kill()
            pytest.fail("no checkpoint:\n" + "\n\n".join(p.communicate()[0][-3000:] for p in processes))
        time.sleep(0.05)
    processes[1].send_signal(signal.SIGTERM)  # not the writer: without agreement process 0 would wait for ever
    codes, outputs = wait_all(processes, timeout=120)
    assert codes == [143, 143], "\n\n".join(o[-3000:] for o in outputs)
    saved = max(steps_saved(workdir))
    # Both stopped after the same step, and process 0 wrote that step's checkpoint.
    assert all(f"SIGTERM received: saved the checkpoint of step {saved} " in o for o in outputs), outputs[0][-2000:]
    assert not (workdir / "model.keras").exists()


# `python -m training`, with process 1's own loss made NaN at one step as FaultTolerance sees it: what a NaN in that
# process's data alone would give where the loss is not already the global one (under Keras' DataParallel a NaN in
# any shard makes the global loss NaN everywhere; the agreement must hold without that).
NAN_IN_PROCESS_1 = textwrap.dedent("""
    import os, sys
    from training.checkpoints import fault_tolerance

    at_step, original = int(os.environ["TEST_NAN_AT_STEP"]), fault_tolerance.FaultTolerance.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        if os.environ["KERAS_DISTRIBUTION_PROCESS_ID"] == "1" and self._step(batch) == at_step:
            logs = {**(logs or {}), "loss": float("nan")}
        return original(self, batch, logs)

    fault_tolerance.FaultTolerance.on_train_batch_end = on_train_batch_end
    from training.__main__ import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.slow
@pytest.mark.process
def test_a_nan_in_one_process_stops_both_with_exit_code_3_at_the_same_step(tmp_path, monkeypatch):
    workdir = tmp_path / "run"
    monkeypatch.setenv("TEST_NAN_AT_STEP", "8")  # epoch 2's last step; checkpoints at 3, 4 (epoch end) and 7
    codes, outputs = wait_all(_start(workdir, 2, 2, program=("-c", NAN_IN_PROCESS_1)), timeout=400)
    assert codes == [3, 3], "\n\n".join(o[-3000:] for o in outputs)
    errors = [o.strip().splitlines()[-1] for o in outputs]
    expected = (
        f"[training] error: The training loss became nan by step 8; training stopped. The last good checkpoint "
        f"(step 7) is kept in {workdir / 'checkpoints'}. To continue from it with a lower learning rate, run the same "
        f"command again with --set rescue=True --set learning_rate=0.0003 (recorded in the run's history)"
    )
    assert all(e.startswith(expected) for e in errors), errors  # the same step on both, process 0's loss finite
    assert max(steps_saved(workdir)) == 7  # nothing saved at or after the NaN step (nor at epoch 2's end)
    with np.load(workdir / "checkpoints" / "ckpt-00000007.npz") as archive:
        assert all(np.isfinite(archive[k]).all() for k in archive.files if archive[k].dtype.kind == "f")
    assert not (workdir / "model.keras").exists()


@pytest.mark.slow
@pytest.mark.process
def test_processes_whose_starting_weights_differ_stop_before_the_first_step(tmp_path):
    workdir = tmp_path / "run"
    # Another seed on process 1 only: its replica of every weight starts elsewhere (--init or a version would too).
    codes, outputs = wait_all(_start(workdir, 2, 2, per_process={1: ["--set", "seed=1"]}), timeout=400)
    assert codes == [2, 2], "\n\n".join(o[-3000:] for o in outputs)
    for output in outputs:
        error = output.strip().splitlines()[-1]
        # JAX compares each weight as it is put on the devices (before the trainer's own checksum could).
        assert error == (
            "[training] error: The processes of this run disagree on the model's starting weights (jax.device_put "
            "found a value that differs between the processes). Run the same keras-vit version, config and --init "
            "on every process."
        ), output[-3000:]
        assert "Traceback" not in output
    assert not (workdir / "checkpoints").exists() and not (workdir / "config.json").exists()


@pytest.mark.slow
@pytest.mark.process
def test_processes_that_see_different_workdirs_stop_before_the_first_step(runs, tmp_path):
    root, _, _ = runs
    shutil.copytree(root / "two" / "checkpoints", tmp_path / "b" / "checkpoints")  # process 1 sees step 12
    codes, outputs = wait_all(_start([tmp_path / "a", tmp_path / "b"], 2, 2), timeout=300)
    assert codes == [2, 2], "\n\n".join(o[-3000:] for o in outputs)
    for output in outputs:
        # Gloo's C++ "[Gloo] Rank ... connected" line can land after the error (seen under load): not ours.
        error = [line for line in output.strip().splitlines() if not line.startswith("[Gloo]")][-1]
        assert "disagree on the checkpoint step to resume from (-1: none) (process 0: -1, process 1: 12)" in error
        assert "put it on storage all hosts share" in error
    assert not (tmp_path / "a" / "checkpoints").exists() and max(steps_saved(tmp_path / "b")) == 12


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize("index", [0, 1])
def test_a_process_whose_peers_never_come_fails_with_one_line_in_bounded_time(tmp_path, index):
    port = free_ports(1)[0]
    started = time.time()
    result = run_cli("-m", "training", "--workdir", tmp_path / "run", *RUN, "--set", "join_timeout=2",
                     env=multiprocess.cluster_env(2, 3, index, port), timeout=120, check=False)  # fmt: skip
    elapsed = time.time() - started
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    error = result.stderr.strip().splitlines()[-1]
    if index == 0:  # the coordinator: nobody came
        assert f"Process 0 of 3 waited 2 s at 127.0.0.1:{port} and process(es) 1, 2 never joined." in error
    else:  # nobody serves the address
        assert f"Process 1 of 3 could not reach process 0 at 127.0.0.1:{port} within 2 s." in error
    assert "Start all 3 processes with the same KERAS_DISTRIBUTION_JOB_ADDRESSES" in error
    assert elapsed < 60
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing was written


@pytest.mark.slow
@pytest.mark.process  # the variables a process starts with
def test_incomplete_keras_distribution_variables_are_refused_before_any_work(tmp_path):
    result = run_cli("-m", "training", "--workdir", tmp_path / "run", *RUN,
                     env=env("jax", 2, KERAS_DISTRIBUTION_NUM_PROCESSES="2"), timeout=120, check=False)  # fmt: skip
    assert result.returncode == 2
    error = result.stderr.strip().splitlines()[-1]
    assert "KERAS_DISTRIBUTION_JOB_ADDRESSES, KERAS_DISTRIBUTION_PROCESS_ID are unset" in error


# --------------------------------------------------------------- each process's rows (in this process, tf.data only)


def _batches(source, config, steps, shard, start_step=0):
    from training.data import train_dataset

    ds = train_dataset(source, config, start_step=start_step, num_steps=steps, shard=shard)
    return [(x.numpy(), y.numpy()) for x, y in ds]


@pytest.mark.slow
@pytest.mark.parametrize("stream", ["in-memory", "read in order"])
def test_the_processes_rows_assemble_the_one_process_micro_batches(stream):
    import dataclasses

    import training
    from training.data import load_source

    config = training.TrainConfig(dataset="synthetic", image_size=16, batch_size=16, accum_steps=2, seed=3)
    source = load_source("synthetic", seed=3)
    if stream == "read in order":  # TFDS-like: no arrays, read through the per-pass shuffle
        source = dataclasses.replace(source, train_arrays=None)
    for start in (0, 21):  # the first steps, and a resumed stream crossing a pass (256 images, 16 steps)
        whole = _batches(source, config, 3, (0, 1), start)
        parts = [_batches(source, config, 3, (i, 2), start) for i in range(2)]
        assert len(whole) == 6 and all(len(p) == 6 for p in parts)  # 3 steps x 2 micro-batches of 8 (4 each)
        for u, (x, y) in enumerate(whole):
            assert parts[0][u][0].shape == (4, 16, 16, 3)
            np.testing.assert_array_equal(np.concatenate([parts[0][u][0], parts[1][u][0]]), x)
            np.testing.assert_array_equal(np.concatenate([parts[0][u][1], parts[1][u][1]]), y)


@pytest.mark.slow
def test_a_tfds_split_is_read_as_one_share_per_process(tmp_path):
    import training
    from tests.support.tfds_fakes import prepare_fake_cifar10
    from training.data import eval_dataset, load_source

    data_dir = prepare_fake_cifar10(tmp_path, num_train=64, num_test=24)
    config = training.TrainConfig(dataset="tfds:cifar10", image_size=32, batch_size=8, augment="resize", flip=False)
    whole = load_source("tfds:cifar10", data_dir=str(data_dir), eval_split="test")
    shares = [load_source("tfds:cifar10", data_dir=str(data_dir), eval_split="test", shard=(i, 2)) for i in range(2)]
    assert [s.shard_count for s in shares] == [32, 32] and all(s.num_train == 64 for s in shares)
    # One pass of each process's stream (32 / 4 rows = 8 steps) is its share, once: together the whole split.
    seen = [np.concatenate([x for x, _ in _batches(s, config, 8, (i, 2))]) for i, s in enumerate(shares)]
    everything = np.concatenate([x for x, _ in _batches(whole, config, 8, (0, 1))])
    key = lambda images: sorted(image.tobytes() for image in images)  # noqa: E731
    assert key(np.concatenate(seen)) == key(everything)
    assert not set(key(seen[0])) & set(key(seen[1]))
    # The held-out split is covered once in all: 24 images carry weight, the rest is padding.
    weights = np.concatenate(
        [w.numpy() for i, s in enumerate(shares) for _, _, w in eval_dataset(s, config, shard=(i, 2))]
    )
    assert np.count_nonzero(weights) == 24 and weights.sum() == pytest.approx(len(weights))


@pytest.mark.parametrize("count, batch, processes", [(64, 16, 2), (61, 16, 2), (7, 4, 2), (50, 12, 3)])
def test_evaluation_shards_cover_the_split_once_with_the_one_process_mean(count, batch, processes):
    """The weighted mean of a per-image value over every process's padded batches is the plain mean over the split:
    what Keras' weighted metrics and the sum_over_batch_size loss compute from these batches."""
    import tensorflow as tf

    import training
    from training.data import Source, eval_dataset

    values = np.arange(count, dtype=np.float32) ** 2  # a stand-in for each image's loss, carried in its label
    source = Source(
        train=None,
        heldout=tf.data.Dataset.from_tensor_slices((np.zeros((count, 2, 2, 3), np.uint8), np.arange(count))),
        num_train=count,
        num_heldout=count,
        class_names=[str(i) for i in range(count)],
        decode=tf.identity,
    )
    config = training.TrainConfig(dataset="synthetic", image_size=2, batch_size=batch)
    weighted, rows, steps = 0.0, 0, []
    for index in range(processes):
        batches = list(eval_dataset(source, config, shard=(index, processes)))
        steps.append(len(batches))
        for _, labels, row_weights in batches:
            weighted += float(np.sum(row_weights.numpy() * (labels.numpy() @ values)))
            rows += len(row_weights)
    assert len(set(steps)) == 1  # every process runs the same number of evaluation steps
    assert weighted / rows == pytest.approx(values.mean(), rel=1e-6)
