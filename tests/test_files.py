"""keras_vit.files: the atomic writes every package uses."""

import os
import stat

import pytest

from keras_vit.files import atomic_write, atomic_write_bytes, atomic_write_text


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
