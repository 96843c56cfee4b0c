"""The package as pip installs it: a wheel (and `pip install .`) into a fresh venv, used from another directory.

The venvs see this test's own environment's packages (a .pth file), so nothing is downloaded; keras_vit (with
keras_vit.training and keras_vit.export) comes from the installed package only (the repository is not on their path).
"""

import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from tests.conftest import ROOT
from tests.support import builds

pytestmark = [pytest.mark.slow, pytest.mark.process]  # wheel builds and installs into fresh venvs

TINY_RUN = [
    "--dataset", "synthetic", "--epochs", "1", "--batch-size", "8", "--strategy", "default",
    "--set", "steps_per_epoch=2", "--set", "image_size=16", "--set", "eval_every=0",
    "--set", "num_samples=8", "--set", "num_calibration=8",
]  # fmt: skip


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


def _where(python, cwd, env, names=("keras_vit", "keras_vit.training", "keras_vit.export")):
    code = f"import importlib; print(*(importlib.import_module(n).__file__ for n in {list(names)!r}))"
    return builds.run([str(python), "-c", code], cwd, env).stdout.split()


def _package_folders():
    """Every package folder the wheel must hold, under its installed name."""
    mapped = {"keras_vit": "keras_vit", "training": "keras_vit.training", "export": "keras_vit.export"}
    found = set()
    for top, name in mapped.items():
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *parts)))
    return found


# The user's own modules named like the checkout's packages: importing either is a failure of the test.
_USER_TRAINING = 'raise SystemExit("the user\'s own training.py was imported")\n'
_USER_EXPORT = 'raise SystemExit("the user\'s own export/ package was imported")\n'


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel, built once for the module from a copy of the checkout."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = builds.source_copy(tmp_path)
    wheels = tmp_path / "wheels"
    build_options, build_env = builds.build_options()
    builds.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *build_options, "-w", str(wheels), "."],
        source,
        {**builds.clean_env(), **build_env},
    )
    (built,) = wheels.glob("keras_vit-*.whl")
    return built


def test_the_wheel_installs_one_import_name(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"keras_vit"}, f"top-level names in the wheel: {sorted(top_level)}"
    packages = {os.path.dirname(n).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert packages == _package_folders(), "pyproject.toml's [tool.setuptools] packages and the folders differ"
    assert "keras_vit/training/backend_advice.json" in names
    assert "keras_vit/training/configs/digits.py" in names
    data_files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "keras_vit" / "data").glob("*") if p.is_file())
    assert set(data_files) <= names, f"data files left out of the wheel: {set(data_files) - names}"
    assert not any(n.startswith(("tests/", "benchmarks/", "keras_vit/benchmarks/")) for n in names)
    (dist_info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "keras-vit = keras_vit.cli:main" in entry_points


def test_installed_commands_train_export_and_predict_beside_the_users_own_modules(wheel, tmp_path):
    env = builds.clean_env()
    python = _venv(tmp_path / "venv")
    builds.run([str(python), "-m", "pip", "install", "--no-deps", str(wheel)], tmp_path, env)
    keras_vit_command = str(tmp_path / "venv" / "bin" / "keras-vit")
    project = tmp_path / "my_project"  # a user's project with its own training.py and export/ package
    (project / "export").mkdir(parents=True)
    (project / "training.py").write_text(_USER_TRAINING)
    (project / "export" / "__init__.py").write_text(_USER_EXPORT)
    for path in _where(python, project, env):
        assert str(tmp_path / "venv") in path, f"imported from {path}, not the installed package"

    workdir = project / "run"
    train = builds.run([keras_vit_command, "train", "--workdir", str(workdir), *TINY_RUN], project, env)
    assert (workdir / "model.keras").is_file(), train.stdout[-2000:]
    exported = builds.run(
        [keras_vit_command, "export", str(workdir), "--quantize", "float32", "--latency-runs", "1"], project, env
    )
    assert "status: PASSED" in exported.stdout, exported.stdout[-3000:]
    artifact = workdir / "export" / "model_float32.tflite"
    assert artifact.is_file()
    (image,) = sorted((workdir / "samples").glob("*.png"))[:1]
    predicted = builds.run([keras_vit_command, "predict", str(artifact), str(image), "--top-k", "2"], project, env)
    assert image.name in predicted.stdout, predicted.stdout
    # The module forms, from the same folder: `python -m keras_vit.training` is the installed trainer.
    helped = builds.run([str(python), "-m", "keras_vit.training", "--help"], project, env)
    assert "usage: keras-vit train" in helped.stdout and "digits" in helped.stdout
    listed = builds.run([keras_vit_command, "--help"], project, env)
    assert all(command in listed.stdout for command in ("train", "export", "predict", "weights", "inspect"))


def test_pip_install_dot_gives_the_same_package(tmp_path):
    source = builds.source_copy(tmp_path)
    env = builds.clean_env()
    python = _venv(tmp_path / "venv")
    build_options, build_env = builds.build_options()
    builds.run([str(python), "-m", "pip", "install", "--no-deps", *build_options, "."], source, {**env, **build_env})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    keras_vit_file, training_file, _ = _where(python, elsewhere, env)
    assert os.path.isfile(os.path.join(os.path.dirname(training_file), "backend_advice.json"))
    assert os.path.dirname(os.path.dirname(training_file)) == os.path.dirname(keras_vit_file)
    helped = builds.run([str(tmp_path / "venv" / "bin" / "keras-vit"), "weights", "--help"], elsewhere, env)
    assert "list" in helped.stdout
