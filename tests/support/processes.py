"""Command lines for the tests: `call_cli` in this process (where the process is not what a test checks), and for the
tests whose subject is a process, `run_cli` and `start_cli`, their environment, free loopback ports, waiting for
several processes at once."""

import os
import socket
import subprocess
import sys

import pytest

from tests import support

# Variables of one run that a child must not inherit from the test session (a cluster, a device count).
_NOT_INHERITED = ("KERAS_DISTRIBUTION_", "TF_CONFIG", "XLA_FLAGS", "KERAS_VIT_KILL_AT_WRITE")


def env(backend=None, devices=None, **extra):
    """The session's environment for a child: the checkout importable, TensorFlow's C++ logs quiet, no cluster or
    device count inherited; `backend` sets KERAS_BACKEND, `devices` the host device count."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    out.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(support.ROOT))
    if backend:
        out["KERAS_BACKEND"] = backend
    if devices:
        out["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return {**out, **extra}


def call_cli(main, *args, capfd):
    """A command line's `main(ARGS)` called in this process: its exit code and what it wrote, Python's and the native
    libraries' (`capfd`), as a CompletedProcess."""
    capfd.readouterr()
    code = main([str(arg) for arg in args])
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def run_cli(*args, env=None, timeout=300, check=True):
    """`python ARGS` (e.g. "-m", "training", ...) run to its end in the checkout; with `check`, a non-zero exit
    fails the test with the output's end."""
    result = subprocess.run([sys.executable, *map(str, args)], cwd=support.ROOT, env=env or globals()["env"](),
                            capture_output=True, text=True, timeout=timeout)  # fmt: skip
    if check:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def start_cli(*args, env=None):
    """`python ARGS` started in the checkout, its stderr merged into its stdout; returns the Popen."""
    return subprocess.Popen([sys.executable, *map(str, args)], cwd=support.ROOT, env=env or globals()["env"](),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def free_ports(count):
    """`count` loopback ports free at the time of asking."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def wait_all(processes, timeout):
    """Each process's return code and output; all are killed and the test fails when one outlives `timeout`."""
    outputs = []
    for process in processes:
        try:
            outputs.append(process.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            pytest.fail("a worker did not stop: " + "\n\n".join(p.communicate()[0][-2000:] for p in processes))
    return [p.returncode for p in processes], outputs
