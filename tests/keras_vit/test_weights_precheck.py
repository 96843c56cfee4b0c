"""A broken local weights file is refused before Keras or TensorFlow is imported (keras_vit/weights/pretrained.py),
with the message the readers give for it after the import; good files pass the check untouched."""

import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import keras_vit
from keras_vit.weights import pretrained
from keras_vit.weights.checkpoint import read_safetensors
from keras_vit.weights.npz import read_npz
from tests.conftest import FIXTURES, ROOT

TIMM = FIXTURES / "interop" / "timm_vit_tiny"

REFUSE = """
import sys
import keras_vit
try:
    keras_vit.from_pretrained(sys.argv[1])
except keras_vit.CheckpointError as err:
    print(err)
print(sorted(m for m in ("keras", "tensorflow", "jax", "torch") if m in sys.modules))
"""


def _timm_folder_claiming(tmp_path, header_bytes):
    """The timm fixture's folder, its model.safetensors replaced by 8 bytes that announce a `header_bytes` header."""
    folder = tmp_path / "broken"
    shutil.copytree(TIMM, folder)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", header_bytes) + b"{}")
    return folder


def _refused_in_a_fresh_process(source):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "tensorflow"}
    result = subprocess.run(
        [sys.executable, "-c", REFUSE, str(source)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    message, imported = result.stdout.strip().splitlines()
    return message, imported


def test_a_header_claiming_a_terabyte_is_refused_before_keras_is_imported(tmp_path):
    folder = _timm_folder_claiming(tmp_path, 10**12)
    message, imported = _refused_in_a_fresh_process(folder)
    assert imported == "[]", f"imported before refusing: {imported}"
    path = folder / "model.safetensors"
    assert message == (
        f"Cannot read {str(path)!r} as safetensors (no safetensors file (its first 8 bytes give a 1000000000000-byte "
        f"header)); the file is truncated or corrupt: download it again or point to the right file."
    )
    with pytest.raises(keras_vit.CheckpointError) as after_import:
        read_safetensors(path)  # the reader's own message, which the early check repeats
    assert str(after_import.value) == message


def test_a_truncated_npz_is_refused_before_keras_is_imported(tmp_path):
    whole = (FIXTURES / "vit_tiny_official.npz").read_bytes()
    path = tmp_path / "cut.npz"
    path.write_bytes(whole[: len(whole) // 2])
    message, imported = _refused_in_a_fresh_process(path)
    assert imported == "[]", f"imported before refusing: {imported}"
    with pytest.raises(keras_vit.CheckpointError) as after_import:
        read_npz(path)
    assert message == str(after_import.value)
    assert message.startswith(f"Cannot read {str(path)!r} as an .npz checkpoint (BadZipFile: ")


def test_tensors_that_end_before_the_file_does_are_refused_early(tmp_path):
    folder = tmp_path / "padded"
    shutil.copytree(TIMM, folder)
    with open(folder / "model.safetensors", "ab") as f:
        f.write(b"\0" * 16)  # 16 bytes no tensor accounts for
    with pytest.raises(keras_vit.CheckpointError, match="whose tensors end at byte .* of "):
        pretrained.check_local(folder)


@pytest.mark.parametrize("name", ["timm_vit_tiny", "hf_vit_for_image_classification", "keras_hub_vit_image_classifier"])
def test_good_sources_pass_untouched(name, tmp_path):
    pretrained.check_local(FIXTURES / "interop" / name)
    pretrained.check_local(FIXTURES / "vit_tiny_official.npz")
    np.save(tmp_path / "one.npy", np.zeros(3))
    os.replace(tmp_path / "one.npy", tmp_path / "one.npz")  # read_npz words this one itself
    pretrained.check_local(tmp_path / "one.npz")
    for not_local in ("vit_tiny_patch16_224.augreg_in21k_ft_in1k", "hf://timm/x", "https://x/y.npz", "missing/"):
        pretrained.check_local(not_local)
    for source in (FIXTURES / "interop" / name, "vit_tiny_patch16_224.augreg_in21k_ft_in1k", "hf://timm/x"):
        pretrained.check_source(source)  # names and URLs are left to the readers; nothing is downloaded


def test_a_missing_path_and_a_folder_no_reader_takes_are_refused_with_the_readers_words(tmp_path):
    from keras_vit.weights.model_io import read_checkpoint

    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("no weights here")
    for source in (tmp_path / "missing", tmp_path / "empty", tmp_path / "notes"):
        with pytest.raises((FileNotFoundError, keras_vit.CheckpointError)) as early:
            pretrained.check_source(source)
        with pytest.raises(type(early.value)) as late:
            read_checkpoint(str(source))
        assert str(early.value) == str(late.value)
