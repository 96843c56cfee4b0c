"""Export directories hold exactly what report.json lists, after any sequence of exports, killed or not.

The fault-injection tests kill an export with SIGKILL at every `export.commit.fault_point` (the exporter kills
itself at the Nth point when KERAS_VIT_EXPORT_KILL_AT=N, so the points are deterministic, not timing-based),
check what is in view at that moment, then run the export again and compare with an uninterrupted run.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np
import pytest

import export
from export import commit
from keras_vit import files
from tests import support
from tests.support import export_fixtures as fx
from tests.support.export_sets import check_complete, expected, stage_and_commit, tree

ROOT = support.ROOT


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    model = fx.random_classifier("testing", head_scale=4.0)
    model.save(root / "model.keras")
    return root, model


@pytest.mark.slow  # a SavedModel and three TFLite conversions
def test_fewer_modes_leave_only_what_the_new_report_lists(tiny, tmp_path):
    root, _ = tiny
    out = tmp_path / "out"
    export.export_path(root / "model.keras", out=out, formats="saved_model,tflite", quantize="float32,dynamic_int8",
                       latency_runs=1, gpu_check="off")  # fmt: skip
    first = check_complete(out)
    assert {"saved_model/saved_model.pb", "model_float32.tflite", "model_dynamic_int8.json"} <= set(first)
    report = export.export_path(root / "model.keras", out=out, formats="tflite", quantize="float32", latency_runs=1)
    second = check_complete(out)
    assert sorted(second) == ["model_float32.json", "model_float32.tflite"]  # no SavedModel, no dynamic_int8
    assert second["model_float32.tflite"] == first["model_float32.tflite"]  # the same model converts the same
    assert [a["path"] for a in report["artifacts"]] == [str(out / "model_float32.tflite")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging or old directory left beside it
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~_umask())  # not mkdtemp's private mode


@pytest.mark.slow
def test_fewer_modes_on_a_url(tiny):
    root, _ = tiny
    out = f"ram://{uuid.uuid4().hex}/export"
    export.export_path(root / "model.keras", out=out, formats="tflite", quantize="float32,dynamic_int8",
                       latency_runs=1)  # fmt: skip
    assert sorted(check_complete(out)) == [
        f"model_{m}.{e}" for m in ("dynamic_int8", "float32") for e in ("json", "tflite")
    ]
    export.export_path(root / "model.keras", out=out, formats="tflite", quantize="float32", latency_runs=1)
    assert sorted(check_complete(out)) == ["model_float32.json", "model_float32.tflite"]


def test_an_output_directory_with_other_files_is_refused(tiny, tmp_path, capsys):
    root, _ = tiny
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    (out / "model_float32.tflite").write_bytes(b"an older export")
    with pytest.raises(export.ExportError, match=r"holds files an export does not write \(notes\.txt\).*new or empty"):
        export.export_path(root / "model.keras", out=out, quantize="float32", latency_runs=1)
    from export.__main__ import main as cli

    assert cli([str(root / "model.keras"), "--out", str(out), "--quantize", "float32"]) == 2
    assert "notes.txt" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    with pytest.raises(export.ExportError, match="is a file"):
        export.export_path(root / "model.keras", out=tmp_path / "file", quantize="float32")
    assert (out / "notes.txt").read_text() == "keep me" and sorted(p.name for p in out.iterdir()) == [
        "model_float32.tflite",
        "notes.txt",
    ]


# --- The commit protocol on its own, killed at every point, on all three paths ----------------------------------


def run_child(out, name, exchange, env):
    code = f"from tests.support.export_sets import stage_and_commit; stage_and_commit({out!r}, {name!r}, {exchange})"
    # Local paths never import TensorFlow on the numpy backend: a child starts in about a second.
    backend = {} if files.is_remote(out) else {"KERAS_BACKEND": "numpy"}
    return subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, env={**os.environ, **backend, **env},
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.mark.slow  # 2, 3 and 8 killed children of 2-5 s each
@pytest.mark.process
@pytest.mark.parametrize("path", ["exchange", "two renames", "url"])
def test_commit_killed_at_every_point(path, tmp_path, monkeypatch):
    exchange = path == "exchange"
    # A URL export stages in the temp dir: give this test its own, to see that killed runs leave nothing there.
    temp = tmp_path.parent / f"{tmp_path.name}-temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("TMPDIR", str(temp))
    if exchange and sys.platform != "linux":
        pytest.skip("renameat2(RENAME_EXCHANGE) is Linux's; elsewhere the export takes the two-rename path")
    base = f"file://{tmp_path}" if path == "url" else str(tmp_path)
    out = files.join(base, "export")
    stage_and_commit(out, "A", exchange)
    assert tree(out) == {**expected("A"), "report.json": tree(out)["report.json"]}
    snapshot = tmp_path.parent / f"{tmp_path.name}-A"
    shutil.copytree(tmp_path, snapshot)
    trace = tmp_path.parent / f"{tmp_path.name}-trace"
    result = run_child(out, "B", exchange, {"KERAS_VIT_EXPORT_TRACE": str(trace)})
    assert result.returncode == 0, result.stderr
    points = trace.read_text().splitlines()
    # Staging writes (report last), then the commit's own steps: one per path, or one per object for a URL.
    assert points[2].endswith("writing report.json"), points
    if path == "exchange":  # renameat2(RENAME_EXCHANGE) was available, else this would name the two renames
        assert [p.split(" ", 1)[1] for p in points[3:]] == ["staged and flushed", "swapped; old set not yet deleted"]
    elif path == "two renames":
        assert [p.split(" ", 1)[1] for p in points[3:]] == [
            "staged and flushed",
            "old set moved aside",
            "new set in place; old set not yet deleted",
        ]
    else:
        assert sum("deleting" in p for p in points) == 5 and points[3].endswith("deleting report.json")
        assert points[-1].endswith("uploading report.json")
    # Every point from the commit on: the three before it only write into the staging directory, which is
    # never in view (test_export_killed_at_every_point_then_rerun kills the real exporter there).
    for k in range(4, len(points) + 1):
        shutil.rmtree(tmp_path)
        shutil.copytree(snapshot, tmp_path)
        result = run_child(out, "B", exchange, {"KERAS_VIT_EXPORT_KILL_AT": str(k)})
        assert result.returncode == -9, (points[k - 1], result.returncode, result.stderr[-2000:])
        seen = tree(out)
        if "report.json" in seen:  # a complete set, the old or the new one, exactly as its report lists
            listed = check_complete(out)
            assert listed in (expected("A"), expected("B")), points[k - 1]
        elif (
            not seen and path != "url"
        ):  # only between the two renames: the old set is beside `out`, and the rerun puts it back
            assert path == "two renames" and points[k - 1].endswith("old set moved aside"), points[k - 1]
        else:  # only on a URL, mid-commit: files of one run, never the two mixed
            assert path == "url", (points[k - 1], seen)
            assert any(seen.items() <= expected(name).items() for name in "AB"), (points[k - 1], seen)
        stage_and_commit(out, "B", exchange)  # the rerun
        assert check_complete(out) == expected("B"), points[k - 1]
        if path != "url":  # nothing left beside `out`: the killed run's staging or old set was cleaned up
            assert sorted(p.name for p in tmp_path.iterdir()) == ["export"], points[k - 1]
        else:  # nor in the temp dir: the rerun removed the killed run's staging, and its own
            assert not any(name.startswith(".export-staging-") for name in os.listdir(temp)), points[k - 1]


def test_a_url_staging_directory_is_removed_only_once_its_export_is_dead(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    alive = commit.staging_dir("file:///bucket/a")
    (alive / "model.onnx").write_bytes(b"x")
    dead = commit.staging_dir("file:///bucket/b")
    (dead / "model.onnx").write_bytes(b"y")
    # How a killed export leaves it: the kernel drops the lock with the process; the directory stays.
    os.close(commit._url_locks.pop(os.fspath(dead)))
    third = commit.staging_dir("file:///bucket/c")
    assert alive.is_dir() and (alive / "model.onnx").read_bytes() == b"x"  # held (by this process): kept
    assert not dead.exists() and not Path(f"{dead}.lock").exists()
    for staging in (alive, third):
        commit._remove_staging(staging)
    assert os.listdir(tmp_path) == []


def test_claim_puts_back_a_set_moved_aside(tmp_path):
    """Killed between the two renames: `out` is missing and the old set is beside it; the next export puts it
    back before anything else, and removes staging directories of dead attempts whatever PID they name."""
    out = tmp_path / "export"
    aside = tmp_path / ".export.old-999999999-abc"  # as exports before the lock named them
    aside.mkdir()
    (aside / "report.json").write_text("{}")
    (tmp_path / f".export.staging-{os.getpid()}-xyz").mkdir()  # this very PID: a container's restarted export
    (tmp_path / ".export.staging-0123abcd").mkdir()
    with commit.claim(out) as target:
        assert target == str(out)
        assert (out / "report.json").read_text() == "{}"
        assert sorted(p.name for p in tmp_path.iterdir()) == [".export.lock", "export"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


# --- The real exporter, killed at every point ------------------------------------------------------------------


@pytest.mark.slow  # five killed exports in subprocesses (~8 s each) and their reruns: ~60 s
@pytest.mark.process
def test_export_killed_at_every_point_then_rerun(tiny, tmp_path):
    root, _ = tiny
    out = tmp_path / "work" / "export"
    # No GPU check: it writes nothing and has no fault point (tests/export/test_gpu.py checks it).
    cli = [sys.executable, "-m", "export", str(root / "model.keras"), "--out", str(out), "--latency-runs", "1",
           "--gpu-check", "off"]  # fmt: skip
    # Set A: SavedModel + float32 TFLite (ONNX and OpenVINO commit the same way: more files, no new fault point).
    a_options = {
        "out": out,
        "formats": "saved_model,tflite",
        "quantize": "float32",
        "latency_runs": 1,
        "gpu_check": "off",
    }
    b_options = {**a_options, "formats": "tflite"}  # fewer: no SavedModel
    b_cli = [*cli, "--formats", "tflite", "--quantize", "float32"]
    export.export_path(root / "model.keras", **b_options)
    set_b = check_complete(out)
    export.export_path(root / "model.keras", **a_options)
    set_a = check_complete(out)
    snapshot = tmp_path / "A"
    shutil.copytree(out.parent, snapshot)

    trace = tmp_path / "trace"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(b_cli, check=False, env={**env, "KERAS_VIT_EXPORT_TRACE": str(trace)}, capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert check_complete(out) == set_b  # an uninterrupted run in another process writes the same bytes
    points = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]
    assert points == ["writing model_float32.tflite", "writing model_float32.json", "writing report.json",
                      "staged and flushed", "swapped; old set not yet deleted"]  # fmt: skip
    assert "saved_model/saved_model.pb" in set_a and "saved_model/saved_model.pb" not in set_b
    for k, point in enumerate(points, start=1):
        shutil.rmtree(out.parent)
        shutil.copytree(snapshot, out.parent)
        kill = {**env, "KERAS_VIT_EXPORT_KILL_AT": str(k)}
        result = subprocess.run(b_cli, check=False, env=kill, capture_output=True, text=True, timeout=600)
        assert result.returncode == -9, (point, result.stderr[-3000:])
        assert check_complete(out) == (set_b if point.startswith("swapped") else set_a), point
        export.export_path(root / "model.keras", **b_options)  # the rerun
        assert check_complete(out) == set_b, point
        assert sorted(p.name for p in out.parent.iterdir()) == ["export"], point


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_manifest_lists_every_file_with_its_checksum(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.bin").write_bytes(b"abc")
    (tmp_path / "report.json").write_text("{}")
    assert commit.manifest(tmp_path) == {
        "d/x.bin": {"bytes": 3, "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}
    }  # sha256("abc") from FIPS 180-2's test vectors
    np.testing.assert_equal(len(commit.manifest(tmp_path / "d")), 1)
