"""tests/conftest.py's machine lock: a timed test runs alone even when the suite runs in parallel workers."""

import threading
import time

from tests.conftest import exclusive, shared


def _holder(context, started, release):
    def run():
        with context:
            started.set()
            release.wait(10)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_an_exclusive_holder_waits_for_running_tests_and_holds_off_new_ones(tmp_path):
    # flock locks belong to open files, so threads with files of their own stand for the workers' processes.
    paths = tmp_path / "machine.lock", tmp_path / "machine.gate"
    events = {name: (threading.Event(), threading.Event()) for name in ("running", "timed", "next")}
    running = _holder(shared(*paths), *events["running"])
    assert events["running"][0].wait(5)
    timed = _holder(exclusive(*paths), *events["timed"])
    time.sleep(0.3)
    assert not events["timed"][0].is_set(), "the timed test started beside a running one"
    following = _holder(shared(*paths), *events["next"])
    time.sleep(0.3)
    assert not events["next"][0].is_set(), "a new test started while the timed one waited"
    events["running"][1].set()  # the running test ends: the timed one starts, the next still waits
    assert events["timed"][0].wait(5)
    time.sleep(0.3)
    assert not events["next"][0].is_set(), "a new test started beside the timed one"
    events["timed"][1].set()
    assert events["next"][0].wait(5)
    events["next"][1].set()
    for thread in (running, timed, following):
        thread.join(5)


def test_shared_holders_run_side_by_side(tmp_path):
    paths = tmp_path / "machine.lock", tmp_path / "machine.gate"
    first, second = (threading.Event(), threading.Event()), (threading.Event(), threading.Event())
    threads = [_holder(shared(*paths), *first), _holder(shared(*paths), *second)]
    assert first[0].wait(5) and second[0].wait(5)
    first[1].set()
    second[1].set()
    for thread in threads:
        thread.join(5)
