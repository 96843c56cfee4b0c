"""Export folders for the commit tests: two file sets staged and committed as the exporter does, and readers of what
a folder holds."""

import hashlib
import json
import os

from export import commit, kinds
from export.formats import owned_names
from keras_vit import files


def tree(folder):
    """{relative path with "/": sha256} of every file under a local directory or URL."""
    folder = os.fspath(folder)
    if not files.exists(folder):
        return {}
    return {
        files.relpath(p, folder).replace(os.sep, "/"): hashlib.sha256(files.read_bytes(p)).hexdigest()
        for p in files.walk(folder)
    }


def check_complete(folder):
    """Asserts `folder` holds exactly report.json and the files it lists, with the listed checksums; returns
    {name: sha256} of the listed files."""
    found = tree(folder)
    report = json.loads(files.read_text(files.join(folder, "report.json")))
    listed = {name: entry["sha256"] for name, entry in report["files"].items()}
    assert set(found) == set(listed) | {"report.json"}, (sorted(found), sorted(listed))
    assert {name: found[name] for name in listed} == listed
    for name, entry in report["files"].items():
        assert files.size(files.join(folder, *name.split("/"))) == entry["bytes"]
    return listed


# Two complete exports as the pipeline stages them: B has fewer files than A and different bytes where both
# have a file, so any mix of the two is visible.
SETS = {
    "A": {"saved_model/saved_model.pb": b"A graph", "saved_model/variables/variables.index": b"A index",
          "model_int8.tflite": b"A int8" * 50, "model_float32.tflite": b"A float32" * 50},
    "B": {"saved_model/saved_model.pb": b"B graph", "model_float32.tflite": b"B float32" * 50},
}  # fmt: skip


def stage_and_commit(out, name, exchange=True):
    """What export_model does around its artifacts: recover, check, stage (with the report last), commit."""
    commit.use_exchange = exchange
    with commit.claim(out) as target:
        commit.check_target(target, owned_names(kinds.KINDS))
        staging = commit.staging_dir(target)
        for rel, data in SETS[name].items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            commit.write_staged(staging / rel, data)
        report = {"set": name, "files": commit.manifest(staging)}
        commit.write_staged(staging / "report.json", json.dumps(report).encode())
        commit.commit(staging, target)


def expected(name):
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in SETS[name].items()}
