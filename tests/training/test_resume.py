"""Fault tolerance: SIGKILL and resume (mid-epoch, epoch boundary), SIGTERM, NaN loss, atomic checkpoints."""

import contextlib
import io
import json
import os
import re
import signal
import time

import keras
import numpy as np
import pytest

import training
from keras_vit import files
from keras_vit.files import atomic_write
from tests.support import processes, runs
from training.checkpoints.checkpointing import CheckpointManager

# The shared tiny run (tests/support/runs.py) on one device: two runs of it are bitwise equal. Without XLA, whose
# compile is most of a run this size and is not what these tests check (tests/training/test_ema.py kills and
# resumes a run on the default jit_compile=auto, XLA on).
RUN = [*runs.TINY_RUN, "--strategy", "default", "--set", "jit_compile=False"]


def _run(workdir, *extra, capfd):
    """The command line run to its end in this process: a kill is what needs a process, not the run after it."""
    from training.__main__ import main

    result = processes.call_cli(main, "--workdir", workdir, *RUN, *extra, capfd=capfd)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def _start(workdir, *extra):
    return processes.start_cli("-m", "training", "--workdir", workdir, *RUN, *extra)


def _kill_after(process, workdir, condition, timeout=240):
    """SIGKILLs `process` as soon as a checkpoint step satisfying `condition` exists; returns the saved steps."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        steps = runs.steps_saved(workdir)
        if any(condition(s) for s in steps):
            process.send_signal(signal.SIGKILL)
            process.wait()
            return steps
        if process.poll() is not None:
            pytest.fail(f"the run ended before it could be killed:\n{process.stdout.read()[-3000:]}")
        time.sleep(0.02)
    process.kill()
    pytest.fail("no checkpoint appeared in time")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run, in this process (the resumed runs below end in this process as well)."""
    from training.__main__ import main

    workdir = tmp_path_factory.mktemp("uninterrupted")
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(out):
        code = main([str(arg) for arg in ("--workdir", workdir, *RUN)])
    assert code == 0, out.getvalue()[-3000:]
    return workdir


def _assert_same_run(workdir, reference):
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["steps"] == 32  # 4 epochs x 8 steps: none lost, none repeated
    for a, b in zip(runs.weights(workdir), runs.weights(reference)):
        np.testing.assert_array_equal(a, b)
    return metrics


@pytest.mark.slow
@pytest.mark.process
def test_sigkill_mid_epoch_then_resume_finishes_the_same_run(tmp_path, reference, capfd):
    process = _start(tmp_path, "--set", "checkpoint_every=3")
    _kill_after(process, tmp_path, lambda step: step >= 12 and step % 8)  # a mid-epoch checkpoint of epoch 2
    assert process.returncode == -signal.SIGKILL
    resumed = _run(tmp_path, "--set", "checkpoint_every=3", capfd=capfd)
    start = int(re.search(r"resuming from step (\d+)", resumed.stdout).group(1))
    assert 12 <= start < 32
    metrics = _assert_same_run(tmp_path, reference)
    assert metrics["resumed_from_step"] == start
    rows = [line.split(",")[0] for line in (tmp_path / "log.csv").read_text().splitlines()[1:]]
    assert rows[-1] == "3"


@pytest.mark.slow
@pytest.mark.process
def test_sigkill_at_an_epoch_boundary_is_bitwise_equal_to_an_uninterrupted_run(tmp_path, reference, capfd):
    process = _start(tmp_path, "--set", "checkpoint_every=0")  # epoch-end checkpoints only
    _kill_after(process, tmp_path, lambda step: step >= 8)
    assert all(step % 8 == 0 for step in runs.steps_saved(tmp_path))
    resumed = _run(tmp_path, "--set", "checkpoint_every=0", capfd=capfd)
    assert int(re.search(r"resuming from step (\d+)", resumed.stdout).group(1)) % 8 == 0
    _assert_same_run(tmp_path, reference)
    # A third run of a finished workdir trains nothing and leaves the same model.
    again = _run(tmp_path, "--set", "checkpoint_every=0", capfd=capfd)
    assert "resuming from step 32 of 32" in again.stdout and "Epoch" not in again.stdout
    _assert_same_run(tmp_path, reference)


@pytest.mark.slow
@pytest.mark.process
def test_sigterm_saves_then_exits_and_the_run_resumes(tmp_path, capfd):
    process = _start(tmp_path, "--set", "checkpoint_every=0", "--epochs", "40")  # long enough not to finish
    deadline = time.time() + 240
    while not runs.steps_saved(tmp_path) and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    before = max(runs.steps_saved(tmp_path))  # the first epoch-end checkpoint
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 143, output[-3000:]
    saved = max(runs.steps_saved(tmp_path))
    assert saved > before  # written on SIGTERM, at the step where it stopped
    assert f"SIGTERM received: saved the checkpoint of step {saved}" in output
    assert not os.path.exists(tmp_path / "model.keras")
    # Resumed with a shorter schedule, on purpose (without extend_epochs a changed `epochs` is refused).
    resumed = _run(tmp_path, "--set", "checkpoint_every=0", "--set", "extend_epochs=True", capfd=capfd)
    assert f"resuming from step {saved} of 32" in resumed.stdout
    assert json.loads((tmp_path / "metrics.json").read_text())["steps"] == 32


