"""Exports, outputs and errors that stay right when processes die, PIDs repeat and storage misbehaves.

- A restarted export that gets the same PID as the one killed (containers: PID 2 every time) recovers: the
  killed attempt's staging directory is removed and, on the two-rename path, the old set moved aside is put
  back. Kills come from `export.commit.fault_point` (KERAS_VIT_EXPORT_KILL_AT), as in test_export_commit.py.
- A second export on the same `--out` is refused at once while the first holds the lock.
- A symlinked `--out` gets the export written into the directory it points at; the link stays a link.
"""

import itertools
import os
import shutil
import sys

import pytest

from export import commit
from export.errors import ExportError
from tests.test_export_commit import check_complete, expected, stage_and_commit, tree

FIXED_PID = 2


def run_child_with_pid(out, name, exchange, kill_at):
    """stage_and_commit in a forked child whose os.getpid() says FIXED_PID, SIGKILLed at fault point
    `kill_at`; returns the child's wait status as a returncode (-9 when it was killed). A fork, not a new
    interpreter: the child only moves files, and starts in milliseconds instead of importing Keras again."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.environ["KERAS_VIT_EXPORT_KILL_AT"] = str(kill_at)
            commit._points = itertools.count(1)  # the points are counted per process
            os.getpid = lambda: FIXED_PID
            stage_and_commit(out, name, exchange)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


@pytest.mark.parametrize(
    ("path", "points"),
    [
        # Point 3 writes report.json into the staging directory; 4 is "staged and flushed", then the renames.
        ("exchange", ["writing report.json", "staged and flushed", "swapped; old set not yet deleted"]),
        ("two renames", ["writing report.json", "staged and flushed", "old set moved aside",
                         "new set in place; old set not yet deleted"]),
    ],
)  # fmt: skip
def test_a_rerun_with_the_same_pid_recovers_from_a_kill_at_every_point(path, points, tmp_path, monkeypatch):
    exchange = path == "exchange"
    if exchange and sys.platform != "linux":
        pytest.skip("renameat2(RENAME_EXCHANGE) is Linux's")
    if not hasattr(os, "fork"):
        pytest.skip("the killed attempt runs in a forked child")
    out = tmp_path / "export"
    for k, point in enumerate(points, start=3):
        for leftover in tmp_path.iterdir():
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        monkeypatch.undo()
        stage_and_commit(out, "A", exchange)
        assert run_child_with_pid(out, "B", exchange, k) == -9, point
        if point == "old set moved aside":
            assert not out.exists() and any(".export.old-" in p.name for p in tmp_path.iterdir()), point
        else:
            assert check_complete(out) in (expected("A"), expected("B")), point
        # The killed attempt left its staging directory or the old set beside `out`, for the rerun to clean up.
        assert [p for p in tmp_path.iterdir() if p.name not in ("export", ".export.lock")], point
        monkeypatch.setattr(os, "getpid", lambda: FIXED_PID)  # the restarted export: the same PID
        stage_and_commit(out, "B", exchange)
        assert check_complete(out) == expected("B"), point
        assert sorted(p.name for p in tmp_path.iterdir()) == ["export"], point  # nothing leaked, lock file gone


def test_a_second_export_on_the_same_out_is_refused_while_the_first_runs(tmp_path):
    out = tmp_path / "export"
    refused = pytest.raises(ExportError, match=r"Another export is writing to .*export.*Wait for it .* another --out")
    with commit.claim(out):
        with refused, commit.claim(out):
            pass
        with commit.claim(tmp_path / "elsewhere"):  # another --out in the same folder is not held up
            pass
    with commit.claim(out):  # released: the next export takes it
        pass


def test_a_killed_export_does_not_leave_its_lock_held(tmp_path):
    out = tmp_path / "export"
    assert run_child_with_pid(out, "A", True, 1) == -9  # killed while it holds the lock
    assert (tmp_path / ".export.lock").exists()  # the file stays, the flock went with the process
    stage_and_commit(out, "A")
    assert check_complete(out) == expected("A")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two renames"])
def test_a_symlinked_out_is_written_into_its_target(exchange, tmp_path):
    real = tmp_path / "disk" / "exports"
    (tmp_path / "disk").mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)  # dangling at first: the first export creates the target
    stage_and_commit(link, "A", exchange)
    assert link.is_symlink() and check_complete(real) == expected("A")
    stage_and_commit(link, "B", exchange)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert check_complete(real) == expected("B") and tree(link) == tree(real)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk", "link"]
    assert sorted(p.name for p in (tmp_path / "disk").iterdir()) == ["exports"]  # no staging or old set left


# --- The TFLite converter's errors: an op without a builtin kernel is named as such, anything else as itself ----


def _model_with_an_op_tflite_lacks():
    import keras
    import tensorflow as tf

    class Igamma(keras.layers.Layer):  # tf.math.igamma has no TFLite builtin kernel (TF 2.20)
        def call(self, x):
            return tf.math.igamma(x * x + 1.0, x * x + 2.0)

    inputs = keras.Input((32, 32, 3))
    x = keras.layers.GlobalAveragePooling2D()(Igamma()(inputs))
    return keras.Model(inputs, keras.layers.Dense(2)(x))


def test_the_converter_blames_an_op_only_when_an_op_is_to_blame(monkeypatch):
    import tensorflow as tf

    import export

    model = _model_with_an_op_tflite_lacks()
    with pytest.raises(ExportError, match=r"the TensorFlow op\(s\) Igamma have no TFLite builtin kernel") as caught:
        export.convert_tflite(model, "float32")
    assert len(str(caught.value).splitlines()) == 1

    def fails(self):
        raise ValueError("Cannot set tensor: Dimension mismatch. Got 3 but expected 1 for input 0.")

    monkeypatch.setattr(tf.lite.TFLiteConverter, "convert", fails)
    with pytest.raises(ExportError) as caught:
        export.convert_tflite(_plain_model(), "float32")
    message = str(caught.value)
    assert message == (
        "TFLite conversion (float32) failed: ValueError: Cannot set tensor: Dimension mismatch. Got 3 but "
        "expected 1 for input 0."
    )

    def disk_full(self):
        raise OSError(28, "No space left on device", "/tmp/x")

    monkeypatch.setattr(tf.lite.TFLiteConverter, "convert", disk_full)
    with pytest.raises(OSError, match="No space left"):  # left for the CLIs' disk-full message
        export.convert_tflite(_plain_model(), "float32")


def _plain_model():
    import keras

    inputs = keras.Input((32, 32, 3))
    return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(inputs)))
