"""The processes of a multi-process JAX run (TPU pod slices, several GPU hosts): joining within a time-out, agreeing,
one writer (docs/multihost.md)."""

import contextlib
import os
import socket
import time

import numpy as np

ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
NUM_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"


class JoinError(RuntimeError):
    """The processes of a multi-process run could not find each other."""


class Disagreement(ValueError):
    """The processes of a run see different checkpoints or weights. A ValueError: the CLI reports it in one line."""


def requested():
    """The (coordinator address, number of processes, process id) Keras' variables ask for, or None when unset."""
    addresses = os.environ.get(ADDRESSES)
    count, index = os.environ.get(NUM_PROCESSES), os.environ.get(PROCESS_ID)
    if not (addresses or count or index):
        return None
    given = ((ADDRESSES, addresses), (NUM_PROCESSES, count), (PROCESS_ID, index))
    missing = [name for name, value in given if not value]
    if missing:
        raise JoinError(
            f"A multi-process run needs all three of {ADDRESSES}, {NUM_PROCESSES} and {PROCESS_ID}; "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} unset. Set them on every process "
            f"(the same address and count everywhere, ids 0 to N-1), or unset all three for a one-process run."
        )
    try:
        count, index = int(count), int(index)
    except ValueError:
        raise JoinError(
            f"{NUM_PROCESSES}={count!r} and {PROCESS_ID}={index!r} must be whole numbers, e.g. 2 and 0."
        ) from None
    addresses = [a.strip() for a in addresses.split(",") if a.strip()]
    if len(addresses) > 1 and len(addresses) != count:
        raise JoinError(
            f"{ADDRESSES} lists {len(addresses)} addresses but {NUM_PROCESSES}={count}: list one address per "
            f"process (the coordinator first), or the coordinator's alone."
        )
    if count < 1 or not 0 <= index < count:
        raise JoinError(f"{PROCESS_ID}={index} with {NUM_PROCESSES}={count}: ids run from 0 to {count - 1}.")
    return addresses[0], count, index


def join(strategy, timeout):
    """Joins the run's other processes when the environment or `--strategy multi_worker` asks; idempotent.

    Args:
        strategy: the run's `--strategy`; "multi_worker" without Keras' variables lets JAX detect the cluster
            (Cloud TPU pod slices, SLURM).
        timeout: seconds to wait for every process to connect.

    Raises:
        JoinError: bad settings, or the peers did not all connect within `timeout`.
    """
    import jax

    settings = requested()
    if settings is None and strategy != "multi_worker":
        return
    if _initialized():
        return
    if settings is not None and settings[1] == 1:
        return  # a "cluster" of one process: nothing to join
    arguments = {} if settings is None else dict(zip(("coordinator_address", "num_processes", "process_id"), settings))
    if settings is not None:
        _rendezvous(*settings, timeout)
    try:
        jax.distributed.initialize(**arguments, initialization_timeout=int(timeout))
    except Exception as err:  # noqa: BLE001  (JAX raises XlaRuntimeError, RuntimeError or ValueError, by cause)
        text = " ".join(str(err).split())[:400]
        if settings is None:
            raise JoinError(
                f"--strategy multi_worker on JAX: JAX found no cluster to join ({type(err).__name__}: {text}). "
                f"Set {ADDRESSES}, {NUM_PROCESSES} and {PROCESS_ID} on every process, or run on a TPU pod slice."
            ) from None
        address, count, index = settings
        raise JoinError(
            f"Process {index} of {count} met the others at {address} but JAX could not start its distributed "
            f"runtime ({type(err).__name__}: {text}). Check that the port stays free for JAX after the meeting."
        ) from None


HELLO = b"keras-vit join"


