"""Every failure a user can cause gives one line naming the problem and the fix, exit code 2 from the CLIs, and
loses nothing already written (issue 13, item 6).

Read-only and full disks are emulated by failing the Python-level file calls under one folder with the errno
the kernel would give (EROFS, ENOSPC): the tests run as root in some places, where permission bits stop nothing.
"""

import builtins
import dataclasses
import errno
import io
import json
import os
import typing
import warnings

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError, files
from training.configs import get_config
from training.options.config import TrainConfig
from training.options.fields import describe_type
from training.options.overrides import field_types, parse_overrides, parse_typed

TINY = [
    "--dataset",
    "synthetic",
    "--epochs",
    "2",
    "--batch-size",
    "16",
    "--strategy",
    "default",
    "--set",
    "steps_per_epoch=4",
    "--set",
    "image_size=16",
    "--set",
    "eval_every=0",
    "--set",
    "num_samples=8",
    "--set",
    "num_calibration=8",
    "--set",
    "plots=false",
    "--set",
    "jit_compile=false",
    "--set",
    "warmup_steps=0",
]


def _training_cli(argv, capsys):
    from training.__main__ import main

    code = main(argv)
    return code, capsys.readouterr().err.strip()


def _one_error_line(err):
    lines = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, err
    return lines[0]


# ---- --set values are typed by their field -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("false", False),
        ("FALSE", False),
        ("False", False),
        ("true", True),
        ("True", True),
        ("auto", "auto"),
        ("'auto'", "auto"),
    ],
)
def test_jit_compile_false_is_false_not_the_truthy_string(text, expected):
    config = get_config("digits").replace(**parse_overrides([f"jit_compile={text}"]))
    assert config.jit_compile is expected if isinstance(expected, bool) else config.jit_compile == expected


def test_booleans_take_true_false_in_any_case_and_nothing_else():
    assert parse_overrides(["flip=false", "deterministic=TRUE"]) == {"flip": False, "deterministic": True}
    for bad in ("1", "0", "yes", "off", "'false'"):
        with pytest.raises(ValueError, match=r"^flip expects true or false\. Received: flip="):
            parse_overrides([f"flip={bad}"])
    with pytest.raises(ValueError, match="flip expects true or false"):
        TrainConfig(flip="false")  # from Python too: a string would be truthy


def test_numbers_none_tuples_and_strings():
    parsed = parse_overrides(
        [
            "epochs=7",
            "learning_rate=1",
            "weight_decay=1e-4",
            "global_clipnorm=None",
            "shuffle_buffer=none",
            "randaugment=(2, 15)",
            "crop_area=0.08,1",
            "init=None",
            "dataset=folder:/data/my images",
            "data_dir='123'",
            "head_bias_init=-6.9",
        ]
    )
    assert parsed == {
        "epochs": 7,
        "learning_rate": 1.0,
        "weight_decay": 1e-4,
        "global_clipnorm": None,
        "shuffle_buffer": None,
        "randaugment": (2, 15),
        "crop_area": (0.08, 1),
        "init": None,
        "dataset": "folder:/data/my images",
        "data_dir": "123",
        "head_bias_init": -6.9,
    }
    assert type(parsed["learning_rate"]) is float and type(parsed["epochs"]) is int
    get_config("digits").replace(**parsed)  # all of them a valid config


@pytest.mark.parametrize(
    "item, message",
    [
        ("epochs=ten", "epochs expects an integer. Received: epochs='ten'"),
        ("epochs=1.5", "epochs expects an integer. Received: epochs='1.5'"),
        ("epochs=True", "epochs expects an integer"),
        ("learning_rate=fast", "learning_rate expects a number"),
        ("steps_per_epoch=many", "steps_per_epoch expects an integer or None"),
        ("randaugment=2", "randaugment expects a tuple such as (2, 10) or None"),
        ("jit_compile=xla", "jit_compile expects true or false or 'auto'"),
        ("model.hidden_size=wide", "model.hidden_size expects an integer"),
        ("model.class_token=no", "model.class_token expects true or false"),
    ],
)
def test_a_wrong_type_names_the_field_and_the_type(item, message):
    with pytest.raises(ValueError) as info:
        parse_overrides([item])
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_model_overrides_are_checked_against_create_model():
    assert parse_overrides(
        ["model.dropout_rate=0.1", "model.class_token=false", "model.resnet_layers=(3, 4, 9)", "model.dtype=None"]
    ) == {"model.dropout_rate": 0.1, "model.class_token": False, "model.resnet_layers": (3, 4, 9), "model.dtype": None}
    with pytest.raises(ValueError, match=r"Unknown model option 'model.hidden_dim'.*hidden_size"):
        parse_overrides(["model.hidden_dim=64"])
    with pytest.raises(ValueError, match=r"model.image_size.*--set image_size="):
        parse_overrides(["model.image_size=64"])
    # From Python, a dict reaches create_model only if it would work there.
    with pytest.raises(ValueError, match=r"Unknown model option model.hidden_dim"):
        TrainConfig(model={"hidden_dim": 64})
    with pytest.raises(ValueError, match=r"model.dropout_rate expects a number"):
        TrainConfig(model={"dropout_rate": "0.1"})


