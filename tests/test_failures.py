"""Untrusted input and nonsense options (issue 21, items 8, 9, 12, 13): each case refused in one line, never a hang.

Reads that could block or never end (a FIFO, /dev/zero) run in a child process with a time and memory limit, so
a regression fails here instead of hanging the suite or filling the machine's memory.
"""

import contextlib
import io
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import keras_vit.images
from export.errors import ExportError
from export.tflite import metadata, metadata_reader
from training import data
from training.options import fields as option_types
from training.options import overrides
from training.options.config import TrainConfig
from training.options.overrides import parse_overrides

REPO = Path(__file__).resolve().parents[1]
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo (POSIX)")


def _png(path, value=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(path)


def _two_classes(root):
    for c in ("c0", "c1"):
        for i in range(3):  # 6 images: a 20% held-out split of 2, one per class
            _png(root / c / f"{i}.png", 40 * i)
    return root


def _run_bounded(code, timeout=30, memory=2**30):
    """Runs Python `code` in a child (repo on its path) with a wall-clock and an address-space limit."""

    def limit():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    # keras_vit's package __init__ imports Keras (seconds, and gigabytes of address space); the image reader
    # needs only its own module and keras_vit.files, so the child registers the package without running it.
    prelude = "import sys, types; sys.modules['keras_vit'] = types.ModuleType('keras_vit'); "
    prelude += f"sys.modules['keras_vit'].__path__ = [{str(REPO / 'keras_vit')!r}]\n"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    try:
        return subprocess.run(
            [sys.executable, "-c", prelude + textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the read did not finish within {timeout} s (it blocks or never ends)")


@contextlib.contextmanager
def _deadline(seconds, fifos=()):
    """Fails the test after `seconds`; a reader blocked on one of `fifos` is released first (a writer opens and
    closes it), so the pool thread it blocks can finish and the suite goes on."""

    def expire(signum, frame):
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------- item 8: untrusted image folders


@needs_fifo
def test_reader_refuses_fifos_devices_and_oversized_files_without_reading_them(tmp_path):
    os.mkfifo(tmp_path / "fifo.png")
    os.symlink("/dev/zero", tmp_path / "zero.png")
    with open(tmp_path / "huge.png", "wb") as f:  # sparse: 8 GiB by its size, nothing on disk
        f.truncate(8 * 2**30)
    paths = [str(tmp_path / n) for n in ("fifo.png", "zero.png", "huge.png")]
    # 1 GiB of address space: reading /dev/zero or the 8 GiB file whole would fail, not fill the machine.
    result = _run_bounded(
        f"""
        import json, keras_vit.images as images
        print(json.dumps([reason for reason, _ in images.scan_images({paths!r}, workers=3)]))
        """,
        timeout=30,
        memory=2**30,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    fifo, zero, huge = json.loads(result.stdout.splitlines()[-1])
    assert fifo == "a FIFO (named pipe), not a regular file"
    assert zero == "a character device, not a regular file"
    assert huge == f"{8 * 2**30} bytes, over the {keras_vit.images.MAX_IMAGE_BYTES}-byte limit per image"
    with pytest.raises(keras_vit.images.ImageReadError, match=r"fifo\.png' is a FIFO .*not opened.*Remove it"):
        keras_vit.images.read_image(paths[0])  # the FIFO has no writer: opening it would block


def test_reader_reads_at_most_the_limit_plus_one_byte(tmp_path):
    # /proc files are regular files whose stat size is 0 whatever they hold: only the bounded read can catch
    # them, as it catches a file that grows between the stat and the read.
    proc = "/proc/self/maps"
    if not os.path.isfile(proc):
        pytest.skip("needs Linux /proc")
    assert os.stat(proc).st_size == 0 and len(Path(proc).read_bytes()) > 100
    with pytest.raises(keras_vit.images.ImageReadError, match="more than 100 bytes, over the 100-byte limit"):
        keras_vit.images.read_file(proc, max_bytes=100)
    _png(tmp_path / "ok.png")
    size = os.path.getsize(tmp_path / "ok.png")
    assert keras_vit.images.read_file(tmp_path / "ok.png", max_bytes=size) == (tmp_path / "ok.png").read_bytes()
    with pytest.raises(keras_vit.images.ImageReadError, match="max_image_bytes"):
        keras_vit.images.read_image(tmp_path / "ok.png", max_bytes=size - 1)


def test_pillow_pixel_limit_still_applies(tmp_path, monkeypatch):
    _png(tmp_path / "a.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 16)  # 8 x 8 = 64 pixels: over twice the limit
    with pytest.raises(keras_vit.images.ImageReadError, match="DecompressionBomb|decompression bomb"):
        keras_vit.images.read_image(tmp_path / "a.png")


@needs_fifo
def test_folder_dataset_with_a_fifo_stops_naming_it_or_skips_it(tmp_path):
    root = _two_classes(tmp_path / "data")
    fifo = root / "c0" / "fifo.png"
    os.mkfifo(fifo)
    with _deadline(30, [fifo]), pytest.raises(ValueError) as err:
        data.load_source(f"folder:{root}")
    assert f"{fifo}: a FIFO (named pipe), not a regular file" in str(err.value)
    assert "skip_unreadable_images=True" in str(err.value)
    with _deadline(30, [fifo]), pytest.warns(UserWarning, match="fifo.png"):
        source = data.load_source(f"folder:{root}", skip_unreadable_images=True)
    assert source.num_train + source.num_heldout == 6


def test_symlinks_are_followed_inside_the_root_only(tmp_path):
    root = _two_classes(tmp_path / "data")
    _png(tmp_path / "secret" / "s.png", 200)
    os.symlink(root / "c0" / "0.png", root / "c1" / "inside.png")  # inside the root: followed
    paths, _, _ = data.list_image_folder(str(root))
    assert str(root / "c1" / "inside.png") in paths
    os.symlink(tmp_path / "secret" / "s.png", root / "c0" / "out.png")
    with pytest.raises(ValueError) as err:
        data.list_image_folder(str(root))
    message = str(err.value)
    assert "\n" not in message and "--set follow_symlinks=True" in message
    assert f"{str(root / 'c0' / 'out.png')!r} -> {str(tmp_path / 'secret' / 's.png')!r}" in message
    paths, _, _ = data.list_image_folder(str(root), follow_symlinks=True)
    assert str(root / "c0" / "out.png") in paths
    # A class folder that links outside the root pulls in every file in it.
    (root / "c0" / "out.png").unlink()
    os.symlink(tmp_path / "secret", root / "c2")
    with pytest.raises(ValueError, match=r"1 symbolic link.*'c2'|c2' -> "):
        data.list_image_folder(str(root))
    assert TrainConfig().max_image_bytes == keras_vit.images.MAX_IMAGE_BYTES  # one default in two places


# ------------------------------------------------------------------------------- item 13: class folder names


@pytest.mark.parametrize("name", ["two\nlines", "para\u2028sep", "form\x0cfeed", "   ", b"caf\xe9"])
def test_class_folder_names_that_are_not_one_utf8_line_are_refused_at_scan(tmp_path, name):
    root = _two_classes(tmp_path / "data")
    folder = os.path.join(os.fsencode(root), os.fsencode(name))  # bytes: a name need not be UTF-8
    try:
        os.mkdir(folder)
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system does not take such names")
    for i in range(2):
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(os.path.join(folder, os.fsencode(f"{i}.png")))
    listed = os.fsdecode(name)  # what os.listdir gives: undecodable bytes as surrogate escapes
    with pytest.raises(ValueError) as err:
        data.list_image_folder(str(root))  # the scan, before any image is read
    message = str(err.value)
    assert repr(listed) in message and "Rename the folder" in message and "\n" not in message


# ------------------------------------------------------------------------------- item 9: TFLite metadata zips


def _model_without_zip(labels=("cat", "dog")):
    """A TFLite flatbuffer (no operators: the reader needs none) with this project's metadata, zip stripped."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT()
    model.version, model.buffers, model.subgraphs = 3, [schema.BufferT()], []
    base = metadata.finish(model, metadata.TFLITE_IDENTIFIER)
    return metadata.without_associated_files(
        metadata.with_metadata(base, list(labels), (32, 32), np.float32, "probabilities")
    )


def _zeros_deflated(mebibytes):
    """A raw deflate stream of `mebibytes` MiB of zeros, built from one flushed 1 MiB block repeated: after a full
    flush the compressor's state is reset, so each repeat decodes to the same 1 MiB (a 4 GiB stream in ~0.1 s)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(2**20)) + c.flush(zlib.Z_FULL_FLUSH)
    return block * mebibytes + c.flush(zlib.Z_FINISH)


def _append_zip(prefix, entries):
    """`prefix` + a zip of `entries` [(name, size, crc, deflated bytes)], written by hand so sizes can be huge."""
    out, central = io.BytesIO(), b""
    out.write(prefix)
    for name, size, crc, stream in entries:
        offset, raw = out.tell(), name.encode()
        fields = (20, 0, zipfile.ZIP_DEFLATED, 0, 0x21, crc, len(stream), size, len(raw), 0)
        out.write(struct.pack("<4s5HL2L2H", b"PK\x03\x04", *fields) + raw + stream)
        central += struct.pack("<4s6HL2L5H2L", b"PK\x01\x02", 20, *fields[:-1], 0, 0, 0, 0, 0, offset) + raw
    start = out.tell()
    out.write(
        central + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central), start, 0)
    )
    return out.getvalue()


def _spy_on_zip_opens(monkeypatch):
    opened = []
    real_open = zipfile.ZipFile.open

    class Bounded:  # the entry's stream, refusing a read without a limit (one would decompress a bomb whole)
        def __init__(self, entry):
            self.entry = entry

        def read(self, n=-1):
            if n is None or n < 0 or n > metadata_reader.MAX_ASSOCIATED_FILE_BYTES + 1:
                raise AssertionError(f"read({n}) of an associated file: no size limit")
            return self.entry.read(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.entry.close()

    def open_(self, name, *args, **kwargs):
        opened.append(getattr(name, "filename", name))
        if opened[-1] != metadata.LABELS_FILE:
            raise AssertionError(f"decompressed {opened[-1]!r}, which the metadata does not need")
        return Bounded(real_open(self, name, *args, **kwargs))

    monkeypatch.setattr(zipfile.ZipFile, "open", open_)
    return opened


def test_metadata_reader_opens_only_the_labels_file(monkeypatch):
    base = _model_without_zip()
    labels = b"cat\ndog\n"
    bomb = _zeros_deflated(4095)  # 4 GiB - 1 MiB of zeros (no zip64 needed); never read, so no CRC computed
    start = time.perf_counter()
    model = _append_zip(base, [("bomb.bin", 4095 * 2**20, 0, bomb), ("labels.txt", len(labels), zlib.crc32(labels),
                               zlib.compress(labels, wbits=-15))])  # fmt: skip
    opened = _spy_on_zip_opens(monkeypatch)
    assert metadata_reader.read_metadata(model)["labels"] == ["cat", "dog"]
    assert opened == ["labels.txt"] and time.perf_counter() - start < 5


def test_metadata_reader_refuses_a_labels_file_over_the_cap_before_decompressing(monkeypatch):
    base = _model_without_zip()
    model = _append_zip(base, [("labels.txt", 4095 * 2**20, 0, _zeros_deflated(4095))])
    opened = _spy_on_zip_opens(monkeypatch)
    start = time.perf_counter()
    with pytest.raises(ExportError, match=r"'labels.txt' is over the 16777216-byte limit .* not read"):
        metadata_reader.read_metadata(model)
    assert opened == [] and time.perf_counter() - start < 1  # refused from its declared size
    # A size that lies (declared under the cap, 32 MiB in the stream) is still read only up to the cap.
    model = _append_zip(base, [("labels.txt", 1000, 0, _zeros_deflated(32))])
    with pytest.raises(ExportError, match="labels.txt"):
        metadata_reader.read_associated_file(model, "labels.txt", max_bytes=999)
    with pytest.raises(ExportError, match="Cannot read the associated file 'labels.txt'"):
        metadata_reader.read_associated_file(model, "labels.txt")  # zipfile stops at 1000 bytes: the CRC is wrong


# ------------------------------------------------------------------------------- item 12: option ranges

NONSENSE = [
    ("learning_rate=-0.01", "learning_rate must be a finite number > 0. Received: learning_rate=-0.01"),
    ("learning_rate=0", "learning_rate must be a finite number > 0. Received: learning_rate=0.0"),
    ("learning_rate=inf", "learning_rate must be a finite number > 0. Received: learning_rate=inf"),
    ("learning_rate=nan", "learning_rate must be a finite number > 0. Received: learning_rate=nan"),
    ("label_smoothing=5", "label_smoothing must be a finite number >= 0 and < 1. Received: label_smoothing=5.0"),
    ("weight_decay=-1", "weight_decay must be a finite number >= 0. Received: weight_decay=-1.0"),
    (
        "global_clipnorm=0",
        "global_clipnorm must be a finite number > 0, or None for no clipping. Received: global_clipnorm=0.0",
    ),
    (
        "global_clipnorm=-1",
        "global_clipnorm must be a finite number > 0, or None for no clipping. Received: global_clipnorm=-1.0",
    ),
    ("num_calibration=-1", "num_calibration must be an integer >= 1 and <= 512. Received: num_calibration=-1"),
    ("num_calibration=513", "num_calibration must be an integer >= 1 and <= 512. Received: num_calibration=513"),
    ("num_samples=0", "num_samples must be an integer >= 1. Received: num_samples=0"),
    (
        "crop_area=(0.0,0.0)",
        "crop_area is (min, max) area fractions with 0 < min <= max <= 1, e.g. (0.05, 1.0). "
        "Received: crop_area=(0.0, 0.0)",
    ),
    (
        "crop_area=(0.5,0.1)",
        "crop_area is (min, max) area fractions with 0 < min <= max <= 1, e.g. (0.05, 1.0). "
        "Received: crop_area=(0.5, 0.1)",
    ),
    ("model.patch_size=0", "model.patch_size must be an integer >= 1. Received: model.patch_size=0"),
    (
        "model.dropout_rate=1.5",
        "model.dropout_rate must be a finite number >= 0 and < 1. Received: model.dropout_rate=1.5",
    ),
    (
        "warmup_steps=-5",
        "warmup_steps must be an integer >= 0, or None for 5% of the run's steps. Received: warmup_steps=-5",
    ),
    ("beta_2=1", "beta_2 must be a finite number >= 0 and < 1. Received: beta_2=1.0"),
    ("holdout_fraction=1", "holdout_fraction must be a finite number > 0 and < 1. Received: holdout_fraction=1.0"),
    ("mixup_alpha=nan", "mixup_alpha must be a finite number >= 0. Received: mixup_alpha=nan"),
    ("mixup_images=1", "mixup_images must be an integer >= 2. Received: mixup_images=1"),
    ("max_image_bytes=0", "max_image_bytes must be an integer >= 1. Received: max_image_bytes=0"),
    (
        "randaugment=(0,10)",
        "randaugment is (num_layers >= 1, magnitude >= 0) on big_vision's 0-10 level scale, "
        "e.g. (2, 10), or None. Received: randaugment=(0, 10)",
    ),
]


@pytest.mark.parametrize("item,message", NONSENSE, ids=[item for item, _ in NONSENSE])
def test_out_of_range_options_are_refused_at_parse_time(item, message):
    with pytest.raises(ValueError) as err:
        parse_overrides([item])
    assert str(err.value) == message
    # The same table guards TrainConfig itself (recipes, Python callers), with the same message.
    key, text = item.split("=", 1)
    option = key[len("model.") :]
    if key.startswith("model."):
        value = overrides.parse_typed(text, option_types.model_option_types()[option], key)
        kwargs = {"model": {option: value}}
    else:
        kwargs = {key: overrides.parse_typed(text, overrides.field_types()[key], key)}
    with pytest.raises(ValueError) as err:
        TrainConfig(**kwargs)
    assert str(err.value) == message


def test_in_range_edges_are_accepted():
    values = ["learning_rate=1e-9", "label_smoothing=0", "weight_decay=0", "global_clipnorm=None",
              "num_calibration=512", "num_samples=1", "crop_area=(1.0,1.0)", "model.patch_size=1"]  # fmt: skip
    TrainConfig().replace(**parse_overrides(values))


def test_cli_refuses_nonsense_in_one_line_with_exit_2_before_any_work(tmp_path):
    workdir = tmp_path / "run"
    result = subprocess.run(
        # The missing dataset would stop a regressed run early (with another message) instead of training.
        [
            sys.executable,
            "-m",
            "training",
            "--workdir",
            str(workdir),
            "--dataset",
            f"folder:{tmp_path / 'none'}",
            "--set",
            "learning_rate=-0.01",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "[training] error: learning_rate must be a finite number > 0. Received: learning_rate=-0.01"
    )
    assert "Traceback" not in result.stderr and not workdir.exists()
