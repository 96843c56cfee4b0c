"""keras_vit.files: the path layer (local paths and tf.io.gfile URLs) and the atomic writes every package uses."""

import os
import stat
import subprocess
import sys
import uuid

import numpy as np
import pytest

from keras_vit import files
from keras_vit.files import atomic_write, atomic_write_bytes, atomic_write_text
from tests.conftest import ROOT


def test_writes_with_an_ordinary_files_mode(tmp_path):
    mask = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "sub" / "labels.txt", "a\nb\n")
    finally:
        os.umask(mask)
    assert (tmp_path / "sub" / "labels.txt").read_text() == "a\nb\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # not mkstemp's private 0o600


def test_a_failed_write_keeps_the_previous_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "model.tflite"
    atomic_write_bytes(path, b"old")

    def crash(f):
        f.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, crash)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["model.tflite"]


# ------------------------------------------------------------------------------------- URLs (tf.io.gfile)
# ram:// is TensorFlow's in-memory filesystem: a gfile URL like gs://, without a network.


def _url(name):
    return f"ram://{uuid.uuid4().hex}/{name}"  # the filesystem is process-wide: one fresh root per test


def test_url_paths_are_never_made_local():
    assert files.is_remote("gs://b/run") and files.is_remote("ram://x") and files.is_remote("s3://b/k")
    assert not files.is_remote("runs/digits") and not files.is_remote("/tmp/x") and not files.is_remote("C:\\runs")
    assert files.absolute("gs://b/run") == "gs://b/run"  # os.path.abspath would give ./gs:/b/run
    assert files.absolute("runs/x") == os.path.join(os.getcwd(), "runs", "x")
    assert files.join("gs://b/run", "samples", "heldout.npz") == "gs://b/run/samples/heldout.npz"
    assert files.join("gs://b/run/", "x") == "gs://b/run/x"
    assert files.dirname("gs://b/run/model.keras") == "gs://b/run" and files.dirname("ram://x") == "ram://"
    assert files.basename("gs://b/run/export/") == "export"
    assert files.relpath("gs://b/run/plots/a.png", "gs://b/run") == "plots/a.png"
    with pytest.raises(ValueError, match="not inside"):
        files.relpath("gs://b/other/a.png", "gs://b/run")


def test_url_file_operations_round_trip():
    root = _url("run")
    files.atomic_write_text(files.join(root, "sub", "labels.txt"), "a\nb\n")
    files.atomic_write(files.join(root, "x.npz"), lambda f: np.savez(f, images=np.arange(6).reshape(2, 3)))
    assert files.isdir(root) and files.isdir(files.join(root, "sub")) and not files.isfile(root)
    assert files.isfile(files.join(root, "x.npz")) and not files.exists(files.join(root, "y.npz"))
    assert files.listdir(root) == ["sub", "x.npz"]
    assert files.glob(files.join(root, "*.npz")) == [files.join(root, "x.npz")]
    assert files.walk(root) == [files.join(root, "x.npz"), files.join(root, "sub", "labels.txt")]  # as os.walk
    assert files.read_text(files.join(root, "sub", "labels.txt")) == "a\nb\n" and files.size(root + "/x.npz") > 0
    with files.load_numpy(files.join(root, "x.npz")) as archive:  # np.load seeks: read into memory first
        np.testing.assert_array_equal(archive["images"], np.arange(6).reshape(2, 3))
    files.remove(files.join(root, "x.npz"))
    assert files.listdir(root) == ["sub"]


def test_url_overwrite_replaces_the_whole_content():
    path = _url("metrics.json")
    files.atomic_write_text(path, "0123456789")
    files.atomic_write_text(path, "abc")
    assert files.read_text(path) == "abc"


def test_tensorflow_ram_filesystem_still_appends_on_write_mode():
    # Why atomic_write removes an existing ram:// file first. When this fails, TensorFlow's RamFileSystem
    # replaces on "wb" like every other filesystem: drop the ram:// branch in keras_vit.files.atomic_write.
    import tensorflow as tf

    path = _url("a.txt")
    for data in (b"0123456789", b"abc"):
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(data)
    assert files.read_bytes(path) == b"0123456789abc"


def test_a_url_gets_its_content_in_one_object_write(monkeypatch):
    # On object stores only a single write is atomic: pieces written by `write` must reach gfile as one write.
    import tensorflow as tf

    writes = []

    class CountingGFile(tf.io.gfile.GFile):
        def write(self, data):
            writes.append(bytes(data))
            return super().write(data)

    monkeypatch.setattr(tf.io.gfile, "GFile", CountingGFile)
    path = _url("ckpt-00000004.npz")

    def in_pieces(f):
        for piece in (b"header", b"-body", b"-end"):
            f.write(piece)

    atomic_write(path, in_pieces)
    assert writes == [b"header-body-end"]


