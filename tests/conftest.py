import contextlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from tests.support import main_job

# The loopback weights hosts (`server`, `env`) of the download and fine-tuning tests.
pytest_plugins = ["tests.support.hosts"]

try:
    import fcntl
except ImportError:  # not POSIX: the workers may each run the main job (digits_main_job below)
    fcntl = None

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = pathlib.Path(__file__).parent / "fixtures"

# One test session per Keras backend, as keras runs its own suite. README's `python -m pytest` is the TensorFlow
# session; the tests marked `jax` run in a JAX session (KERAS_BACKEND=jax, JAX_DEVICES host devices, the tests
# in-process), which the TensorFlow session starts when its own tests are done, with the same arguments
# (`pytest_sessionfinish` below): one command still runs every test, and fails when either session fails.
# `KERAS_BACKEND=jax python -m pytest ...` runs the JAX session alone. What needs a fresh process (a start-up, a
# signal, a limit, several processes: marked `process`) still starts one from either session; a command line whose
# process is not what a test checks is called in-process (tests/support/processes.py: `call_cli`, else `run_cli`).
SESSION_BACKEND = "jax" if os.environ.get("KERAS_BACKEND") == "jax" else "tensorflow"
JAX_DEVICES = 2
JAX_FILES_VARIABLE = "KERAS_VIT_JAX_TEST_FILES"  # set by the TensorFlow session: the only files the JAX one imports
if SESSION_BACKEND == "jax" and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # Before JAX is first imported: the host device count is fixed then.
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={JAX_DEVICES}"


# Parallel runs (pytest-xdist; pyproject.toml's addopts say `-n auto --dist loadfile`). Each test file goes to one
# worker whole, so its module fixtures run once; README's main job runs once for all workers (`digits_main_job`).
# No test here times the main job: CI (.ci/run) runs it alone before the tests and checks its time
# (.ci/check_main_job.py); the tests only check its outputs.


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per usable core, at most one per 8 GiB of memory (the heaviest test files, the
    benchmark's and the notebook's, hold several GiB)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return max(1, min(cores, int(memory_gib // 8)))


def pytest_configure(config):
    """One JAX compilation cache for the session: the tests' JAX processes (a run, its killed twin and its resume;
    the two processes of a multi-process run) compile the same tiny programs, and XLA compiling them again is
    most of their time. A cached program is the one XLA compiled, so what the tests compare is unchanged. Set in
    the main process, before it starts the parallel workers, which inherit it; a cache the user set is kept."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    config.jax_cache_dir = tempfile.mkdtemp(prefix="keras-vit-tests-jax-cache-")
    os.environ.update(JAX_COMPILATION_CACHE_DIR=config.jax_cache_dir, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                      JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")  # fmt: skip


def pytest_ignore_collect(collection_path, config):
    """The JAX session imports only the test files the TensorFlow session found tests marked `jax` in."""
    files = os.environ.get(JAX_FILES_VARIABLE)
    if SESSION_BACKEND == "jax" and files and collection_path.suffix == ".py" and collection_path.is_file():
        return str(collection_path) not in files.split(os.pathsep) or None
    return None


@pytest.hookimpl(trylast=True)  # after -m and -k have chosen
def pytest_collection_modifyitems(config, items):
    """This session's backend's tests: those marked `jax` in the JAX session, the others in the TensorFlow one."""
    ours = [item for item in items if (item.get_closest_marker("jax") is not None) == (SESSION_BACKEND == "jax")]
    others = [item for item in items if item not in ours]
    if others:
        config.hook.pytest_deselected(items=others)
        items[:] = ours
    if SESSION_BACKEND == "tensorflow":
        config.jax_files = sorted({str(item.path) for item in others})
        if hasattr(config, "workeroutput"):  # a parallel worker: the main process starts the JAX session
            config.workeroutput["jax_files"] = config.jax_files


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_testnodedown(node, error):
    """The main process of a parallel run learns from its workers which files hold the JAX session's tests."""
    node.config.jax_files = sorted({*getattr(node.config, "jax_files", []), *node.workeroutput.get("jax_files", [])})


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after the TensorFlow session's summary
def pytest_sessionfinish(session, exitstatus):
    """The TensorFlow session starts the JAX session with the same arguments when it selected tests marked `jax`;
    the command's exit status is the first failure's."""
    result = yield
    config = session.config
    if SESSION_BACKEND != "tensorflow" or hasattr(config, "workerinput") or not getattr(config, "jax_files", None):
        return result
    if session.exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        return result  # interrupted or a usage error: nothing more to run
    title = f" the JAX session: KERAS_BACKEND=jax, {JAX_DEVICES} host devices, the tests marked jax "
    print(f"\n{title:=^120}", flush=True)
    args, cwd = config.invocation_params.args, config.invocation_params.dir
    env = {**os.environ, "KERAS_BACKEND": "jax", JAX_FILES_VARIABLE: os.pathsep.join(config.jax_files)}
    code = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env)
    passed = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    if session.exitstatus in passed and code.returncode not in passed:
        session.exitstatus = code.returncode
    elif session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and code.returncode == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.OK  # every selected test was the JAX session's
    return result


@pytest.fixture(autouse=True)
def _no_distribution_left():
    """In the JAX session, a test that set a keras.distribution (a DataParallel run) leaves none to the next."""
    yield
    if SESSION_BACKEND == "jax":
        import keras

        keras.distribution.set_distribution(None)


def pytest_unconfigure(config):
    if getattr(config, "jax_cache_dir", None):
        shutil.rmtree(config.jax_cache_dir, ignore_errors=True)


def _shared_dir(tmp_path_factory):
    """The session's temporary directory that every parallel worker sees (each worker's own is inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def first_of_the_workers(path, timeout):
    """Holds `path`'s flock, so that one parallel worker at a time runs the block; fails the test with a message
    after `timeout` seconds of waiting (the holder is stuck) instead of hanging until CI's limit."""
    with open(path, "a") as f:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"waited {timeout} s for another test worker to finish README's main job ({path})")
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def fixtures_dir():
    return FIXTURES


@pytest.fixture(autouse=True)
def _seed():
    import keras

    keras.utils.set_random_seed(0)


@pytest.fixture(scope="session")
def digits_main_job(tmp_path_factory):
    """README's main job (train digits, evaluate, export, verify), exactly as written, in a fresh directory; the
    training, export and inspection tests all check this one run. Under CI it is .ci/check_main_job.py's run
    (KERAS_VIT_MAIN_JOB names its folder); elsewhere the first parallel worker to ask runs it once, untimed, and
    the others read its record."""
    if os.environ.get(main_job.FOLDER_VARIABLE):
        cwd = pathlib.Path(os.environ[main_job.FOLDER_VARIABLE])
        runs = main_job.read_record(cwd)
    else:
        folder = _shared_dir(tmp_path_factory)
        cwd = folder / "main_job"
        waiting = first_of_the_workers if fcntl else lambda path, timeout: contextlib.nullcontext()
        with waiting(folder / "main_job.lock", timeout=1800):
            if (cwd / main_job.RECORD).exists():
                runs = main_job.read_record(cwd)
            else:
                cwd.mkdir()
                # `python` in README's commands is the interpreter running the tests (the venv's, activated or not).
                path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
                runs = main_job.run(cwd, {**os.environ, "PYTHONPATH": str(ROOT), "PATH": path})
                main_job.write_record(cwd, runs)
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
