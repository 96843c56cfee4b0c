"""A checkpoint folder's config.json is decided before Keras loads: not an object, an impossible head count,
width, depth or patch, or tensors the safetensors header says are not there, each one line naming the file and the
field; every shipped fixture folder passes."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from keras_vit.weights import config_precheck
from keras_vit.weights.errors import CheckpointError
from tests import support

INTEROP = support.FIXTURES / "interop"
FOLDERS = sorted(
    str(path.parent)
    for family in ("interop", "interop_families", "interop_families2")
    for path in (support.FIXTURES / family).glob("*/config.json")
)


def _folder(tmp_path, fixture, edit=None, text=None):
    folder = tmp_path / fixture
    shutil.copytree(INTEROP / fixture, folder)
    config = folder / "config.json"
    if text is not None:
        config.write_text(text)
    if edit is not None:
        data = json.loads(config.read_text())
        edit(data)
        config.write_text(json.dumps(data))
    return str(folder)


@pytest.mark.parametrize("folder", FOLDERS, ids=os.path.basename)
def test_every_fixture_folder_passes(folder):
    config_precheck.check_folder(folder)


@pytest.mark.parametrize(("text", "kind"), [("[1, 2, 3]", "list"), ("null", "null"), ('"hello"', "string")])
def test_a_config_that_is_no_object(tmp_path, text, kind):
    folder = _folder(tmp_path, "timm_vit_tiny", text=text)
    with pytest.raises(CheckpointError, match=f"config.json' holds a JSON {kind}"):
        config_precheck.check_folder(folder)


def test_an_empty_config_is_named_not_the_stray_npz_beside_it(tmp_path):
    folder = _folder(tmp_path, "timm_vit_tiny", text="{}")  # io.npz (inputs and outputs) lies beside it
    with pytest.raises(CheckpointError, match="config.json' is no checkpoint config") as err:
        config_precheck.check_folder(folder)
    assert "io.npz" not in str(err.value)


@pytest.mark.parametrize(("heads", "expected"), [(0, "a positive integer"), (-3, "a positive integer"), (5, "4 or 6")])
def test_impossible_head_counts(tmp_path, heads, expected):
    timm = _folder(tmp_path, "timm_vit_tiny", edit=lambda c: c["model_args"].update(num_heads=heads))
    with pytest.raises(CheckpointError, match=f"model_args.num_heads={heads} is impossible; expected .*{expected}"):
        config_precheck.check_folder(timm)
    hf = _folder(tmp_path, "hf_vit_for_image_classification", edit=lambda c: c.update(num_attention_heads=heads))
    with pytest.raises(CheckpointError, match=f"num_attention_heads={heads} is impossible"):
        config_precheck.check_folder(hf)


@pytest.mark.parametrize(
    ("field", "value", "holds"),
    [("hidden_size", 768, "width 48"), ("num_hidden_layers", 12, "depth 2"), ("patch_size", 16, "patch 8")],
)
def test_a_transformers_config_whose_tensors_are_another_model(tmp_path, field, value, holds):
    folder = _folder(tmp_path, "hf_vit_for_image_classification", edit=lambda c: c.update({field: value}))
    with pytest.raises(CheckpointError, match=f"{field}={value} does not describe .* holds {holds}"):
        config_precheck.check_folder(folder)


def test_a_timm_config_whose_tensors_are_another_model(tmp_path):
    folder = _folder(tmp_path, "timm_vit_tiny", edit=lambda c: c["model_args"].update(depth=12))
    with pytest.raises(CheckpointError, match="model_args.depth=12 does not describe .* depth 2"):
        config_precheck.check_folder(folder)


def test_a_keras_hub_config_with_an_impossible_width(tmp_path):
    folder = _folder(tmp_path, "keras_hub_vit_image_classifier", edit=lambda c: c["config"].update(hidden_dim="x"))
    with pytest.raises(CheckpointError, match='config.hidden_dim="x" is impossible'):
        config_precheck.check_folder(folder)


def _cli(*args):
    code = "import sys\nfrom training.__main__ import main\nrc = main(sys.argv[1:])\n" + (
        "print('IMPORTED', 'keras' in sys.modules or 'tensorflow' in sys.modules)\nsys.exit(rc)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=support.ROOT, timeout=300
    )


def test_init_refuses_a_bad_config_before_the_framework_loads(tmp_path):
    folder = _folder(tmp_path, "timm_vit_tiny", edit=lambda c: c["model_args"].update(num_heads=5))
    result = _cli("--init", folder, "--workdir", str(tmp_path / "run"))
    assert result.returncode == 2, result.stderr
    assert "IMPORTED False" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "num_heads=5" in lines[0] and "Traceback" not in result.stderr, result.stderr


def test_from_pretrained_refuses_a_truncated_keras_file_before_the_framework_loads(tmp_path):
    path = tmp_path / "model.keras"
    path.write_bytes(b"PK\x03\x04" + b"\0" * 100)  # a zip archive's first bytes, cut short
    code = (
        "import sys, keras_vit\ntry:\n    keras_vit.from_pretrained(sys.argv[1])\nexcept Exception as err:\n"
        "    print(type(err).__name__, err)\nprint('IMPORTED', 'keras' in sys.modules or 'tensorflow' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=support.ROOT, timeout=300
    )
    assert "CheckpointError" in result.stdout and "truncated or corrupt" in result.stdout, result.stdout
    assert "IMPORTED False" in result.stdout