def test_a_failed_url_write_keeps_the_previous_object_and_leaves_nothing_else():
    path = _url("model.tflite")
    atomic_write_bytes(path, b"old")

    def crash(f):
        f.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, crash)
    assert files.read_bytes(path) == b"old" and files.listdir(files.dirname(path)) == ["model.tflite"]


def test_the_path_layer_needs_tensorflow_only_for_urls(tmp_path):
    # keras_vit runs on other Keras backends without TensorFlow installed: local paths must not import it.
    code = (
        "import sys\n"
        "from keras_vit import files\n"
        f"p = files.atomic_write_text(files.join({str(tmp_path)!r}, 'a', 'b.txt'), 'x')\n"
        "assert files.read_text(p) == 'x' and files.listdir(files.dirname(p)) == ['b.txt']\n"
        "assert files.absolute('gs://b/run') == 'gs://b/run' and files.is_remote('gs://b')\n"
        "print('tensorflow' in sys.modules)\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120, cwd=str(ROOT)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"


# --- Temporaries of killed writers are swept at the next start; those of running writers are not -------------


def _killed_during(path, write):
    """Runs `write()` in a forked child that SIGKILLs itself during its first atomic write (the data written,
    not yet renamed); returns the child's termination signal."""
    pid = os.fork()
    if pid == 0:
        try:
            files._KILL_AT_WRITE = "1"  # read at import, so set directly in the child
            files._writes[0] = 0
            write()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else None


@pytest.mark.skipif(not hasattr(os, "fork") or files.fcntl is None, reason="needs fork and flock (POSIX)")
def test_the_temporaries_of_killed_writers_are_swept_and_those_of_running_ones_kept(tmp_path, monkeypatch):
    def save(path):  # stands in for model.save: a writer that takes a path
        with open(path, "wb") as f:
            f.write(b"k" * 4096)

    assert _killed_during(tmp_path, lambda: files.atomic_save(tmp_path / "model.keras", save, ".keras")) == 9
    assert _killed_during(tmp_path, lambda: atomic_write_text(tmp_path / "plots" / "log.csv", "epoch\n")) == 9
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert len(left) == 2 and left[0].startswith(".model.keras.") and left[0].endswith(".tmp.keras"), left
    assert left[1].startswith("plots/.log.csv.") and left[1].endswith(".tmp"), left
    (tmp_path / ".tmp-abcd1234.keras").write_bytes(b"k")  # what training's save_model left before atomic_save
    (tmp_path / "notes.tmp").write_text("a user's file")  # not a temporary of this module's naming
    monkeypatch.setattr(os, "getpid", lambda: 2)  # nothing depends on PIDs
    swept = []

    def write_while_sweeping(f):  # a writer still running when another process starts and sweeps
        f.write(b"live")
        swept.extend(files.sweep_temporaries(tmp_path))
        (mine,) = list(tmp_path.glob(".config.json.*.tmp"))
        assert mine.exists()

    atomic_write(tmp_path / "config.json", write_while_sweeping)
    assert sorted(os.path.relpath(p, tmp_path) for p in swept) == sorted([".tmp-abcd1234.keras", *left])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "config.json",
        "notes.tmp",
    ]
    assert (tmp_path / "config.json").read_bytes() == b"live"


def test_atomic_save_gives_the_mode_of_an_ordinary_file_and_reaches_urls(tmp_path):
    def save(path):
        assert path.endswith(".keras")  # model.save insists on the suffix
        with open(path, "wb") as f:
            f.write(b"zip")

    mask = os.umask(0o027)
    try:
        files.atomic_save(tmp_path / "model.keras", save, ".keras")
        atomic_write_text(tmp_path / "labels.txt", "a\n")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(os.stat(tmp_path / "model.keras").st_mode) == 0o640  # what open() gives under umask 027
    assert stat.S_IMODE(os.stat(tmp_path / "labels.txt").st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["labels.txt", "model.keras"]
    url = _url("model.keras")
    files.atomic_save(url, save, ".keras")
    assert files.read_bytes(url) == b"zip"


def test_the_trainers_model_keras_gets_the_mode_of_every_other_output(tmp_path):
    import keras

    import keras_vit
    from training.outputs import save_model, write_labels

    model = keras_vit.create_model("testing", image_size=32, num_classes=2)
    mask = os.umask(0o022)
    try:
        save_model(model, tmp_path / "model.keras")
        write_labels(tmp_path / "labels.txt", ["a", "b"])
    finally:
        os.umask(mask)
    assert stat.S_IMODE(os.stat(tmp_path / "model.keras").st_mode) == 0o644  # was mkstemp's 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "labels.txt").st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["labels.txt", "model.keras"]
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(loaded.get_weights()[0], model.get_weights()[0])