@pytest.mark.slow
def test_nan_loss_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(tmp_path):
    # Warm-up from a tiny to an absurd learning rate: the first steps are fine, then the weights blow up.
    config = training.TrainConfig(
        dataset="synthetic",
        image_size=16,
        batch_size=16,
        epochs=1,
        steps_per_epoch=8,
        optimizer="sgd",
        learning_rate=1e30,
        warmup_steps=7,
        global_clipnorm=None,
        checkpoint_every=1,
        eval_every=0,
        jit_compile=False,
        strategy="default",
    )
    advice = r"loss became (nan|inf).*last good checkpoint \(step \d+\).*run it again with rescue=True, learning_rate="
    with pytest.raises(training.NonFiniteLossError, match=advice + r"1e\+29, global_clipnorm=1.0 \(recorded") as err:
        training.train(config, str(tmp_path), verbose=0)
    assert err.value.rescue == {"rescue": True, "learning_rate": 1e29, "global_clipnorm": 1.0}  # the CLI words these
    steps = sorted(runs.steps_saved(tmp_path))
    assert steps, "no checkpoint was kept"
    with np.load(tmp_path / "checkpoints" / f"ckpt-{steps[-1]:08d}.npz") as archive:
        for key in archive.files:
            if key.startswith("model/") and archive[key].dtype.kind == "f":
                assert np.isfinite(archive[key]).all(), key
    assert not (tmp_path / "model.keras").exists()


@pytest.mark.slow  # a tiny run, in-process
def test_nan_loss_from_the_command_line_exits_with_code_3(tmp_path, capsys):
    from training.__main__ import main

    diverging = ["--epochs", "1", "--set", "optimizer=sgd", "--set", "learning_rate=1e30", "--set", "warmup_steps=7",
                 "--set", "global_clipnorm=None", "--set", "checkpoint_every=1", "--set", "weight_decay=0"]  # fmt: skip
    code = main(["--workdir", str(tmp_path), *RUN, *diverging])  # the exit code `python -m training` exits with
    result = capsys.readouterr()
    assert code == 3, result.out[-2000:] + result.err[-3000:]
    error = result.err.strip().splitlines()[-1]
    match = re.fullmatch(
        r"\[training\] error: The training loss became (nan|inf) by step (\d+); training stopped\. The last good "
        r"checkpoint \(step (\d+)\) is kept in (.+)\. To continue from it with a lower learning rate, run the same "
        r"command again with --set rescue=True --set learning_rate=1e\+29 --set global_clipnorm=1\.0 \(recorded in "
        r"the run's history\); if it diverges again, check the data for NaN/Inf\.",
        error,
    )
    assert match, error
    bad, kept = int(match.group(2)), int(match.group(3))
    assert match.group(4) == str(tmp_path / "checkpoints") and kept == bad - 1 == max(runs.steps_saved(tmp_path))
    assert "Traceback" not in result.err and not (tmp_path / "model.keras").exists()


def test_atomic_write_keeps_the_previous_file_when_writing_fails(tmp_path):
    path = tmp_path / "ckpt.npz"
    atomic_write(str(path), lambda f: f.write(b"good"))

    def crash(f):
        f.write(b"half")
        raise KeyboardInterrupt  # as if the process died while writing

    with pytest.raises(KeyboardInterrupt):
        atomic_write(str(path), crash)
    assert path.read_bytes() == b"good" and os.listdir(tmp_path) == ["ckpt.npz"]


def test_restore_skips_an_unreadable_newest_checkpoint(tmp_path):
    import keras_vit

    model = keras_vit.create_model("testing", image_size=16, num_classes=3)
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(model.trainable_variables)
    manager = CheckpointManager(str(tmp_path), model, optimizer)
    optimizer.iterations.assign(5)
    model.get_layer("head").bias.assign([1.0, 2.0, 3.0])
    manager.save()
    (tmp_path / "ckpt-00000009.npz").write_bytes(b"PK\x03\x04 truncated")
    model.get_layer("head").bias.assign([0.0, 0.0, 0.0])
    optimizer.iterations.assign(0)
    header = manager.restore_latest()
    assert header["step"] == 5 and manager.step() == 5
    np.testing.assert_array_equal(model.get_layer("head").bias.numpy(), [1.0, 2.0, 3.0])