def test_every_field_round_trips_from_text_so_new_fields_are_covered():
    """Each field's default, written as a user would type it, parses back to itself: the parser is derived from
    the annotations, so a field added later is typed without editing the parser."""
    defaults = TrainConfig()
    hints = field_types()
    for field in dataclasses.fields(TrainConfig):
        value = getattr(defaults, field.name)
        text = str(value).lower() if isinstance(value, bool) else str(value) if isinstance(value, str) else repr(value)
        assert parse_typed(text, hints[field.name], field.name) == value, field.name
        assert describe_type(hints[field.name]), field.name


def test_the_parser_follows_any_annotation():
    # The forms other fields may be written in: PEP 604 unions, Literal, typed tuples.
    assert parse_typed("none", int | None) is None and parse_typed("3", int | None) == 3
    assert parse_typed("highest", typing.Literal["default", "high", "highest"]) == "highest"
    with pytest.raises(ValueError, match=r"matmul_precision expects 'default' or 'high'"):
        parse_typed("fast", typing.Literal["default", "high"], "matmul_precision")
    assert parse_typed("(1, 2)", tuple[int, int]) == (1, 2)
    with pytest.raises(ValueError, match="expects a tuple"):
        parse_typed("(1, 'a')", tuple[int, int])
    assert parse_typed("0.5", float) == 0.5 and parse_typed("2", float) == 2.0


def test_training_cli_bad_set_is_one_line_and_exit_2(capsys, tmp_path):
    code, err = _training_cli(["--workdir", str(tmp_path / "run"), "--set", "jit_compile=maybe"], capsys)
    assert code == 2 and _one_error_line(err) == (
        "[training] error: jit_compile expects true or false or 'auto'. Received: jit_compile='maybe'"
    )
    code, err = _training_cli(["--workdir", str(tmp_path / "run"), "--set", "lr=1e-3"], capsys)
    assert code == 2 and _one_error_line(err).startswith("[training] error: Unknown training option 'lr'")
    assert not (tmp_path / "run").exists()


# ---- checkpoints that are not checkpoints --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_npz(tmp_path_factory):
    from tests.support.checkpoints import vit_checkpoint

    path = tmp_path_factory.mktemp("ckpt") / "testing.npz"
    ckpt = vit_checkpoint(
        np.random.default_rng(0), hidden=32, layers=2, heads=2, mlp=128, patch=8, grid=(4, 4), classes=10
    )
    np.savez_compressed(path, **ckpt)
    return path


def _corrupt_compressed(source, target):
    """A copy of a compressed .npz with bytes flipped inside one member's deflate stream (the zip directory and
    the member headers intact, so the damage surfaces only when that member is decompressed)."""
    import zipfile

    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as archive:
        info = max(archive.infolist(), key=lambda i: i.compress_size)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for i in range(start + 64, start + 64 + 256):
        data[i] ^= 0xA5
    target.write_bytes(bytes(data))
    return target


@pytest.mark.parametrize("name", ["weights.npy", "weights.npz"])
def test_an_npy_given_as_a_checkpoint(tmp_path, name):
    with open(tmp_path / name, "wb") as f:  # np.save would append .npy to the .npz name
        np.save(f, np.zeros((3, 4), np.float32))
    model = keras_vit.create_model("testing")
    with pytest.raises(
        CheckpointError,
        match=r"\.npy file holding one array \(3, 4\), not an \.npz checkpoint.*"
        r"Pass the \.npz checkpoint",
    ):
        keras_vit.load_npz(model, tmp_path / name)


