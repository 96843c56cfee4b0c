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


def _name(requirement):
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]


def test_pyproject_declares_what_requirements_txt_installs():
    project = _pyproject()
    extras = project["optional-dependencies"]
    parts = [project["dependencies"], *(extras[e] for e in ("train", "export", "jax", "test"))]
    for part in parts:
        assert len(part) == len(set(part)), f"a requirement declared twice in {part}"
    # tensorflow is in both [train] and [export]; requirements.txt states each line once.
    assert sorted({r for part in parts for r in part}) == sorted(_requirements("requirements.txt"))
    # `pip install keras-vit` is the model library: no TensorFlow, exporter, JAX or test tool comes with it.
    base = {_name(r) for r in project["dependencies"]}
    assert not base & {"tensorflow", "tensorflow-datasets", "mediapipe", "openvino", "onnx", "jax", "pytest", "scipy"}
    assert extras["all"] == ["keras-vit[train,export,jax]"]


def test_benchmarks_extra_is_benchmarks_requirements_txt():
    assert sorted(_pyproject()["optional-dependencies"]["benchmarks"]) == sorted(
        _requirements("benchmarks/requirements.txt")
    )
