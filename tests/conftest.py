import os
import pathlib
import re
import subprocess
import sys
import time
from types import SimpleNamespace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir():
    return FIXTURES


@pytest.fixture(autouse=True)
def _seed():
    import keras

    keras.utils.set_random_seed(0)


def main_job_commands():
    """README's main job: the quick-start line after its install step, split into its commands."""
    readme = (ROOT / "README.md").read_text()
    line = next(line for line in readme.splitlines() if "pip install -r requirements.txt &&" in line)
    job = line.split("pip install -r requirements.txt &&", 1)[1].strip()
    return [command.strip() for command in job.split("&&")]


@pytest.fixture(scope="session")
def digits_main_job(tmp_path_factory):
    """Runs README's main job (train digits, evaluate, export, verify) once per test session, exactly as written,
    in a fresh directory; the training, export and inspection tests all check this one run."""
    cwd = tmp_path_factory.mktemp("main_job")
    # Log level 0 keeps XLA's "Compiled cluster" line, the proof that the jit-compiled train step ran.
    # `python` in README's commands is the interpreter running the tests (the venv's, activated or not).
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONPATH": str(ROOT), "PATH": path}
    runs = []
    for command in main_job_commands():
        started = time.time()
        result = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        runs.append(SimpleNamespace(command=command, result=result, seconds=time.time() - started))
        assert result.returncode == 0, f"{command!r} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    train = next(run for run in runs if re.search(r"-m training\b", run.command))
    workdir = cwd / re.search(r"-m export (\S+)", runs[-1].command).group(1)
    return SimpleNamespace(cwd=cwd, workdir=workdir, runs=runs, train=train, export=runs[-1])
