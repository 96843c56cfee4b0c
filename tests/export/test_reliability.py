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
from tests.support.export_sets import check_complete, expected, stage_and_commit, tree

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


# --- TensorFlow's file errors as one line, exit 2: unknown schemes, unreachable gs://, inputs gone mid-run -----

GS_DOWN = (
    "Error executing an HTTP request: libcurl code 6 meaning 'Couldn't resolve host name', error details: Could "
    "not resolve host: storage.googleapis.com when reading metadata of {}"
)


@pytest.fixture
def offline(monkeypatch):
    """tf.io.gfile as it behaves for gs:// without a network: every call on a gs:// path raises
    FailedPreconditionError with TensorFlow's own message (local paths and ram:// work as usual)."""
    import tensorflow as tf

    def refusing(real):
        def call(path, *args, **kwargs):
            if os.fspath(path).startswith("gs://"):
                raise tf.errors.FailedPreconditionError(None, None, GS_DOWN.format(os.fspath(path)))
            return real(path, *args, **kwargs)

        return call

    for name in ("exists", "isdir", "glob", "listdir", "makedirs", "stat", "walk", "remove", "GFile"):
        monkeypatch.setattr(tf.io.gfile, name, refusing(getattr(tf.io.gfile, name)))


def _one_line_error(capsys, *names):
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing on stderr"
    last = err[-1]
    assert "Traceback" not in "\n".join(err) and last.startswith(("error:", "[training] error:")), err
    for name in names:
        assert name in last, (name, last)
    return last


def test_s3_is_not_registered_in_this_tensorflow():
    import tensorflow as tf

    assert "s3" not in tf.io.gfile.get_registered_schemes()  # TF 2.20 without tensorflow-io


def test_an_unknown_scheme_is_named_instead_of_reported_missing():
    from keras_vit import files
    from training.data import list_image_folder

    with pytest.raises(files.StorageError, match=r"TensorFlow has no file system for s3:// URLs \(s3://b/data;"):
        list_image_folder("s3://b/data")  # was: "Image folder 's3://b/data' does not exist"
    with pytest.raises(files.StorageError, match="gs://"):  # the message lists what does work
        files.isdir("s3://b/data")


def test_an_s3_workdir_is_one_line(capsys):
    from training.__main__ import main

    assert main(["--workdir", "s3://bucket/run", "--epochs", "1"]) == 2
    line = _one_line_error(capsys, "s3://bucket/run", "no file system for s3://", "Use a local path or a gs:// URL")
    assert len(line) < 400


@pytest.fixture
def closed_gcs(tmp_path, monkeypatch):
    """--init's gs:// downloads (HTTPS, not tf.io.gfile) sent to a loopback port that refuses connections (bound,
    never listening, so no other process can take it meanwhile), with the cache in tmp_path: the test never
    reaches storage.googleapis.com or the home cache, even on a machine with a network."""
    import socket

    from keras_vit.weights import catalogue

    with socket.socket() as refusing:
        refusing.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{refusing.getsockname()[1]}"
        monkeypatch.setenv(catalogue.GCS_ENDPOINT_ENV, endpoint)
        monkeypatch.setenv("KERAS_VIT_CACHE", str(tmp_path / "cache"))
        yield endpoint, tmp_path / "cache"


def test_gs_without_network_is_one_line_in_every_command(offline, closed_gcs, capsys, tmp_path):
    from export.__main__ import main as export_cli
    from keras_vit.inspect.__main__ import main as inspect_cli
    from training.__main__ import main as training_cli

    endpoint, cache = closed_gcs
    unreachable = ("could not be reached", "FailedPreconditionError", "Check the network")
    for argv, cli, names in (
        (["--workdir", "gs://bucket/run", "--epochs", "1"], training_cli, unreachable),
        (["evaluate", "--workdir", "gs://bucket/run"], training_cli, unreachable),
        # --init fetches gs:// objects over HTTPS (keras_vit.weights.sources), with its own one-line message.
        (["--workdir", str(tmp_path / "run"), "--epochs", "1", "--init", "gs://bucket/init.npz"], training_cli,
         ("Cannot download init.npz", f"from {endpoint}/bucket/init.npz (", f"place it by hand at {cache}")),
        (["gs://bucket/model.keras", "--out", str(tmp_path / "out")], export_cli, unreachable),
        (["predict", "gs://bucket/model_float32.tflite", "gs://bucket/cat.png"], export_cli, unreachable),
        (["gs://bucket/model.keras", "--out", str(tmp_path / "plots")], inspect_cli, unreachable),
    ):  # fmt: skip
        assert cli(argv) == 2, argv
        _one_line_error(capsys, "gs://bucket/", *names)
    assert not (tmp_path / "out").exists() and not (tmp_path / "plots").exists()
    assert not (tmp_path / "run" / "checkpoints").exists()  # --init is read before any step is trained
    cached = [os.path.join(d, f) for d, _, names in os.walk(cache) for f in names]
    assert [f for f in cached if not f.endswith(".lock")] == [], cached  # no partial download left in the cache


def test_an_input_file_gone_during_the_run_is_named(tmp_path):
    import numpy as np
    import tensorflow as tf
    from PIL import Image

    from keras_vit.files import describe_storage_error
    from training.data.decoders import path_decoder, path_window_decoder

    path = tmp_path / "c0" / "1.png"
    path.parent.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    decoded = tf.data.Dataset.from_tensor_slices([str(path)]).map(path_decoder("white"))
    window = path_window_decoder("white", [])  # the Inception crop's reader

    def whole(shape):
        return tf.zeros([3], tf.int32), shape

    raw = tf.data.Dataset.from_tensor_slices([str(path)]).map(lambda p: window(p, whole))
    path.unlink()  # deleted after the folder was listed
    for dataset in (decoded, raw):
        with pytest.raises(tf.errors.OpError) as caught:
            list(dataset)
        line = describe_storage_error(caught.value)
        assert line is not None and "\n" not in line, caught.value
        assert line.startswith("an input file could not be read during the run") and str(path) in line, line
    assert describe_storage_error(ValueError("x")) is None  # not TensorFlow's: left to the caller


def test_inspect_with_an_unwritable_out_is_one_line(tmp_path, capsys, monkeypatch):
    import errno

    import keras_vit
    from keras_vit.inspect import plots
    from keras_vit.inspect.__main__ import main as inspect_cli

    keras_vit.create_model("testing", image_size=32, num_classes=2).save(tmp_path / "m.keras")
    (tmp_path / "file").write_text("x")
    assert inspect_cli([str(tmp_path / "m.keras"), "--out", str(tmp_path / "file" / "plots")]) == 2
    _one_line_error(capsys, "a path component is a file, not a directory", str(tmp_path / "file"))

    def read_only(path, write):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    # The tests run as root, where a chmod does not stop writes: the figures' writer fails as on a read-only mount.
    monkeypatch.setattr(plots, "atomic_write", read_only)
    assert inspect_cli([str(tmp_path / "m.keras"), "--out", str(tmp_path / "plots")]) == 2
    _one_line_error(capsys, "the file system is read-only", str(tmp_path / "plots"), "Pass a writable --out")
