"""A run owns its workdir: run ids in checksummed headers, the resume fingerprint, folder identity, the lock, rescue."""

import dataclasses
import json
import os
import shutil
import signal
import socket

import keras
import numpy as np
import pytest

import training
from tests.support.runs import TINY_CONFIG
from training import run_identity
from training.__main__ import rescue_flags
from training.checkpoints.checkpoint_file import checksum as _checksum
from training.checkpoints.checkpointing import CheckpointManager
from training.checkpoints.fault_tolerance import rescue_settings
from training.options.config import TrainConfig
from training.options.overrides import parse_overrides
from training.run_plan import resume_schedule

CONFIG = TrainConfig(**TINY_CONFIG)


def _manager(directory):
    """A manager over a tiny Dense model: these tests need real checkpoint files, not a ViT."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    return CheckpointManager(str(directory), model, optimizer)


def _checkpoint(workdir, config, step=2, dataset_files=None):
    """Writes run.json and one checkpoint of a new run of `config` into `workdir`; returns the run's identity."""
    identity = run_identity.resolve(str(workdir), config, None, dataset_files)
    identity.write(str(workdir))
    manager = _manager(workdir / "checkpoints")
    manager.optimizer.iterations.assign(step)
    manager.save(identity.header())
    return identity


def _read_raw(path):
    with np.load(path) as archive:
        header = json.loads(archive["header"].tobytes().decode("utf-8"))
        arrays = {k: archive[k] for k in archive.files if k != "header"}
    return header, arrays


def _write_raw(path, header, arrays):
    np.savez(path, **arrays, header=np.frombuffer(json.dumps(header).encode(), np.uint8))


def test_a_checkpoint_copied_from_another_run_is_refused_naming_both_runs(tmp_path):
    a = _checkpoint(tmp_path / "a", CONFIG)
    b = _checkpoint(tmp_path / "b", CONFIG)  # the very same config: only the run differs
    assert a.run_id != b.run_id
    shutil.rmtree(tmp_path / "b" / "checkpoints")
    shutil.copytree(tmp_path / "a" / "checkpoints", tmp_path / "b" / "checkpoints")
    with pytest.raises(ValueError, match=rf"belongs to run {a.run_id}, but .*b is run {b.run_id}.*new --workdir"):
        training.train(CONFIG, str(tmp_path / "b"), verbose=0)


def test_without_config_json_the_checkpoint_itself_is_checked_against_the_new_config(tmp_path):
    workdir = tmp_path / "run"
    identity = _checkpoint(workdir, CONFIG)
    os.remove(workdir / run_identity.RUN_FILE)  # only checkpoints/ restored, as the all-unreadable advice says
    loaded = CheckpointManager(str(workdir / "checkpoints"), None, None).load_latest()
    for change, pattern in (
        ({"batch_size": 8}, r"different batch_size \(batch_size: 16 -> 8\)"),
        ({"learning_rate": 0.01}, r"different learning_rate .*0.001 -> 0.01.*rescue=True"),
    ):
        with pytest.raises(ValueError, match=rf"holds run {identity.run_id} with a {pattern}"):
            run_identity.resolve(str(workdir), CONFIG.replace(**change), loaded)
    assert run_identity.resolve(str(workdir), CONFIG, loaded).run_id == identity.run_id  # adopted back