def test_a_corrupt_compressed_npz(tmp_path, tiny_npz):
    broken = _corrupt_compressed(tiny_npz, tmp_path / "broken.npz")
    import zlib

    with pytest.raises(zlib.error), np.load(broken) as archive:  # what np.load gives: the failure tested here
        [archive[k] for k in archive.files]
    model = keras_vit.create_model("testing", num_classes=10)
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match=r"Cannot read .*broken\.npz.*zlib\.error.*download it again"):
        keras_vit.load_npz(model, broken)
    for w, b in zip(model.weights, before):
        np.testing.assert_array_equal(w.numpy(), b)  # nothing was half-loaded


def test_training_cli_init_that_is_not_a_checkpoint(tmp_path, tiny_npz, capsys):
    with open(tmp_path / "init.npz", "wb") as f:
        np.save(f, np.zeros(3, np.float32))
    broken = _corrupt_compressed(tiny_npz, tmp_path / "broken.npz")
    for init, expected in (
        (tmp_path / "init.npz", ".npy file holding one array"),
        (broken, "zlib.error"),
        (tmp_path / "x.npy", "not found"),
    ):
        code, err = _training_cli(["--workdir", str(tmp_path / "run"), *TINY, "--init", str(init)], capsys)
        line = _one_error_line(err)
        assert code == 2 and expected in line and str(init) in line, err
    assert not (tmp_path / "run" / "checkpoints").exists()


REFUSED_BEFORE_THE_FRAMEWORK = """
import sys
from training.__main__ import main
code = main(sys.argv[1:])
print("EXIT", code, sorted(m for m in ("keras", "tensorflow", "jax", "torch") if m in sys.modules))
"""


