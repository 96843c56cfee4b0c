"""requirements.txt and requirements-tpu.txt: one TensorFlow version, the TPU file differing only where it must."""

import re
import subprocess

from tests.conftest import ROOT


def _requirements(name):
    lines = (ROOT / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_tpu_requirements_differ_only_in_the_tensorflow_build_and_libtpu():
    cpu, tpu = _requirements("requirements.txt"), _requirements("requirements-tpu.txt")
    only_cpu = [line for line in cpu if line not in tpu]
    only_tpu = [line for line in tpu if line not in cpu]
    (tensorflow,) = only_cpu
    version = re.fullmatch(r"tensorflow==(\d+\.\d+\.\d+)", tensorflow).group(1)
    assert sorted(only_tpu) == sorted([f"tensorflow-tpu[gcs-filesystem]=={version}", "libtpu==0.0.31"])
    # Same order otherwise, so a reader can diff the files line by line.
    assert [line for line in cpu if line in tpu] == [line for line in tpu if line in cpu]


def test_tpu_install_check_script_is_valid_bash():
    script = ROOT / ".ci" / "tpu_install_check"
    assert script.stat().st_mode & 0o111, "not executable"
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "requirements-tpu.txt" in script.read_text()


def _pyproject():
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_pyproject_declares_what_requirements_txt_installs():
    project = _pyproject()
    extras = project["optional-dependencies"]
    declared = project["dependencies"] + extras["jax"] + extras["test"]
    assert len(declared) == len(set(declared)), "a requirement declared twice"
    assert sorted(declared) == sorted(_requirements("requirements.txt"))
    # The test tools and JAX are extras, not what `pip install keras-vit` pulls in.
    assert not {r.split(">")[0].split("=")[0] for r in project["dependencies"]} & {"pytest", "jax", "nbclient"}


def test_benchmarks_extra_is_benchmarks_requirements_txt():
    assert sorted(_pyproject()["optional-dependencies"]["benchmarks"]) == sorted(
        _requirements("benchmarks/requirements.txt")
    )