def test_the_checksum_covers_the_header_and_a_header_without_one_is_refused(tmp_path):
    identity = _checkpoint(tmp_path, CONFIG, step=4)
    path = str(tmp_path / "checkpoints" / "ckpt-00000004.npz")
    header, arrays = _read_raw(path)
    assert header["run_id"] == identity.run_id and header["fingerprint"] == identity.fingerprint
    assert CheckpointManager.read(path)[0]["step"] == 4
    for edit in (
        lambda h: h.update(step=9),
        lambda h: h["schedule" if "schedule" in h else "fingerprint"].update(learning_rate=0.5),
        lambda h: h.update(run_id="someone-else"),
        lambda h: h["paths"]["model"].reverse(),
    ):
        edited = json.loads(json.dumps(header))
        edit(edited)
        _write_raw(path, edited, arrays)
        with pytest.raises(ValueError, match="do not match the checksum"):
            CheckpointManager.read(path)
    _write_raw(path, {k: v for k, v in header.items() if k != "sha256"}, arrays)
    with pytest.raises(ValueError, match="carries no checksum"):
        CheckpointManager.read(path)
    _write_raw(path, {**header, "sha256": _checksum(arrays, header)}, arrays)  # resealed: reads again
    assert CheckpointManager.read(path)[0]["run_id"] == identity.run_id


def test_every_config_field_is_in_the_fingerprint_unless_exempted_with_a_reason():
    fields = {field.name for field in dataclasses.fields(TrainConfig)}
    assert set(run_identity.EXEMPT) <= fields and all(len(reason) > 20 for reason in run_identity.EXEMPT.values())
    assert set(run_identity.fingerprint(CONFIG)) == fields - set(run_identity.EXEMPT)
    # The audit's keys that changed the stream or the update and were accepted or not compared.
    for key in ("augment", "mixup_alpha", "flip", "translate", "crop_area", "randaugment", "mixup_images",
                "shuffle_buffer", "eval_resize_small", "deterministic", "randaugment_scale_pixels"):  # fmt: skip
        assert key in run_identity.fingerprint(CONFIG)


@pytest.mark.parametrize(
    "change",
    [{"augment": "resize"}, {"mixup_alpha": 0.2}, {"flip": False}, {"crop_area": (0.5, 1.0)}, {"shuffle_buffer": 8}],
)
def test_a_resume_with_a_changed_stream_option_is_refused(tmp_path, change):
    _checkpoint(tmp_path, CONFIG)
    loaded = CheckpointManager(str(tmp_path / "checkpoints"), None, None).load_latest()
    (key,) = change
    with pytest.raises(ValueError, match=rf"different {key} "):
        run_identity.resolve(str(tmp_path), CONFIG.replace(**change), loaded)
    # Exempt fields change freely: where it runs, how often it checkpoints, its outputs.
    run_identity.resolve(str(tmp_path), CONFIG.replace(checkpoint_every=7, strategy="auto", num_samples=9), loaded)


def _image_folder(root, counts=(3, 3)):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, count in enumerate(counts):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), np.uint8)).save(root / f"c{c}" / f"{i}.png")
    return root


def _scanned(folder):
    """The files the data scan keeps of `folder` (what the trainer passes to `run_identity.resolve`)."""
    from training.data import load_source

    return load_source(f"folder:{folder}").files


def test_a_folder_dataset_is_identified_by_its_files_not_its_path(tmp_path):
    from PIL import Image

    original = _image_folder(tmp_path / "data")
    Image.open(original / "c0" / "1.png").save(original / "c0" / "1.png", compress_level=0)
    config = CONFIG.replace(dataset=f"folder:{original}")
    _checkpoint(tmp_path / "run", config, dataset_files=_scanned(original))
    loaded = CheckpointManager(str(tmp_path / "run" / "checkpoints"), None, None).load_latest()
    moved = tmp_path / "elsewhere" / "data2"
    shutil.copytree(original, moved)

    def resolve():
        return run_identity.resolve(
            str(tmp_path / "run"), CONFIG.replace(dataset=f"folder:{moved}"), loaded, _scanned(moved)
        )

    resolve()  # resumes
    shutil.copy(moved / "c0" / "0.png", moved / "c1" / "new.png")  # the folder gained an image
    with pytest.raises(ValueError, match=r"different dataset \(dataset: 'folder: 6 files.*-> 'folder: 7 files"):
        resolve()
    os.remove(moved / "c1" / "new.png")
    size = os.path.getsize(moved / "c0" / "1.png")
    pixels = np.asarray(Image.open(moved / "c0" / "1.png")).copy()
    pixels[0, 0, 0] ^= 1  # same name and size (stored, not compressed), other content: still a readable image
    Image.fromarray(pixels).save(moved / "c0" / "1.png", compress_level=0)
    assert os.path.getsize(moved / "c0" / "1.png") == size
    with pytest.raises(ValueError, match=r"different dataset"):
        resolve()


