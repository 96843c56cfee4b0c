"""The command lines' first seconds: --help and bad arguments answer before Keras loads, quietly and helpfully."""

import os
import subprocess
import sys
import warnings

import pytest

from keras_vit import _startup
from keras_vit._names import did_you_mean
from keras_vit.files import describe_os_error
from tests.conftest import ROOT

HEAVY = ("keras", "tensorflow", "jax")


def _cli(*args, cwd=ROOT):
    """(return code, stdout, stderr, top-level modules imported) of `python -X importtime -m ARGS`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    imported, errors = set(), []
    for line in result.stderr.splitlines():
        if line.startswith("import time:"):
            name = line.rsplit("|", 1)[-1].strip()
            if name != "package":  # the header line
                imported.add(name.split(".")[0])
        else:
            errors.append(line)
    return result.returncode, result.stdout, "\n".join(errors), imported


@pytest.mark.parametrize(
    "args, expected",
    [
        (("training", "--help"), ["evaluate", "digits", "cifar10_finetune", "imagenet21k_b16", "--verbose"]),
        (("training", "evaluate", "--help"), ["--workdir", "--verbose"]),
        (("export", "--help"), ["predict", "--quantize", "--verbose"]),
        (("export", "predict", "--help"), ["--top-k"]),
    ],
)
def test_help_lists_subcommands_and_recipes_without_importing_keras(args, expected):
    code, out, err, imported = _cli(*args)
    assert code == 0, err
    for word in expected:
        assert word in out, f"{word!r} not in {args} --help"
    assert not imported & set(HEAVY), f"{args}: imported {sorted(imported & set(HEAVY))}"


@pytest.mark.parametrize(
    "args, message",
    [
        (("training", "--config", "digts"), "Unknown config 'digts'. Did you mean 'digits'? Available configs: "),
        (("training", "--set", "learnig_rate=1e-3"), "Did you mean 'learning_rate'?"),
        (("training", "--set", "model.dropout=0.1"), "Did you mean 'model.dropout_rate'?"),
        (("training", "--set", "epochs=ten"), "epochs expects an integer. Received: epochs='ten'"),
        (("training", "--strategy", "tpus"), "invalid choice: 'tpus'"),
        (("export", "runs/x", "--quantize", "int9"), "Did you mean 'int8'?"),
    ],
)
def test_bad_arguments_answer_before_keras_loads(args, message):
    code, _, err, imported = _cli(*args)
    assert code == 2
    assert message in err, err
    assert not imported & set(HEAVY), f"{args}: imported {sorted(imported & set(HEAVY))}"


def test_a_workdir_that_is_a_file_is_named_as_the_problem(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a run")
    code, _, err, imported = _cli("training", "--workdir", str(path))
    assert code == 2
    assert f"--workdir {path} is a file, not a directory" in err and "File exists" not in err
    assert not imported & set(HEAVY)
    # The library's own error line for the same mistake (e.g. an export --out that is a file).
    line = describe_os_error(FileExistsError(17, "File exists", str(path)), "Use another directory.")
    assert line == f"{path} is a file, not a directory: pass a directory path (or move the file away) and run again."


@pytest.mark.slow  # a fresh process importing Keras and keras_vit: 23 s measured
def test_importing_keras_vit_adds_nothing_that_training_or_export_need():
    code = (
        "import sys, keras; before = set(sys.modules); import keras_vit; "
        "print(sorted({m.split('.')[0] for m in set(sys.modules) - before}), "
        "[m for m in ('tensorflow_datasets', 'ai_edge_litert', 'mediapipe') if m in sys.modules])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "['keras_vit'] []", result.stdout


def test_did_you_mean_picks_the_closest_name_or_none():
    assert did_you_mean("digts", ["digits", "cifar10_finetune"]) == " Did you mean 'digits'?"
    assert did_you_mean("INT8", ["float32", "int8"]) == " Did you mean 'int8'?"
    assert did_you_mean("zzzz", ["digits", "cifar10_finetune"]) == ""


def test_configure_is_quiet_by_default_and_respects_the_user(monkeypatch):
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    environ = {}
    assert _startup.configure(["--epochs", "1"], environ) is False
    assert environ["TF_CPP_MIN_LOG_LEVEL"] == "2"
    environ = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    _startup.configure([], environ)
    assert environ == {"TF_CPP_MIN_LOG_LEVEL": "0"}
    environ = {}
    assert _startup.configure(["--epochs", "1", "-v"], environ) is True and environ == {}
    assert _startup.verbose_requested(["--verbose"]) and not _startup.verbose_requested(["--", "-v"])


def test_cli_warnings_are_one_line_without_the_source_echo(monkeypatch):
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    _startup.configure([], {})
    line = warnings.formatwarning("check the rate", UserWarning, "training/trainer.py", 321, "make_schedule(...)")
    assert line == "UserWarning: check the rate\n"


def test_native_output_is_captured_at_the_file_descriptors(capfd):
    with _startup.captured_native_output() as printed:
        os.write(1, b"fully_quantize: 0\n")
        os.write(2, b"converter says\n")
    assert printed == ["fully_quantize: 0\nconverter says\n"]
    out, err = capfd.readouterr()
    assert "fully_quantize" not in out and "converter says" not in err


def test_finding_devices_drops_only_the_cuinit_line_without_a_gpu(capfd, monkeypatch, tmp_path):
    monkeypatch.setattr(_startup, "NVIDIA_DEVICE", str(tmp_path / "no-nvidiactl"))

    class Config:
        @staticmethod
        def list_physical_devices():
            os.write(2, b"E cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error\n")
            os.write(2, b"W some other warning\n")

    class FakeTF:
        config = Config

    _startup.find_devices_quietly(FakeTF)
    _, err = capfd.readouterr()
    assert err == "W some other warning\n"
