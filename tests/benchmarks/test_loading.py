"""The loading benchmark (benchmarks/loading.py): its table and targets from measured rounds, its check that a model
really holds the file's weights, and a one-round run of the tiny model that gives every row and leaves no files.

The timm and transformers rows need torch (an optional benchmark extra); where it is absent they are skipped,
saying so, and everything else is still run.
"""

import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import loading
from tests.conftest import ROOT

NUMBER = r"-?\d+\.\d+ \(-?\d+\.\d+--?\d+\.\d+\)"  # median (min-max); a tiny model's RSS change can be < 0


def _runs(*pairs):
    return [{"seconds": s, "peak_kib": p * 1024} for s, p in pairs]


def test_rows_give_the_median_and_range_of_the_rounds_against_the_weights_size():
    results = {("timm", "keras-vit"): _runs((3.0, 120.0), (1.0, 110.0), (2.0, 140.0))}
    (row,) = loading.rows("B/16", results, weight_bytes=100 * 2**20)
    assert row == "| B/16 | timm folder | keras_vit.from_pretrained | 2.000 (1.000-3.000) | 120.0 (110.0-140.0) | " + (
        "1.20 (1.10-1.40) |"
    )


def test_targets_compare_with_timm_round_by_round():
    # Round 2 is slow for both (another job held the cores): per round keras-vit is faster in rounds 1 and 2.
    results = {
        ("timm", "keras-vit"): _runs((1.0, 125.0), (4.0, 129.0), (3.0, 131.0)),
        ("timm", "timm"): _runs((2.0, 200.0), (8.0, 200.0), (2.0, 200.0)),
        ("npz", "keras-vit"): _runs((1.0, 100.0), (1.0, 100.0), (1.0, 100.0)),
    }
    lines = loading.targets("B/16", results, weight_bytes=100 * 2**20)
    assert lines[0].endswith("per round: 0.50 (0.50-1.50); no slower in 2 of 3 rounds")
    assert "(npz) at most 1.3x the weights in 3 of 3 rounds (highest 1.00x)" in lines[1]
    assert "(timm folder) at most 1.3x the weights in 2 of 3 rounds (highest 1.31x)" in lines[2]
    assert len(lines) == 3  # no transformers row measured: no line for it


def test_missing_libraries_name_what_is_absent(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "torch" else real(name))
    missing = loading.missing_libraries()
    assert sorted(missing) == ["timm", "transformers"]
    assert missing["timm"].startswith("torch") and "not installed in this Python" in missing["timm"]


def test_the_weights_check_fails_on_weights_that_are_not_the_files(tmp_path):
    path = tmp_path / "weights.npz"
    posemb, bias = np.arange(12, dtype="float32").reshape(1, 3, 4), np.ones(5, "float32")
    np.savez(path, **{"Transformer/posembed_input/pos_embedding": posemb, "head/bias": bias})
    loading._same("npz", str(path), (posemb, bias))
    with pytest.raises(AssertionError, match="npz head/bias"):
        loading._same("npz", str(path), (posemb, np.zeros(5, "float32")))  # a head left as initialised


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One round of the benchmark on the tiny model, its temporary files under a folder of this test's own."""
    temp = tmp_path_factory.mktemp("loading-temp")
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.loading", "--variants", "testing", "--rounds", "1"],
        capture_output=True, text=True, cwd=ROOT, timeout=1200,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(temp)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines(), temp


def _row(lines, file, loader):
    pattern = rf"^\| testing \| {re.escape(file)} \| {re.escape(loader)} \| {NUMBER} \| {NUMBER} \| {NUMBER} \|$"
    found = [line for line in lines if re.match(pattern, line)]
    assert len(found) == 1, (file, loader, lines)
    return found[0]


@pytest.mark.slow  # one fresh process per row, each importing Keras: ~60-120 s on 2 cores
def test_the_tiny_run_gives_every_keras_vit_row_and_removes_its_files(tiny_run):
    lines, temp = tiny_run
    assert lines[0] == "1 interleaved rounds, a fresh process per load; median (min-max)"
    for file in ("npz", "timm folder"):
        for loader in ("read", "read, previous way"):
            _row(lines, file, loader)
    for file in ("npz", "timm folder", "transformers folder"):
        _row(lines, file, "keras_vit.from_pretrained")
    assert "testing: weights 0.2 MiB (float32)" in lines
    assert any(line.startswith("testing: peak RSS of keras_vit.from_pretrained (npz) at most 1.3x") for line in lines)
    assert not [name for name in os.listdir(temp) if name.startswith("keras-vit-loading-")]  # the weights are gone


@pytest.mark.slow
def test_the_tiny_run_gives_the_timm_and_transformers_rows(tiny_run):
    lines, _ = tiny_run
    if importlib.util.find_spec("torch") is None:
        for loader in ("timm.create_model", "ViTForImageClassification.from_pretrained"):
            (line,) = [s for s in lines if s.startswith(f"not measured: {loader} (torch")]
            assert line.endswith("not installed in this Python; see benchmarks/requirements.txt)"), line
        rows = [s for s in lines if s.startswith("| testing |")]
        assert not [s for s in rows if "timm.create_model" in s or "ViTForImageClassification" in s]
        pytest.skip("torch is an optional benchmark extra (benchmarks/requirements.txt): timm and transformers rows")
    _row(lines, "timm folder", "timm.create_model")
    _row(lines, "transformers folder", "ViTForImageClassification.from_pretrained")
    assert any(re.match(rf"testing: seconds, .* per round: {NUMBER}; no slower in [01] of 1 rounds$", s) for s in lines)