def _terabyte_header(path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [250_000_000_000], "data_offsets": [0, 10**12]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    return path


@pytest.mark.parametrize("kind", ["terabyte header", "folder with it", "empty folder", "missing path"])
def test_training_cli_refuses_a_broken_init_before_importing_tensorflow(tmp_path, kind):
    import subprocess
    import sys

    (tmp_path / "folder").mkdir()
    if kind == "terabyte header":
        init, expected = _terabyte_header(tmp_path / "w.safetensors"), "as safetensors (a safetensors file whose"
    elif kind == "folder with it":
        init, expected = _terabyte_header(tmp_path / "folder" / "model.safetensors").parent, "as safetensors ("
    elif kind == "empty folder":
        init, expected = tmp_path / "folder", "is not a checkpoint folder of a known format (found: nothing)"
    else:
        init, expected = tmp_path / "broken", "--init checkpoint not found: No such file or folder: "
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv = ["--workdir", str(tmp_path / "run"), *TINY, "--init", str(init)]
    result = subprocess.run([sys.executable, "-c", REFUSED_BEFORE_THE_FRAMEWORK, *argv], cwd=root, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONPATH": root})  # fmt: skip
    line = _one_error_line(result.stderr)
    assert line.startswith("[training] error: ") and expected in line and str(init) in line, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "EXIT 2 []", result.stdout  # no framework was imported
    assert not (tmp_path / "run").exists()


def test_a_resume_does_not_check_init_which_it_never_reads(tmp_path):
    """A workdir with a checkpoint resumes without reading --init, so a path gone since the run started is no
    error at the command line (the run itself decides; only the parse is exercised here)."""
    from training.__main__ import _parse

    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    argv = ["--workdir", str(tmp_path / "run"), *TINY, "--init", str(tmp_path / "gone.npz")]
    with pytest.raises(FileNotFoundError, match="--init checkpoint not found"):
        _parse(argv)
    (tmp_path / "run" / "checkpoints" / "ckpt-00000008.npz").write_bytes(b"")
    assert callable(_parse(argv))


# ---- read-only and full disks --------------------------------------------------------------------------------


@pytest.fixture
def failing_disk(monkeypatch):
    """`fail(root, errno_code, after=0)`: from then on, creating, writing, renaming or removing anything under
    `root` raises OSError(errno_code), after `after` successful file writes (fsyncs) under it."""

    def fail(root, code, after=0):
        root = os.path.abspath(root)
        allowed = {"writes": after}

        def under(path):
            try:
                return os.path.abspath(os.fspath(path)).startswith(root)
            except TypeError:
                return False

        def error(path):
            return OSError(code, os.strerror(code), os.fspath(path))

        def guard(name, real, path_args=(0,), write_test=None):
            def wrapper(*args, **kwargs):
                for i in path_args:
                    hit = i < len(args) and under(args[i]) and (write_test is None or write_test(*args, **kwargs))
                    if hit and (code != errno.ENOSPC or allowed["writes"] <= 0):
                        raise error(args[i])
                return real(*args, **kwargs)

            monkeypatch.setattr(*name, wrapper)

        def writes(path, mode="r", *a, **k):
            return isinstance(mode, str) and any(c in mode for c in "wax+")

        real_fsync = os.fsync

        def fsync(fd):  # a full disk shows at the flush, after part of the file went out
            path = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
            if under(path) and not os.path.isdir(path):  # a directory's fsync (after a rename) writes no data
                if allowed["writes"] <= 0:
                    raise error(path)
                allowed["writes"] -= 1
            return real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        if code != errno.ENOSPC:  # a read-only disk refuses everything at once; a full one only new data
            guard((os, "mkdir"), os.mkdir)
            guard((os, "replace"), os.replace, (1,))
            guard((os, "rename"), os.rename, (1,))
            guard((os, "remove"), os.remove)
            guard((os, "unlink"), os.unlink)
            guard((os, "rmdir"), os.rmdir)
            guard((os, "open"), os.open, (0,), lambda p, flags, *a, **k: flags & (os.O_WRONLY | os.O_RDWR))
        guard((builtins, "open"), builtins.open, (0,), writes)
        guard((io, "open"), io.open, (0,), writes)

    return fail


def _tree(folder):
    return {
        os.path.relpath(os.path.join(d, n), folder): open(os.path.join(d, n), "rb").read()
        for d, _, names in os.walk(folder)
        for n in names
    }


def test_read_only_workdir_fails_before_training(tmp_path, failing_disk, capsys):
    workdir = tmp_path / "run"
    workdir.mkdir()
    failing_disk(workdir, errno.EROFS)
    code, err = _training_cli(["--workdir", str(workdir), *TINY], capsys)
    line = _one_error_line(err)
    assert code == 2, err
    assert line.startswith("[training] error: the file system is read-only: ") and str(workdir) in line
    assert "Use a writable --workdir" in line
    assert os.listdir(workdir) == []


NOBODY = 65534  # the unprivileged user and group of Debian and most distributions


def _check_writable_as(folder, uid):
    """files.check_writable(folder) in a forked child running as `uid` (set after the fork, so the interpreter and
    keras_vit are already loaded: Python itself may live where nobody may read); returns (errno or 0, euid seen).
    The child never returns into pytest."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            os.close(read)
            if os.geteuid() != uid:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            try:
                files.check_writable(folder)
                code = 0
            except OSError as err:
                code = err.errno
            os.write(write, f"{code} {os.geteuid()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as reply:
        answer = reply.read()
    os.waitpid(pid, 0)
    code, euid = map(int, answer.split())
    return code, euid


def test_check_writable_on_a_real_read_only_folder():
    """A real mode-0500 folder, probed by a process that is not root (CI runs the suite as root, where permission
    bits stop nothing): as root the probe runs in a child that drops to nobody. A writable sibling is the control:
    the child reaches the folders, so the refusal is the permission bits'."""
    import shutil
    import tempfile

    uid = NOBODY if os.geteuid() == 0 else os.geteuid()
    base = tempfile.mkdtemp(prefix="keras-vit-ro-")  # not tmp_path: pytest's folders are 0700, closed to nobody
    os.chmod(base, 0o711)
    folders = {"rw": os.path.join(base, "rw"), "ro": os.path.join(base, "ro")}
    try:
        for name, mode in (("rw", 0o700), ("ro", 0o500)):
            os.mkdir(folders[name])
            os.chown(folders[name], uid, -1)
            os.chmod(folders[name], mode)
        assert _check_writable_as(folders["rw"], uid) == (0, uid)
        assert _check_writable_as(folders["ro"], uid) == (errno.EACCES, uid)
        assert os.listdir(folders["ro"]) == [] and os.listdir(folders["rw"]) == []  # no probe left behind
    finally:
        if os.path.isdir(folders["ro"]):
            os.chmod(folders["ro"], 0o700)
        shutil.rmtree(base)


@pytest.mark.slow
def test_full_disk_mid_run_keeps_the_checkpoints_and_resumes(tmp_path, failing_disk, capsys, monkeypatch):
    workdir = tmp_path / "run"
    checkpoints = workdir / "checkpoints"
    argv = ["--workdir", str(workdir), *TINY, "--set", "checkpoint_every=2"]
    # The probe and config.json go through (outside checkpoints/), then the checkpoints of steps 2 and 4; the
    # write of step 6 fails at its flush, as on a full disk.
    failing_disk(checkpoints, errno.ENOSPC, after=2)
    code, err = _training_cli(argv, capsys)
    monkeypatch.undo()
    line = _one_error_line(err)
    assert code == 2, err
    assert line.startswith("[training] error: no space left on the device: ") and str(checkpoints) in line
    assert "the checkpoints already written are intact" in line
    names = sorted(os.listdir(checkpoints))
    assert names == ["ckpt-00000002.npz", "ckpt-00000004.npz"], names  # no half-written temporary left
    for name in names:
        with np.load(checkpoints / name) as archive:
            assert json.loads(archive["header"].tobytes())["step"] == int(name[5:13])
    code, err = _training_cli(argv, capsys)
    assert code == 0, err
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == 4 and metrics["steps"] == 8
    assert metrics["jit_compile"] is False  # --set jit_compile=false reached Keras as False


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny classifier and a first, complete export of it (float32 TFLite only, to keep it fast)."""
    from export.__main__ import main
    from tests.support import export_fixtures as fx

    root = tmp_path_factory.mktemp("exported")
    fx.random_classifier("testing", head_scale=4.0).save(root / "model.keras")
    (root / "labels.txt").write_text("".join(f"class_{i}\n" for i in range(10)))
    out = root / "out"
    assert (
        main(
            [
                str(root / "model.keras"),
                "--out",
                str(out),
                "--formats",
                "tflite",
                "--quantize",
                "float32",
                "--latency-runs",
                "1",
            ]
        )
        == 0
    )
    return root, out


@pytest.mark.slow
@pytest.mark.parametrize(
    "code, problem, fix",
    [
        (errno.EROFS, "the file system is read-only", "Pass a writable --out directory"),
        (errno.ENOSPC, "no space left on the device", "Free some space (or pass --out on another disk)"),
    ],
)
def test_export_onto_a_read_only_or_full_disk(exported, failing_disk, capsys, monkeypatch, code, problem, fix):
    from export.__main__ import main

    root, out = exported
    before = _tree(out)
    assert "report.json" in before and "model_float32.tflite" in before
    capsys.readouterr()
    # The whole file system: an export is staged beside --out and swapped in, so the folder holding it counts too.
    failing_disk(out.parent, code)
    siblings = sorted(p.name for p in out.parent.iterdir())
    status = main(
        [
            str(root / "model.keras"),
            "--out",
            str(out),
            "--formats",
            "saved_model,tflite",
            "--quantize",
            "float32",
            "--latency-runs",
            "1",
        ]
    )
    err = capsys.readouterr().err.strip()
    monkeypatch.undo()
    line = _one_error_line(err)
    # It names the path that failed: --out or the staging folder beside it (".out.staging-...").
    assert status == 2 and line.startswith(f"error: {problem}: {out.parent}{os.sep}") and fix in line, err
    assert _tree(out) == before  # the previous export, byte for byte, and nothing beside it
    assert sorted(p.name for p in out.parent.iterdir()) == siblings


# ---- images in the wrong value range -------------------------------------------------------------------------


def test_runners_warn_on_images_outside_the_model_range():
    from export.keras_runner import KerasRunner
    from keras_vit.preprocessing import scale_pixels

    model = keras_vit.create_model("testing")
    runner = KerasRunner(model)
    pixels = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runner.outputs(scale_pixels(pixels))  # the contract: no warning
    with pytest.warns(
        UserWarning,
        match=r"expects images in \[-1, 1\] but received values in \[0, 255\].*raw "
        r"pixels in 0\.\.255.*\(x - 127\.5\) / 127\.5",
    ):
        runner.outputs(pixels)
    with pytest.warns(UserWarning, match=r"x \* 2 - 1 for 0\.\.1"):
        runner.outputs(pixels / 127.5 - 1.5)  # not 0..255, still out of range


@pytest.mark.slow
def test_predict_refuses_float_images_and_the_model_itself_stays_silent(exported):
    import export

    root, _ = exported
    pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3)).astype(np.float32)
    with pytest.raises(export.ExportError, match=r"raw uint8 pixels.*astype\('uint8'\)"):
        export.predict(root / "model.keras", [pixels])
    # Decided: the model does not check values (it is traced into XLA/SavedModel/TFLite graphs, where a check would
    # cost a reduction per call and a Python warning cannot run); the numpy entry points above do.
    model = keras_vit.create_model("testing")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(pixels[None])
