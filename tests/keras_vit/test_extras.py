"""Entry points without an extra's packages: one line naming the extra (keras_vit/_extras.py), no traceback.

TensorFlow (or another module) is hidden from a subprocess by a finder that refuses it, as a base install
(`pip install keras-vit`, no extras) would; tests/test_base_install.py runs the library in such an install.
"""

import os
import re
import subprocess
import sys
import tomllib

import pytest

from keras_vit import _extras
from tests.conftest import ROOT

# Runs a module as `python -m` would, with the named top-level modules not importable.
HIDDEN = """
import importlib.abc, runpy, sys
hidden = set(sys.argv[1].split(","))
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
if sys.argv[2] == "-c":
    exec(sys.argv[3])
else:
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def _without(hidden, *args, backend="tensorflow"):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": backend}
    return subprocess.run(
        [sys.executable, "-c", HIDDEN, ",".join(hidden), *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def _extras_table():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return {e: {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0] for r in extras[e]} for e in ("train", "export", "jax")}


def test_the_table_names_every_package_of_the_extras_and_its_extra():
    extras = _extras_table()
    assert {d for d, _ in _extras.MODULES.values()} == set().union(*extras.values())
    for distribution, extra in _extras.MODULES.values():
        holders = {e for e, names in extras.items() if distribution in names}
        # None: in both the trainer's and the exporter's extra; the command decides which it names.
        assert holders == ({extra} if extra else {"train", "export"}), distribution


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["training", "--dataset", "synthetic", "--workdir", "unused"], "python -m training needs tensorflow"),
        (["keras_vit.cli", "train", "--workdir", "unused"], "keras-vit train needs tensorflow"),
        (["keras_vit.cli", "evaluate", "--workdir", "unused"], "keras-vit evaluate needs tensorflow"),
        (["export", "model.keras"], "python -m export needs tensorflow"),
        (["keras_vit.cli", "predict", "model.tflite", "a.png"], "keras-vit predict needs tensorflow"),
    ],
)
def test_trainer_and_exporter_name_their_extra_when_tensorflow_is_missing(command, expected):
    result = _without(["tensorflow"], *command)
    assert result.returncode == 2, result.stderr[-3000:]
    extra = "train" if "train" in expected or "evaluate" in expected else "export"
    assert result.stderr.strip().splitlines() == [
        f"error: {expected}, which is not installed: pip install 'keras-vit[{extra}]' "
        f"(in a checkout: pip install -r requirements.txt)"
    ]


def test_a_library_command_says_to_choose_another_keras_backend(tmp_path):
    result = _without(["tensorflow"], "keras_vit.inspect", "testing", "--out", str(tmp_path))
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: python -m keras_vit.inspect runs on Keras, whose backend is 'tensorflow'")
    assert line.endswith(
        "set KERAS_BACKEND=jax (pip install 'keras-vit[jax]'), or install TensorFlow (pip install 'keras-vit[train]')"
    )


def test_the_library_raises_the_same_advice():
    code = "import keras_vit\ntry:\n    keras_vit.create_model('testing')\nexcept ModuleNotFoundError as e:\n"
    code += "    print(type(e).__name__, e.name, e)"
    result = _without(["tensorflow"], "-c", code)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = "ModuleNotFoundError tensorflow keras_vit.create_model runs on Keras"
    assert result.stdout.startswith(expected), result.stdout


def test_a_module_no_extra_installs_is_left_to_the_traceback():
    err = ModuleNotFoundError("No module named 'yaml'", name="yaml")
    assert _extras.missing_line(err, "keras-vit train", "train") is None
    status = _without(["numpy"], "keras_vit.cli", "train", "--workdir", "unused")
    assert status.returncode == 1 and "Traceback" in status.stderr and "numpy" in status.stderr


@pytest.mark.slow
def test_another_package_of_the_extra_is_named_too(tmp_path):
    # TensorFlow present, scikit-learn (the digits data set's loader) not: found once the run reads its data.
    result = _without(["sklearn"], "training", "--workdir", str(tmp_path / "run"), "--epochs", "1")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: python -m training needs scikit-learn, which is not installed: pip install 'keras-vit[train]' "
        "(in a checkout: pip install -r requirements.txt)"
    )


def test_a_url_without_tensorflow_is_one_line_naming_the_fix(tmp_path):
    code = "from keras_vit import files\ntry:\n    files.exists('gs://bucket/run')\nexcept OSError as err:\n"
    code += "    print(type(err).__name__, err)"
    result = _without(["tensorflow"], "-c", code, backend="jax")
    assert result.stdout.strip() == (
        "StorageError gs://bucket/run is read and written through TensorFlow's tf.io.gfile, and TensorFlow is not "
        "installed: pip install 'keras-vit[train]', or use a local path."
    ), result.stderr[-3000:]