def _rendezvous(address, count, index, timeout):
    """Meets every process on `address` once, or raises JoinError naming who is missing, within `timeout` s.

    Process 0 listens on the coordinator's port, takes one connection per other process (each says its id and the
    run's process count), answers every one "go" when all are there and closes the port, which JAX's coordination
    service then binds. A process that cannot reach process 0, or whose go never comes, fails the same way.
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise JoinError(f"{ADDRESSES}={address!r} must be HOST:PORT (process 0's address), e.g. 10.0.0.2:1234.")
    deadline = time.monotonic() + timeout
    fix = (
        f"Start all {count} processes with the same {ADDRESSES} (process 0 serves it), check that the port is "
        f"reachable from every host, or raise --set join_timeout=SECONDS."
    )
    if index == 0:
        _serve_rendezvous(int(port), count, deadline, timeout, address, fix)
    else:
        _join_rendezvous(host, int(port), count, index, deadline, timeout, address, fix)


def _serve_rendezvous(port, count, deadline, timeout, address, fix):
    peers = {}
    try:
        with socket.create_server(("", port), reuse_port=False) as server:
            while len(peers) < count - 1:
                server.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    missing = sorted(set(range(1, count)) - set(peers))
                    raise JoinError(
                        f"Process 0 of {count} waited {timeout} s at {address} and process(es) "
                        f"{', '.join(map(str, missing))} never joined. {fix}"
                    ) from None
                peer = _read_hello(connection, count)
                if peer is None:  # not one of ours (a port scanner, a stale process): ignore it
                    connection.close()
                    continue
                peers.setdefault(peer, connection)
            for connection in peers.values():
                connection.sendall(b"go\n")
    except OSError as err:
        raise JoinError(f"Process 0 of {count} cannot listen on {address} ({err}). {fix}") from None
    finally:
        for connection in peers.values():
            connection.close()


def _read_hello(connection, count):
    connection.settimeout(5)
    try:
        words = connection.recv(64).split()
    except OSError:
        return None
    if len(words) != 4 or b" ".join(words[:2]) != HELLO or not words[2].isdigit() or words[3] != str(count).encode():
        return None
    return int(words[2])


def _join_rendezvous(host, port, count, index, deadline, timeout, address, fix):
    while True:
        try:
            connection = socket.create_connection((host, port), timeout=max(0.01, deadline - time.monotonic()))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise JoinError(
                    f"Process {index} of {count} could not reach process 0 at {address} within {timeout} s. {fix}"
                ) from None
            time.sleep(0.2)
    with connection:
        try:
            connection.sendall(HELLO + f" {index} {count}\n".encode())
            connection.settimeout(max(0.01, deadline - time.monotonic()))
            answer = connection.recv(8)
        except OSError:
            answer = b""
    if answer.strip() != b"go":
        raise JoinError(
            f"Process {index} of {count} reached process 0 at {address}, but not every process joined within "
            f"{timeout} s. {fix}"
        )


def _initialized():
    from jax._src import distributed  # no public "is initialised" query in JAX 0.10

    return distributed.global_state.client is not None


def allgather(values):
    """Every process's `values` (a small list of numbers), stacked: shape (processes, len(values)).

    A collective: every process must call it at the same point of the program.
    """
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(np.asarray(values)))


def spans_processes(value):
    """Whether `value` is a global JAX array split over several processes' devices (`--strategy fsdp` on a
    multi-process run), so that no process holds all of it. Any other value (TensorFlow's, one process's, or whole on
    every device) is False."""
    return not getattr(value, "is_fully_addressable", True) and not value.is_fully_replicated


def gather(value):
    """The whole of a `spans_processes` array as one numpy array on this host.

    A collective: every process must gather the same arrays in the same order.
    """
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


def agree_flags(local_flags):
    """The sum over processes of each 0/1 flag, so that every process stops at the same step."""
    return [int(v) for v in allgather(np.asarray(local_flags, np.int32)).sum(axis=0)]


def check_same(what, value, fix):
    """Raises when the processes disagree on a number (a checkpoint step, a weight checksum); a collective.

    Args:
        what: the quantity's name, for the message.
        value: this process's value (a float or int).
        fix: what the user should do, for the message.
    """
    values = allgather([float(value)])[:, 0]
    if not np.all(values == values[0]):
        listing = ", ".join(f"process {i}: {v:g}" for i, v in enumerate(values))
        raise Disagreement(f"The processes of this run disagree on {what} ({listing}). {fix}")


@contextlib.contextmanager
def refuse_different_values(what, fix):
    """Turns JAX's own check that every process passes the same value into a global array (`jax.device_put`
    raises an AssertionError that prints the arrays whole, under a traceback) into one `Disagreement` line.

    Args:
        what: the quantity's name, for the message ("the model's starting weights").
        fix: what the user should do, for the message.
    """
    try:
        yield
    except AssertionError as err:
        if "is not the same on each process" not in str(err):
            raise
        raise Disagreement(
            f"The processes of this run disagree on {what} (jax.device_put found a value that differs between the "
            f"processes). {fix}"
        ) from None


@contextlib.contextmanager
def alone():
    """Work one process does by itself (the chief's outputs): Keras' distribution off for the duration.

    Under a multi-process distribution every new variable and every computation spans all processes, so a model
    built or run by one process alone would wait for the others for ever. Inside, models are built on this
    process's devices; the run's own (distributed) model can still be read and saved.
    """
    import keras

    current = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(current)
