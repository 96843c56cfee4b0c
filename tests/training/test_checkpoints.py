"""Checkpoint files that survive damage (checksums, paths, fallback, rotation) and resume checks on the schedule."""

import json
import logging
import math
import os

import keras
import numpy as np
import pytest

import keras_vit
import training
from tests.support.runs import TINY_CONFIG
from training.checkpoints.checkpoint_file import checksum as _checksum
from training.checkpoints.checkpointing import CheckpointError, CheckpointManager
from training.optim import WarmupDecay


def _manager(directory, keep=2):
    model = keras_vit.create_model("testing", image_size=16, num_classes=3)
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(model.trainable_variables)
    return CheckpointManager(str(directory), model, optimizer, keep=keep)


def _save_at(manager, step, bias):
    manager.optimizer.iterations.assign(step)
    manager.model.get_layer("head").bias.assign(bias)
    return manager.save()


def _rewrite(path, edit):
    """Rewrites a checkpoint with `edit(header, arrays)` applied; the file stays a valid .npz."""
    with np.load(path) as archive:
        header = json.loads(archive["header"].tobytes().decode("utf-8"))
        arrays = {k: archive[k] for k in archive.files if k != "header"}
    edit(header, arrays)
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(path, **arrays)


def _head_bias(manager):
    return manager.model.get_layer("head").bias.numpy().tolist()


