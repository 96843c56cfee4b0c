import contextlib
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from types import SimpleNamespace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

try:
    import fcntl
except ImportError:  # not POSIX: no parallel workers to keep apart (pytest_xdist_auto_num_workers below)
    fcntl = None

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = pathlib.Path(__file__).parent / "fixtures"


# Parallel runs (pytest-xdist; pyproject.toml's addopts say `-n auto --dist loadfile`). Each test file goes to one
# worker whole, so its module fixtures run once; README's main job runs once for all workers (`digits_main_job`).
# What asserts a wall time runs alone: it holds the machine-wide lock exclusively (`alone()`) while every test
# holds it shared, so no other worker's test runs beside it.


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per usable core, at most one per 8 GiB of memory (the heaviest test files, the
    benchmark's and the notebook's, hold several GiB); none (one process) on a platform without fcntl locks."""
    if fcntl is None:
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return max(1, min(cores, int(memory_gib // 8)))


def _shared_dir(tmp_path_factory):
    """The session's temporary directory that every parallel worker sees (each worker's own is inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _lock_paths(tmp_path_factory):
    root = _shared_dir(tmp_path_factory)
    return root / "machine.lock", root / "machine.gate"


@contextlib.contextmanager
def _locked(path, mode):
    if fcntl is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def exclusive(lock, gate):
    """Holds the machine while no other test runs in any worker. The gate stops new tests from starting while this
    waits for the running ones to end (flock alone would let a stream of shared holders starve it)."""
    with _locked(gate, fcntl and fcntl.LOCK_EX), _locked(lock, fcntl and fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def shared(lock, gate):
    """Holds the machine beside other shared holders, once no exclusive holder waits at the gate."""
    with _locked(gate, fcntl and fcntl.LOCK_SH):
        pass
    with _locked(lock, fcntl and fcntl.LOCK_SH):
        yield


def alone(tmp_path_factory):
    return exclusive(*_lock_paths(tmp_path_factory))


@pytest.fixture(autouse=True)
def _share_the_machine(tmp_path_factory):
    with shared(*_lock_paths(tmp_path_factory)):
        yield


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
    in a fresh directory; the training, export and inspection tests all check this one run. The first parallel
    worker to ask runs it, alone on the machine, and records the outcome; the others wait for it and read it."""
    folder = _shared_dir(tmp_path_factory)
    cwd, record = folder / "main_job", folder / "main_job.json"
    with _locked(folder / "main_job.lock", fcntl and fcntl.LOCK_EX):
        if record.exists():
            runs = json.loads(record.read_text())
        else:
            cwd.mkdir()
            with alone(tmp_path_factory):  # test_training_digits holds its wall time to README's "about two minutes"
                runs = _run_main_job(cwd)
            record.write_text(json.dumps(runs))
    runs = [
        SimpleNamespace(
            command=run["command"],
            seconds=run["seconds"],
            result=subprocess.CompletedProcess(run["command"], run["returncode"], run["stdout"], run["stderr"]),
        )
        for run in runs
    ]
    for run in runs:
        result = run.result
        assert result.returncode == 0, f"{run.command!r} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    train = next(run for run in runs if re.search(r"-m training\b", run.command))
    workdir = cwd / re.search(r"-m export (\S+)", runs[-1].command).group(1)
    return SimpleNamespace(cwd=cwd, workdir=workdir, runs=runs, train=train, export=runs[-1])


def _run_main_job(cwd):
    """README's main job in `cwd`, command by command until one fails: command, return code, output, seconds."""
    # Log level 0 keeps XLA's "Compiled cluster" line, the proof that the jit-compiled train step ran.
    # `python` in README's commands is the interpreter running the tests (the venv's, activated or not).
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONPATH": str(ROOT), "PATH": path}
    runs = []
    for command in main_job_commands():
        started = time.time()
        result = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        runs.append({"command": command, "returncode": result.returncode, "stdout": result.stdout,
                     "stderr": result.stderr, "seconds": time.time() - started})  # fmt: skip
        if result.returncode:
            break
    return runs
