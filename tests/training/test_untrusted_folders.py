"""Untrusted image folders on the path users take: `python -m training` / `training.train` on a folder holding a
FIFO, an 8 GiB (sparse) file and a link to /dev/zero, and files replaced between the scan and the training reads.

Every trainer here runs in a child process under a deadline and an address-space limit (RLIMIT_AS), so a read
that blocks or never ends fails the test instead of hanging the suite or filling the machine's memory; the
child's peak resident memory is measured as well.
"""

import contextlib
import json
import os
import resource
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from PIL import Image

from tests import support

ROOT = support.ROOT
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo (POSIX)")
pytestmark = [needs_fifo, pytest.mark.slow]  # each test starts TensorFlow trainers (20-60 s apiece)

HUGE = 8 * 2**30  # the sparse file's size: reading it whole needs 8 GiB
# The children's address space: TensorFlow's own reservations fit (a tiny run peaks near 3.5 GiB of virtual memory
# on the 2-core machine), the 8 GiB file read whole or an endless read of /dev/zero do not.
ADDRESS_SPACE = 8 * 2**30
DEADLINE = 300  # seconds for one child: a tiny run takes 20-60 s on the shared 2-core machine
PEAK_RSS = 3 * 2**30  # a tiny run holds about 1 GiB resident
TRAIN = [
    "--epochs", "1", "--batch-size", "4", "--strategy", "default",
    "--set", "image_size=16", "--set", "augment=inception", "--set", "follow_symlinks=True",
    "--set", "eval_every=0", "--set", "num_samples=2", "--set", "num_calibration=2", "--set", "jit_compile=False",
]  # fmt: skip