def test_a_damaged_newest_checkpoint_falls_back_and_names_both_files(tmp_path, caplog):
    manager = _manager(tmp_path, keep=3)
    good = _save_at(manager, 5, [1.0, 2.0, 3.0])
    truncated = _save_at(manager, 7, [4.0, 5.0, 6.0])
    damaged = _save_at(manager, 9, [7.0, 8.0, 9.0])
    # Truncated: an unreadable zip. Damaged: a valid zip whose head bias changed after the checksum was taken.
    with open(truncated, "r+b") as f:
        f.truncate(os.path.getsize(truncated) // 2)

    def flip(header, arrays):
        key = f"model/{header['paths']['model'].index('head/bias'):05d}"
        arrays[key] = arrays[key] + 1.0

    _rewrite(damaged, flip)
    fresh = _manager(tmp_path)
    with caplog.at_level(logging.WARNING, logger="training"):
        header = fresh.restore_latest()
    assert header["step"] == 5 and fresh.step() == 5 and fresh.restored_path == good
    assert _head_bias(fresh) == [1.0, 2.0, 3.0]
    assert damaged in caplog.text and "checksum" in caplog.text and truncated in caplog.text


def test_checkpoints_that_all_fail_give_an_error_not_a_restart(tmp_path):
    (tmp_path / "ckpt-00000004.npz").write_bytes(b"PK\x03\x04 truncated")
    np.save(tmp_path / "other.npy", np.zeros(3))
    os.rename(tmp_path / "other.npy", tmp_path / "ckpt-00000008.npz")  # an .npy under a checkpoint's name
    with pytest.raises(CheckpointError, match=r"2 checkpoint file\(s\) and none can be read.*ckpt-00000008"):
        _manager(tmp_path).restore_latest()
    assert _manager(tmp_path / "empty").restore_latest() is None  # no checkpoints at all: a fresh start


@pytest.mark.slow
def test_restore_matches_variables_by_path_and_names_a_mismatch(tmp_path):
    manager = _manager(tmp_path)
    path = _save_at(manager, 3, [1.0, 2.0, 3.0])
    expected = [np.asarray(v.numpy()) for v in manager.model.variables]

    def reverse(header, arrays):  # the same variables, stored in the opposite order
        n = len(header["paths"]["model"])
        old = {i: arrays[f"model/{i:05d}"] for i in range(n)}
        for i in range(n):
            arrays[f"model/{i:05d}"] = old[n - 1 - i]
        header["paths"]["model"] = header["paths"]["model"][::-1]
        header["sha256"] = _checksum(arrays, header)

    _rewrite(path, reverse)
    fresh = _manager(tmp_path)
    fresh.restore_latest()
    for variable, value in zip(fresh.model.variables, expected):
        np.testing.assert_array_equal(np.asarray(variable.numpy()), value)

    def rename(header, arrays):
        header["paths"]["model"] = [p.replace("head/bias", "classifier/bias") for p in header["paths"]["model"]]
        header["sha256"] = _checksum(arrays, header)  # as another model would have written it

    _rewrite(path, rename)
    with pytest.raises(CheckpointError, match=r"missing from it: head/bias; in it but not in the run: classifier/bias"):
        _manager(tmp_path).restore_latest()


@pytest.mark.slow
def test_rotation_never_deletes_the_last_good_checkpoint(tmp_path):
    manager = _manager(tmp_path, keep=1)
    _save_at(manager, 5, [1.0, 2.0, 3.0])
    (tmp_path / "ckpt-00000009.npz").write_bytes(b"PK\x03\x04 a crash left this")  # a bad file of a later step
    _save_at(manager, 6, [1.0, 2.0, 3.0])
    assert sorted(os.listdir(tmp_path)) == ["ckpt-00000006.npz", "ckpt-00000009.npz"]
    fresh = _manager(tmp_path, keep=1)
    assert fresh.restore_latest()["step"] == 6
    _save_at(fresh, 7, [1.0, 2.0, 3.0])  # the bad file, now replaced by a newer good one, goes too
    assert sorted(os.listdir(tmp_path)) == ["ckpt-00000007.npz"]


def test_the_schedule_extension_is_continuous_and_matches_the_formula():
    peak, warmup, old_total, new_total, step = 0.01, 10, 100, 250, 40
    old = WarmupDecay(peak, old_total, warmup, "cosine")
    new = old.extend(step, new_total)
    p = (step - warmup) / (old_total - warmup)  # the old schedule's progress at the restored step

    def reference(t):  # the cosine decay from progress p at `step` to 1 at `new_total`, by hand
        q = p + (1 - p) * (t - step) / (new_total - step)
        return peak * 0.5 * (1 + math.cos(math.pi * q))

    assert float(new(step)) == pytest.approx(float(old(step)), rel=1e-6)
    for t in (step, step + 1, 100, 200, new_total - 1, new_total):
        assert float(new(t)) == pytest.approx(reference(t), rel=1e-5, abs=1e-9), t
    for t in (0, 5, 25, step):  # the steps already trained keep their learning rates
        assert float(new(t)) == pytest.approx(float(old(t)), rel=1e-6, abs=1e-9), t
    # Extended twice (a resume of the extended run, then another change): still continuous at each knot.
    again = WarmupDecay(**new.get_config()).extend(200, 300)
    assert float(again(200)) == pytest.approx(reference(200), rel=1e-5)
    assert float(again(300)) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="must end after the restored step 40"):
        old.extend(step, 40)
    # During the warm-up only the end moves: the same warm-up, then a plain cosine to the new end.
    assert WarmupDecay(**old.extend(5, 250).get_config()).get_config() == WarmupDecay(peak, 250, warmup).get_config()


CONFIG = training.TrainConfig(**dict(TINY_CONFIG, epochs=2, warmup_steps=1, learning_rate=3e-3, checkpoint_every=1))


