"""The package as pip installs it: a wheel (and `pip install .`) into a fresh venv, used from another directory.

The venvs see this test's own environment's packages (a .pth file), so nothing is downloaded; keras_vit, training
and export come from the installed package only (the repository is not on their path).
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

# Not part of the package's source: what a checkout may also hold.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", "runs", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ci-venv", ".ci-tpu-venv", "shared"
)
TINY_RUN = [
    "--dataset", "synthetic", "--epochs", "1", "--batch-size", "8", "--strategy", "default",
    "--set", "steps_per_epoch=2", "--set", "image_size=16", "--set", "eval_every=0",
    "--set", "num_samples=8", "--set", "num_calibration=8",
]  # fmt: skip


def _run(command, cwd, env, timeout=600):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _source_copy(tmp_path):
    """The checkout copied, so that building leaves no build/ or .egg-info in the repository."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    return source


def _venv(path):
    """A fresh venv that also sees this environment's packages (TensorFlow, Keras, ...), but not the repository."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (path / site / "outer-environment.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    return python


def _build_options():
    """Build with this environment's setuptools when it can make wheels (>= 70.1 or the `wheel` package): nothing
    is downloaded. A bare venv's setuptools 65 cannot, and then pip builds in isolation (setuptools from the index).
    """
    import importlib.metadata
    import importlib.util

    version = tuple(int(p) for p in importlib.metadata.version("setuptools").split(".")[:2])
    if version >= (70, 1) or importlib.util.find_spec("wheel") is not None:
        return ["--no-build-isolation"], {"PIP_NO_INDEX": "1"}
    return [], {"PIP_NO_INDEX": "0"}


def _clean_env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL")}
    env["PIP_NO_INDEX"] = "1"  # --no-deps installs need nothing from an index
    return env


def _where(python, cwd, env):
    code = "import keras_vit, training, export; print(keras_vit.__file__, training.__file__, export.__file__)"
    return _run([str(python), "-c", code], cwd, env).stdout.split()


def test_wheel_installs_and_trains_and_exports_from_another_directory(tmp_path):
    source = _source_copy(tmp_path)
    env = _clean_env()
    wheels = tmp_path / "wheels"
    build_options, build_env = _build_options()
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *build_options, "-w", str(wheels), "."],
        source,
        {**env, **build_env},
    )
    (wheel,) = wheels.glob("keras_vit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "training/backend_advice.json" in names
    data_files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "keras_vit" / "data").glob("*") if p.is_file())
    assert set(data_files) <= names, f"data files left out of the wheel: {set(data_files) - names}"
    assert "training/configs/digits.py" in names
    assert not any(n.startswith("tests/") for n in names)

    python = _venv(tmp_path / "venv")
    _run([str(python), "-m", "pip", "install", "--no-deps", str(wheel)], tmp_path, env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for path in _where(python, elsewhere, env):
        assert str(tmp_path / "venv") in path, f"imported from {path}, not the installed package"

    workdir = elsewhere / "run"
    train = _run([str(python), "-m", "training", "--workdir", str(workdir), *TINY_RUN], elsewhere, env)
    assert (workdir / "model.keras").is_file(), train.stdout[-2000:]
    exported = _run(
        [str(python), "-m", "export", str(workdir), "--quantize", "float32", "--latency-runs", "1"], elsewhere, env
    )
    assert "status: PASSED" in exported.stdout, exported.stdout[-3000:]
    assert (workdir / "export" / "model_float32.tflite").is_file()


def test_pip_install_dot_gives_the_same_package(tmp_path):
    source = _source_copy(tmp_path)
    env = _clean_env()
    python = _venv(tmp_path / "venv")
    build_options, build_env = _build_options()
    _run([str(python), "-m", "pip", "install", "--no-deps", *build_options, "."], source, {**env, **build_env})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    keras_vit_file, _, _ = _where(python, elsewhere, env)
    installed = os.path.dirname(os.path.dirname(keras_vit_file))
    assert os.path.isfile(os.path.join(installed, "training", "backend_advice.json"))
    helped = _run([str(python), "-m", "training", "--help"], elsewhere, env)
    assert "digits" in helped.stdout