def test_a_second_trainer_on_a_workdir_fails_at_once_and_a_killed_holder_leaves_no_lock(tmp_path):
    workdir = str(tmp_path / "run")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the holder, killed below
        try:
            with run_identity.workdir_lock(workdir):
                os.write(write, b"held")
                signal.pause()
        finally:
            os._exit(1)
    os.close(write)
    assert os.read(read, 4) == b"held"
    try:
        expected = rf"is in use by another trainer \(pid {child} on host {socket.gethostname()}, lock .*\.lock\)"
        with pytest.raises(run_identity.WorkdirInUse, match=expected) as caught:
            training.train(CONFIG, workdir, verbose=0)
        assert "\n" not in str(caught.value) and isinstance(caught.value, ValueError)  # the CLI's one line, exit 2
        assert not os.path.exists(os.path.join(workdir, "checkpoints"))
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    # The kernel dropped the dead holder's lock; a second holder in this same process is refused too.
    with run_identity.workdir_lock(workdir):
        second = run_identity.workdir_lock(workdir)
        with pytest.raises(run_identity.WorkdirInUse, match=f"pid {os.getpid()} "):
            second.__enter__()
    with run_identity.workdir_lock(workdir):  # released when the block ended
        pass


def test_rescue_changes_the_learning_rate_on_purpose_and_the_history_records_it(tmp_path):
    config = CONFIG.replace(learning_rate=0.01, global_clipnorm=None, epochs=4)
    identity = _checkpoint(tmp_path, config, step=3)
    manager = CheckpointManager(str(tmp_path / "checkpoints"), None, None)
    loaded = manager.load_latest()
    # The NaN advice names the exact options; the command line's words for them parse, and they are what a
    # rescue needs.
    settings = rescue_settings(identity.header()["fingerprint"])
    assert settings == {"rescue": True, "learning_rate": 0.001, "global_clipnorm": 1.0}
    command = rescue_flags(settings)
    assert command == "--set rescue=True --set learning_rate=0.001 --set global_clipnorm=1.0"
    rescue = parse_overrides(command.replace("--set ", "").split())
    assert rescue == {"rescue": True, "learning_rate": 0.001, "global_clipnorm": 1.0}
    with pytest.raises(ValueError, match=r"different learning_rate, global_clipnorm .*add --set rescue=True"):
        run_identity.resolve(str(tmp_path), config.replace(learning_rate=0.001, global_clipnorm=1.0), loaded)
    with pytest.raises(ValueError, match=r"different batch_size"):  # rescue allows only its own keys
        run_identity.resolve(str(tmp_path), config.replace(**rescue, batch_size=8), loaded)
    rescued = run_identity.resolve(str(tmp_path), config.replace(**rescue), loaded)
    assert rescued.run_id == identity.run_id
    event = rescued.history[-1]
    assert event["event"] == "rescue" and event["step"] == 3
    assert event["changed"] == {"learning_rate": [0.01, 0.001], "global_clipnorm": [None, 1.0]}
    assert rescued.fingerprint["learning_rate"] == 0.001  # later resumes compare against the rescued values
    # The restored schedule keeps its shape from the restored step, at the new peak.
    header = {**loaded.header, "schedule": {"peak": 0.01, "total_steps": 8, "warmup_steps": 0, "decay": "cosine"}}
    old = resume_schedule(config, 8, dataclasses.replace(loaded, header=header))
    new = resume_schedule(config.replace(**rescue), 8, dataclasses.replace(loaded, header=header))
    assert new.peak == 0.001 and float(new(5)) == pytest.approx(float(old(5)) / 10, rel=1e-6)
    rescued.write(str(tmp_path))
    assert json.loads((tmp_path / "run.json").read_text())["history"][-1]["event"] == "rescue"