@pytest.mark.slow  # five tiny trainings: ~25 s on 2 busy cores
def test_resume_names_the_file_restored_and_refuses_a_changed_schedule_unless_extended(tmp_path, capsys):
    training.train(CONFIG, str(tmp_path), verbose=0)
    checkpoints = tmp_path / "checkpoints"
    newest = checkpoints / "ckpt-00000004.npz"
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated
    capsys.readouterr()
    training.train(CONFIG, str(tmp_path), verbose=0)
    assert f"resuming from step 3 of 4 ({checkpoints / 'ckpt-00000003.npz'})" in capsys.readouterr().out
    assert sorted(os.listdir(checkpoints)) == ["ckpt-00000003.npz", "ckpt-00000004.npz"]  # step 4 written again
    assert CheckpointManager.read(str(newest))[0]["step"] == 4
    for path in checkpoints.iterdir():
        path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="none can be read"):
        training.train(CONFIG, str(tmp_path), verbose=0)
    training.train(CONFIG, str(tmp_path / "fresh"), verbose=0)
    os.remove(tmp_path / "fresh" / "checkpoints" / "ckpt-00000004.npz")  # as if killed after step 3
    tmp_path = tmp_path / "fresh"
    checkpoints = tmp_path / "checkpoints"
    for change, pattern in (
        ({"epochs": 4}, r"different epochs \(epochs: 2 -> 4\).*new --workdir.*extend_epochs"),
        (
            {"learning_rate": 1e-3, "warmup_steps": 2},
            r"different learning_rate, warmup_steps "
            r"\(learning_rate: 0.003 -> 0.001, warmup_steps: 1 -> 2\)",
        ),
        ({"optimizer": "sgd", "weight_decay": 0.0}, r"different optimizer"),
    ):
        with pytest.raises(ValueError, match=pattern):
            training.train(CONFIG.replace(**change), str(tmp_path), verbose=0)
    # Another key changes too: extending is not enough, and the refusal names that key.
    with pytest.raises(ValueError, match=r"different learning_rate \(learning_rate: 0.003 -> 0.001\)"):
        training.train(CONFIG.replace(epochs=4, learning_rate=1e-3, extend_epochs=True), str(tmp_path), verbose=0)

    result = training.train(CONFIG.replace(epochs=4, extend_epochs=True), str(tmp_path), verbose=0)
    assert result.metrics["resumed_from_step"] == 3 and result.metrics["steps"] == 8
    schedule = result.model.optimizer._learning_rate
    original = WarmupDecay(3e-3, 4, 1, "cosine")
    assert float(schedule(3)) == pytest.approx(float(original(3)), rel=1e-6)  # continuous at the restored step
    assert float(schedule(8)) == pytest.approx(0.0, abs=1e-9) and float(schedule(4)) > 0
    with np.load(checkpoints / "ckpt-00000008.npz") as archive:
        header = json.loads(archive["header"].tobytes().decode("utf-8"))
    assert header["schedule"]["knots"] == [[3, pytest.approx(2 / 3)]]
    # A later resume of the extended run (epochs=4 in its config now) keeps the stretched schedule, flag or not.
    os.remove(checkpoints / "ckpt-00000008.npz")
    again = training.train(CONFIG.replace(epochs=4), str(tmp_path), verbose=0)
    assert again.metrics["resumed_from_step"] == 7
    assert again.model.optimizer._learning_rate.get_config() == schedule.get_config()


@pytest.mark.slow
def test_an_extension_in_the_same_process_equals_a_longer_run_when_the_schedule_is_flat(tmp_path):
    # Why a one-epoch run resumed to two epochs differs from a two-epoch run: the cosine of the first epoch had
    # decayed over one epoch, not over two (the schedule changed; now refused without extend_epochs). With a
    # constant schedule the two are bitwise equal even in one process: no process-wide state leaks between calls.
    config = CONFIG.replace(schedule="constant", deterministic=True, checkpoint_every=0)
    training.train(config.replace(epochs=1), str(tmp_path / "extended"), verbose=0)
    extended = training.train(config.replace(extend_epochs=True), str(tmp_path / "extended"), verbose=0)
    longer = training.train(config, str(tmp_path / "longer"), verbose=0)
    assert extended.metrics["resumed_from_step"] == 2 and extended.metrics["loss"] == longer.metrics["loss"]
    for a, b in zip(extended.model.get_weights(), longer.model.get_weights()):
        np.testing.assert_array_equal(a, b)