def _images(root, size=12, seed=0):
    """2 classes x 4 images, PNGs and JPEGs (the crop's Pillow path and its JPEG-window path)."""
    rng = np.random.default_rng(seed)
    paths = []
    for c in range(2):
        (root / f"c{c}").mkdir(parents=True, exist_ok=True)
        for i in range(4):
            path = root / f"c{c}" / f"{i}.{'jpg' if i % 2 else 'png'}"
            Image.fromarray(rng.integers(0, 256, (size, size, 3), np.uint8)).save(path)
            paths.append(path)
    return paths


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A folder of 8 images plus a FIFO, an 8 GiB sparse file and a /dev/zero link, all named like images."""
    root = tmp_path_factory.mktemp("hostile") / "data"
    _images(root)
    os.mkfifo(root / "c0" / "fifo.png")
    with open(root / "c1" / "huge.png", "wb") as f:
        f.truncate(HUGE)  # sparse: 8 GiB by its size, nothing on disk
    os.symlink("/dev/zero", root / "c1" / "zero.png")  # outside the folder: listed under follow_symlinks=True
    return root


def _run_bounded(argv, timeout, fifos=()):
    """(return code, output, peak RSS in bytes) of `python ARGV` under RLIMIT_AS and a deadline.

    At the deadline a writer opens and closes each of `fifos` (a reader blocked on one is released) and the child
    is killed; the test then fails, naming the output so far.
    """

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    # Few malloc arenas: glibc reserves 64 MiB of address space per arena, up to 8 per core.
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", MALLOC_ARENA_MAX="2")
    child = subprocess.Popen(
        [sys.executable, *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=limit, start_new_session=True,  # noqa: PLW1509  (the limit must be set in the child)
    )  # fmt: skip
    expired = threading.Event()

    def expire():
        expired.set()
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        child.kill()

    timer = threading.Timer(timeout, expire)
    timer.start()
    peak = [0]
    command = "\0".join([sys.executable, *argv])
    sampler = threading.Thread(target=_sample_peak, args=(child.pid, command, peak, expired), daemon=True)
    sampler.start()
    try:
        output = child.stdout.read().decode(errors="replace")
        _, status, _ = os.wait4(child.pid, 0)
    finally:
        timer.cancel()
    child.returncode = os.waitstatus_to_exitcode(status)
    if expired.is_set():
        pytest.fail(f"the trainer did not finish within {timeout} s (a read blocks or never ends):\n{output[-3000:]}")
    return child.returncode, output, peak[0]


def _sample_peak(pid, command, peak, stop, every=0.1):
    """Keeps peak[0] at the child's VmHWM (bytes): the resident high-water mark of the address space its exec made.

    Not ru_maxrss: a child forked from this process (preexec_fn) counts the test worker's own resident pages from
    the fork on (4 GiB in a worker that had run other tests, against 0.9 GiB for the trainer). The mark only
    rises, so the last reading misses at most the process's last `every` seconds. Readings count only once the
    child runs `command` (before its exec, /proc shows the forked copy of this process and its pages).
    """
    while not stop.is_set():
        try:
            with open(f"/proc/{pid}/cmdline") as cmdline:
                if not cmdline.read().startswith(command):
                    stop.wait(0.01)
                    continue
            with open(f"/proc/{pid}/status") as status:
                hwm = next((line for line in status if line.startswith("VmHWM:")), None)
        except OSError:
            return  # gone (reaped)
        if hwm is not None:
            peak[0] = max(peak[0], int(hwm.split()[1]) * 1024)  # kB
        stop.wait(every)


def _unreadable_lines(root):
    return [
        f"  {root / 'c0' / 'fifo.png'}: a FIFO (named pipe), not a regular file",
        f"  {root / 'c1' / 'huge.png'}: {HUGE} bytes, over the 67108864-byte limit per image",
        f"  {root / 'c1' / 'zero.png'}: a character device, not a regular file",
    ]


def test_the_trainer_skips_a_fifo_a_huge_file_and_a_device_without_opening_them(hostile, tmp_path):
    workdir = tmp_path / "run"
    argv = ["-m", "training", "--workdir", str(workdir), "--dataset", f"folder:{hostile}", *TRAIN]
    fifos = [hostile / "c0" / "fifo.png"]
    code, output, peak = _run_bounded([*argv, "--set", "skip_unreadable_images=True"], DEADLINE, fifos)
    print(f"peak RSS of the skipping run: {peak / 2**20:.0f} MiB")
    assert code == 0, output[-3000:]
    lines = output.splitlines()
    warning = lines.index(f"UserWarning: Skipping 3 unreadable image(s) of 11 in {str(hostile)!r} "
                          f"(skip_unreadable_images=True):")  # fmt: skip
    assert lines[warning + 1 : warning + 4] == _unreadable_lines(hostile)
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["num_train"] + metrics["num_heldout"] == 8 and metrics["steps"] == 1
    # The run's identity is the 8 files the scan kept.
    identity = json.loads((workdir / "run.json").read_text())["fingerprint"]["dataset"]
    assert identity.startswith("folder: 8 files, ")
    assert 0 < peak < PEAK_RSS  # 0: the sampler never saw the trainer run

    # Without the option: the run stops before the first step, naming the three files and the option.
    workdir = tmp_path / "refused"
    argv[argv.index(str(tmp_path / "run"))] = str(workdir)
    code, output, peak = _run_bounded(argv, DEADLINE, fifos)
    assert code == 2, output[-3000:]
    lines = output.strip().splitlines()
    assert lines[-4] == (
        f"[training] error: 3 unreadable image(s) in {str(hostile)!r}; remove or replace them and run again, or "
        f"skip them with --set skip_unreadable_images=True:"
    ), output[-3000:]
    assert lines[-3:] == _unreadable_lines(hostile) and "Traceback" not in output
    assert not (workdir / "checkpoints").exists() and 0 < peak < PEAK_RSS


# The training reads themselves: every file is replaced after the scan (in `on_train_begin`, before the first batch
# is read), by a bigger image or by a FIFO; each run must end with one line naming the file, not train or block.
REPLACED = textwrap.dedent("""
    import json, os, sys
    import keras, numpy as np
    from PIL import Image
    import training
    from keras_vit.files import describe_storage_error

    root, workdir, mode, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    class Replace(keras.callbacks.Callback):
        batches = 0  # training batches that ended: the error must come from the first one's reads

        def on_train_batch_end(self, batch, logs=None):
            Replace.batches += 1

        def on_train_begin(self, logs=None):
            for folder, _, names in os.walk(root):
                for name in names:
                    path = os.path.join(folder, name)
                    os.remove(path)
                    if mode == "fifo":
                        os.mkfifo(path)
                    else:  # a valid image, over the limit
                        noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8)
                        Image.fromarray(noise).save(path, format="PNG" if name.endswith(".png") else "JPEG")
                        assert os.path.getsize(path) > limit

    config = training.TrainConfig(dataset="folder:" + root, epochs=1, batch_size=4, image_size=16,
                                  augment="inception", max_image_bytes=limit, eval_every=0, num_samples=2,
                                  num_calibration=2, jit_compile=False, strategy="default", variant="testing")
    try:
        training.train(config, workdir, verbose=0, callbacks=[Replace()])
        print("RESULT" + json.dumps({"batches": Replace.batches}), flush=True)
    except Exception as err:
        print("RESULT" + json.dumps({"batches": Replace.batches, "line": describe_storage_error(err)}), flush=True)
    # Known and open (issue 30's closing note): after this error the process can hang in its teardown (3 of 4
    # runs on 2026-12-02, the result already printed), apparently tf.data's reader threads waiting on the
    # interpreter. What this test checks is the read; the teardown is left out of it, not hidden: see the note.
    os._exit(0)
""")


@pytest.mark.parametrize("mode", ["bigger", "fifo"])
def test_a_file_replaced_after_the_scan_fails_the_training_read_in_one_line(tmp_path, mode):
    root = tmp_path / "data"
    paths = _images(root)
    limit = max(os.path.getsize(p) for p in paths)  # every original passes the scan
    code, output, _ = _run_bounded(
        ["-c", REPLACED, str(root), str(tmp_path / "run"), mode, str(limit)],
        DEADLINE,
        [] if mode == "bigger" else paths,
    )
    assert code == 0 and "RESULT" in output, output[-3000:]
    result = json.loads(output.split("RESULT", 1)[1].splitlines()[0])
    # The first training batch fails (not the held-out evaluation after it, whose reader was capped already).
    assert result["batches"] == 0, f"the trainer trained on files the scan never checked: {result}"
    line = result.get("line")
    assert line is not None and "\n" not in line, result
    assert line.startswith("ImageReadError: ") and str(root) in line, line
    if mode == "bigger":  # --set max_image_bytes reaches the crop's reads
        assert f"over the {limit}-byte limit per image" in line and "max_image_bytes=N" in line, line
    else:
        assert "is a FIFO (named pipe), not a regular file; it is not opened" in line, line
