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