@pytest.mark.slow
def test_resuming_with_a_different_batch_size_is_refused(tmp_path):
    config = training.TrainConfig(**runs.TINY_CONFIG)
    training.train(config, str(tmp_path), verbose=0)
    with pytest.raises(ValueError, match="different batch_size.*16 -> 32.*new --workdir"):
        training.train(config.replace(batch_size=32), str(tmp_path), verbose=0)


def _visible_files(workdir):
    """Every file a user sees in `workdir` (no dot-files, no TensorBoard event logs), relative to it."""
    out = []
    for root, dirs, names in os.walk(workdir):
        dirs[:] = [d for d in dirs if d != "logs"]
        out += [os.path.relpath(os.path.join(root, n), workdir) for n in names if not n.startswith(".")]
    return sorted(out)


def _assert_all_complete(workdir):
    """Each file in view reads whole: no half-written file, whatever the moment of the kill."""
    import zipfile

    for name in _visible_files(workdir):
        path = os.path.join(workdir, name)
        if name.endswith(".npz"):
            if name.startswith("checkpoints"):
                CheckpointManager.read(path)  # also verifies the checksum
            else:
                with np.load(path) as archive:
                    [archive[k] for k in archive.files]
        elif name.endswith(".json"):
            json.loads(files.read_text(path))
        elif name.endswith(".csv"):
            lines = files.read_text(path).splitlines()
            assert lines and all(len(line.split(",")) == len(lines[0].split(",")) for line in lines), name
        elif name.endswith((".keras", ".png")):
            if name.endswith(".keras"):
                assert zipfile.ZipFile(path).testzip() is None
            else:
                assert files.read_bytes(path)[-8:-4] == b"IEND", name


@pytest.mark.slow
@pytest.mark.process
def test_kills_at_chosen_writes_then_reruns_end_with_the_uninterrupted_run(tmp_path, reference, capfd):
    # KERAS_VIT_KILL_AT_WRITE (keras_vit/files.py) SIGKILLs the process at the first atomic write of the file it
    # names. With checkpoint_every=4 the writes are config.json, ckpt-4, then at each epoch end log.csv and the
    # epoch's checkpoint, ckpt-12 and so on, then labels.txt, samples/, plots/, metrics.json.
    kills = [
        ("ckpt-00000008.npz", "ckpt-00000008.npz"),  # 1. during a checkpoint write: resumes from step 4
        ("log.csv:after", "log.csv"),  # 2. from 4: between epoch 0's log row and its checkpoint
        ("heldout.npz", "heldout.npz"),
    ]  # 3. from 4 again: during the final outputs, after step 32's checkpoint
    for point, target in kills:
        command = ["-m", "training", "--workdir", tmp_path, *RUN, "--set", "checkpoint_every=4"]
        process = processes.run_cli(*command, env=processes.env(KERAS_VIT_KILL_AT_WRITE=point), check=False)
        assert process.returncode == -signal.SIGKILL, process.stdout[-2000:] + process.stderr[-3000:]
        assert re.search(rf"SIGKILL (during|after) atomic write #\d+ \(.*{re.escape(target)}\)", process.stderr)
        _assert_all_complete(tmp_path)
    assert not (tmp_path / "metrics.json").exists()
    resumed = _run(tmp_path, "--set", "checkpoint_every=4", capfd=capfd)
    assert "resuming from step 32 of 32" in resumed.stdout
    _assert_same_run(tmp_path, reference)
    _assert_all_complete(tmp_path)
    expected = [n for n in _visible_files(reference) if not n.startswith("checkpoints")]
    assert _visible_files(tmp_path) == sorted(
        [*expected, "checkpoints/ckpt-00000028.npz", "checkpoints/ckpt-00000032.npz"]
    )
    assert not [n for n in os.listdir(tmp_path / "checkpoints") if n.startswith(".")]  # killed writes' temp files
    # and elsewhere: kill 3 left samples/.heldout.npz.*.tmp; the rerun's start swept it (files.sweep_temporaries)
    assert not [p for p in tmp_path.rglob(".*.tmp*") if p.is_file()]
    ours, theirs = (json.loads((w / "metrics.json").read_text()) for w in (tmp_path, reference))
    assert {k: ours[k] for k in ("top1", "top5", "loss", "steps")} == {
        k: theirs[k] for k in ("top1", "top5", "loss", "steps")
    }
    assert (tmp_path / "labels.txt").read_bytes() == (reference / "labels.txt").read_bytes()
    for name in ("heldout.npz", "calibration.npz"):
        with np.load(tmp_path / "samples" / name) as a, np.load(reference / "samples" / name) as b:
            assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    epochs = [line.split(",")[0] for line in (tmp_path / "log.csv").read_text().splitlines()[1:]]
    assert epochs == ["0", "1", "2", "3"]  # each epoch's row once, though epoch 0 was cut twice
