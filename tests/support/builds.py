"""Building the checkout's wheel in a copy of it, and running the commands of a fresh install."""

import os
import shutil
import subprocess

from tests import support

# Not part of the package's source: what a checkout may also hold.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", "runs", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ci-venv", ".ci-tpu-venv", "shared"
)


def run(command, cwd, env, timeout=600):
    """`command` run to its end; a non-zero exit fails the test with the command and the output's end."""
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def source_copy(tmp_path):
    """The checkout copied, so that building leaves no build/ or .egg-info in the repository."""
    source = tmp_path / "source"
    shutil.copytree(support.ROOT, source, ignore=_NOT_SOURCE)
    return source


def build_options():
    """Build with this environment's setuptools when it can make wheels (>= 70.1 or the `wheel` package): nothing
    is downloaded. A bare venv's setuptools 65 cannot, and then pip builds in isolation (setuptools from the index).
    """
    import importlib.metadata
    import importlib.util

    version = tuple(int(p) for p in importlib.metadata.version("setuptools").split(".")[:2])
    if version >= (70, 1) or importlib.util.find_spec("wheel") is not None:
        return ["--no-build-isolation"], {"PIP_NO_INDEX": "1"}
    return [], {"PIP_NO_INDEX": "0"}


def clean_env():
    """The session's environment without the checkout on the path; pip offline."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL")}
    env["PIP_NO_INDEX"] = "1"  # --no-deps installs need nothing from an index
    return env
