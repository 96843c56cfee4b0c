"""Each benchmark phase records the commit it measured (benchmarks/provenance.py), and the tables print it."""

import subprocess

import pytest

from benchmarks import provenance, readme, report, summary
from tests.support.reports import fake_report


def _git(root, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=root, check=True,
                   capture_output=True)  # fmt: skip


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # never the repository around tmp_path
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "model.py").write_text("A = 1\n")
    _git(root, "add", "model.py")
    _git(root, "commit", "-q", "-m", "first")
    return root


def test_a_clean_checkout_gives_its_head_and_a_changed_tracked_file_makes_it_dirty(checkout):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    assert len(head) == 40
    assert provenance.source_commit(checkout) == {"commit": head, "dirty": False}
    (checkout / "notes.txt").write_text("untracked: not the code that ran\n")
    assert provenance.source_commit(checkout) == {"commit": head, "dirty": False}
    (checkout / "model.py").write_text("A = 2\n")
    assert provenance.source_commit(checkout) == {"commit": head, "dirty": True}
    assert provenance.label(provenance.source_commit(checkout)) == head[:12] + "+dirty"


def test_outside_a_checkout_or_without_git_the_commit_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert provenance.source_commit(tmp_path) == {"commit": "unknown", "dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git to run
    assert provenance.source_commit(tmp_path) == {"commit": "unknown", "dirty": None}
    assert provenance.label(provenance.UNKNOWN) == "unknown"


def test_the_tables_print_one_commit_or_each_phases():
    rep = fake_report([{"train/float32": {"keras-vit": 30.0, "keras-hub": 20.0}}])
    summary.summarise(rep)
    rep["implementations"] = {"keras-vit": {"available": True}, "keras-hub": {"available": True}}
    rep.update(settings={"variant": "Ti/16", "image_size": 224, "rounds": 1, "threads": 2}, wall_seconds=60.0,
               machine={"cpu_model": "Test CPU", "usable_cpus": 2, "threads": 2, "isa_flags": [],
                        "loadavg_start": [1.0], "loadavg_end": [1.0]})  # fmt: skip
    a, b = "a" * 40, "b" * 40
    rep["commits"] = {"train/float32": {"commit": a, "dirty": False}, "infer": {"commit": a, "dirty": False}}
    assert f"commit measured: {'a' * 12}\n" in report.table(rep)
    assert f"at commit {'a' * 12}, on Test CPU" in readme.render(rep)
    rep["commits"]["infer"] = {"commit": b, "dirty": True}  # a commit landed between two phases
    line = f"train/float32 {'a' * 12}, infer {'b' * 12}+dirty"
    assert f"commit measured: {line}\n" in report.table(rep)
    assert f"at commit {line}, on" in readme.render(rep)
    del rep["commits"]  # a report from before the field: said, not guessed
    assert "commit measured: unknown" in report.table(rep)
