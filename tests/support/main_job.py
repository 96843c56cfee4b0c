"""README's main job: its commands as README writes them, one run of them, and the record of that run.

Shared by .ci/check_main_job.py (which runs the job alone before the tests, in the user's environment, and checks
its time, accuracy, output and export) and tests/conftest.py (whose `digits_main_job` fixture reads that run's
record, or runs the job once itself where CI did not). Imports the standard library and keras_vit.files only, so
the CI script needs no test tools.
"""

import json
import os
import pathlib
import subprocess
import time

from tests import support

ROOT = support.ROOT
# Set by .ci/run: the folder where .ci/check_main_job.py ran the job (its workdir and RECORD are inside it).
FOLDER_VARIABLE = "KERAS_VIT_MAIN_JOB"
RECORD = "main_job.json"
INSTALL_STEP = "pip install -r requirements.txt &&"


def commands():
    """README's main job: the quick-start line after its install step, split into its commands."""
    readme = (ROOT / "README.md").read_text()
    line = next(line for line in readme.splitlines() if INSTALL_STEP in line)
    job = line.split(INSTALL_STEP, 1)[1].strip()
    return [command.strip() for command in job.split("&&")]


def run(cwd, env):
    """Runs the main job's commands in `cwd` with exactly `env`, one by one until one fails.

    Returns one dict per command run: command, returncode, stdout, stderr, seconds (wall).
    """
    runs = []
    for command in commands():
        started = time.monotonic()
        result = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        runs.append({"command": command, "returncode": result.returncode, "stdout": result.stdout,
                     "stderr": result.stderr, "seconds": time.monotonic() - started})  # fmt: skip
        if result.returncode:
            break
    return runs


def write_record(folder, runs):
    from keras_vit import files

    files.atomic_write_text(os.path.join(folder, RECORD), json.dumps(runs))


def read_record(folder):
    """The runs .ci/check_main_job.py recorded in `folder`; a clear error where there are none."""
    path = pathlib.Path(folder) / RECORD
    if not path.is_file():
        raise FileNotFoundError(
            f"{FOLDER_VARIABLE}={folder} holds no {RECORD}: run `python .ci/check_main_job.py {folder}` first, "
            f"or unset {FOLDER_VARIABLE} to let the tests run the main job themselves."
        )
    return json.loads(path.read_text())
