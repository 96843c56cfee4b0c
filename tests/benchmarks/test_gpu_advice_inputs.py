"""benchmarks.gpu_advice on bad inputs: one line and rc 2 for each, never a traceback; --date is a real day."""

import json
import os
import shutil

import pytest

from benchmarks import gpu_advice
from tests import support

H200_RESULTS = os.path.join(str(support.ROOT), "benchmarks", "gpu_runs", "gpu-h200-2026-12-04.jsonl")
ADVICE = os.path.join(str(support.ROOT), "training", "backend_advice.json")


@pytest.fixture
def files(tmp_path):
    advice = tmp_path / "backend_advice.json"
    shutil.copy(ADVICE, advice)
    return tmp_path, str(advice)


def _refused(capsys, argv, *words):
    assert gpu_advice.cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


def _results(tmp_path, *lines):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_a_truncated_line_is_named(files, capsys):
    tmp_path, advice = files
    results = _results(tmp_path, json.dumps({"label": "a"}), '{"label": "b", "argv": ["keras-vit"')
    _refused(capsys, [advice, results, "--device", "X", "--date", "2026-12-04"], "line 2", "not JSON")


@pytest.mark.parametrize("row", ["[1, 2]", "3"])
def test_a_row_that_is_no_object_is_named(files, capsys, row):
    tmp_path, advice = files
    _refused(capsys, [advice, _results(tmp_path, row), "--device", "X"], "line 1", "not a result row")


def test_a_missing_results_file_and_a_directory(files, capsys):
    tmp_path, advice = files
    _refused(capsys, [advice, str(tmp_path / "nope.jsonl")], "no results file")
    _refused(capsys, [advice, str(tmp_path)], "is a directory")


def test_a_broken_advice_file(files, capsys):
    _tmp_path, advice = files
    with open(advice, "w") as f:
        f.write('{"cpus": ')
    _refused(capsys, [advice, H200_RESULTS], "advice file", "not JSON", "git checkout")


def test_swapped_arguments(files, capsys):
    _tmp_path, advice = files
    _refused(capsys, [H200_RESULTS, advice], "swapped")


def test_the_committed_results_without_device_is_one_line(files, capsys):
    tmp_path, advice = files
    rows = gpu_advice.read_results(H200_RESULTS)
    rows = [{key: value for key, value in row.items() if key != "device"} for row in rows]
    results = _results(tmp_path, *map(json.dumps, rows))
    _refused(capsys, [advice, results], "--device")


@pytest.mark.parametrize("day", ["yesterday", "2026-13-01", "4.12.2026", "20261204"])
def test_date_must_be_a_day(files, capsys, day):
    _tmp_path, advice = files
    with pytest.raises(SystemExit) as exit_:
        gpu_advice.cli([advice, H200_RESULTS, "--date", day])
    assert exit_.value.code == 2
    assert "YYYY-MM-DD" in capsys.readouterr().err


def test_a_real_day_is_taken():
    assert gpu_advice.iso_date("2026-12-04") == "2026-12-04"


@pytest.mark.process  # what a fresh process imports is the subject
def test_a_bad_input_is_refused_before_keras_is_imported(tmp_path):
    import subprocess
    import sys

    (tmp_path / "results.jsonl").write_text('{"label": "kv_jax_fused", "train_img_s": {"me')  # truncated line
    code = (
        "import sys; from benchmarks import gpu_advice; "
        f"rc = gpu_advice.cli([{ADVICE!r}, {str(tmp_path / 'results.jsonl')!r}]); "
        "print(rc, sorted(m for m in ('keras', 'jax', 'tensorflow') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(support.ROOT))
    assert result.stdout.split("\n")[-2] == "2 []", result.stdout + result.stderr[-2000:]
    assert "line 1 is not JSON" in result.stderr