class _Killed(Exception):
    pass


class _KillAt(keras.callbacks.Callback):
    """Raises after the given epoch's batch, as a SIGKILL would stop the run there (its checkpoint is written)."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.at, self.epoch = (epoch, batch), None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            raise _Killed


@pytest.mark.slow
def test_after_a_mid_epoch_resume_the_epochs_log_row_equals_the_uninterrupted_runs(tmp_path):
    config = CONFIG.replace(epochs=2, steps_per_epoch=4, checkpoint_every=2, deterministic=True, schedule="constant")
    training.train(config, str(tmp_path / "whole"), verbose=0)
    with pytest.raises(_Killed):  # after step 6, a mid-epoch checkpoint of epoch 1
        training.train(config, str(tmp_path / "cut"), verbose=0, callbacks=[_KillAt(1, 1)])
    # --init is read at step 0 only: a resume does not fetch it again (here it no longer exists at all).
    resumed = training.train(config.replace(init=str(tmp_path / "gone.npz")), str(tmp_path / "cut"), verbose=0)
    assert resumed.metrics["resumed_from_step"] == 6
    whole, cut = ((tmp_path / d / "log.csv").read_text().splitlines() for d in ("whole", "cut"))
    assert len(cut) == 3 and cut == whole  # header, epoch 0, epoch 1: the same loss and top-1 to the last digit


def test_an_access_error_is_raised_in_one_line_and_never_marks_a_checkpoint_damaged(tmp_path, monkeypatch):
    import errno

    from keras_vit import files
    from training.checkpoints.checkpointing import CheckpointError

    _checkpoint(tmp_path, CONFIG, step=2)
    manager = _manager(tmp_path / "checkpoints")
    manager.optimizer.iterations.assign(4)
    manager.save()
    newest = str(tmp_path / "checkpoints" / "ckpt-00000004.npz")
    load = files.load_numpy

    def denied(path, **kwargs):
        if path == newest:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return load(path, **kwargs)

    monkeypatch.setattr(files, "load_numpy", denied)
    with pytest.raises(
        CheckpointError, match=r"Cannot read checkpoint .*ckpt-00000004.npz \(PermissionError: .*not dam"
    ):
        manager.load_latest()
    assert manager.skipped == []  # not marked: the next save keeps it
    monkeypatch.setattr(files, "load_numpy", load)
    manager.optimizer.iterations.assign(5)
    manager.save()
    assert os.path.exists(newest)
    (tmp_path / "checkpoints" / "ckpt-00000009.npz").write_bytes(b"PK\x03\x04 truncated")  # real damage: skipped
    assert manager.load_latest().step == 5 and manager.skipped == [str(tmp_path / "checkpoints" / "ckpt-00000009.npz")]


def test_a_nan_in_the_optimizer_state_is_never_saved_and_renames_are_made_durable(tmp_path, monkeypatch):
    import stat

    from training.checkpoints.checkpointing import NonFiniteStateError

    manager = _manager(tmp_path)
    manager.optimizer.iterations.assign(3)
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)), fsync(fd))[1])
    manager.save()
    assert synced[-1] is True  # the directory, after the rename
    moment = next(v for v in manager.optimizer.variables if "momentum" in v.path)
    moment.assign(np.full(moment.shape, np.nan, "float32"))
    manager.optimizer.iterations.assign(4)
    with pytest.raises(NonFiniteStateError, match=rf"{moment.path} holds NaN/Inf at step 4"):
        manager.save()
    assert sorted(os.listdir(tmp_path)) == ["ckpt-00000003.npz"]
