"""Several `python -m training` processes of one JAX run on loopback, started the way Keras documents it
(KERAS_DISTRIBUTION_* variables), each with its own host device count."""

from tests.support import processes, runs

# 4 steps per epoch, 3 epochs, batch 16, no dropout; checkpoints mid-epoch (every 3 steps) for the kill tests.
# plots=true again (TINY_RUN turns them off): process 0 alone draws them.
RUN = [*runs.TINY_RUN, "--epochs", "3", "--set", "steps_per_epoch=4", "--set", "checkpoint_every=3", "--set",
       "plots=true"]  # fmt: skip


def cluster_env(devices, num_processes, index, port, **extra):
    """Process `index` of `num_processes` under JAX with `devices` host devices, joining at 127.0.0.1:`port`."""
    joined = {
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": f"127.0.0.1:{port}",
        "KERAS_DISTRIBUTION_NUM_PROCESSES": str(num_processes),
        "KERAS_DISTRIBUTION_PROCESS_ID": str(index),
    }
    return processes.env("jax", devices, **(joined if num_processes > 1 else {}), **extra)


def start(workdir, num_processes, devices, *extra, program=("-m", "training"), per_process=None):
    """`num_processes` trainers of one run, each with `devices` host devices; returns their Popen objects.

    `workdir`: one path for all, or a list with one per process. `program`: what `python` runs (the command line,
    or a script that takes its arguments). `per_process`: {index: [more arguments of that process only]}.
    """
    port = processes.free_ports(1)[0]
    workdirs = workdir if isinstance(workdir, list) else [workdir] * num_processes
    return [
        processes.start_cli(*program, "--workdir", workdirs[index], *RUN, *extra,
                            *(per_process or {}).get(index, []), env=cluster_env(devices, num_processes, index, port))
        for index in range(num_processes)
    ]  # fmt: skip


def run(workdir, num_processes, devices, *extra):
    """`start`, then each process's output once all have exited 0 (the test fails otherwise)."""
    codes, outputs = processes.wait_all(start(workdir, num_processes, devices, *extra), timeout=400)
    assert codes == [0] * num_processes, "\n\n".join(o[-3000:] for o in outputs)
    return outputs
