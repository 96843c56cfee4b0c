"""The commit a benchmark phase measured: git's HEAD of the checkout its workers import, and whether tracked files
differ from it, so that a regression in the table can be traced to the code that ran."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNKNOWN = {"commit": "unknown", "dirty": None}
SHORT = 12  # characters of the hash in printed lines


def _git(root, *args):
    result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    return result.stdout.strip() if result.returncode == 0 else None


def source_commit(root=ROOT):
    """{"commit": HEAD's hash, "dirty": tracked files changed}; UNKNOWN outside a git checkout or without git."""
    try:
        head = _git(root, "rev-parse", "HEAD")
        status = _git(root, "status", "--porcelain", "--untracked-files=no") if head else None
    except (OSError, subprocess.TimeoutExpired):
        return dict(UNKNOWN)
    if head is None or status is None:
        return dict(UNKNOWN)
    return {"commit": head, "dirty": bool(status)}


def label(record):
    """`3a19853d5c1e`, `3a19853d5c1e+dirty` (uncommitted changes to tracked files) or `unknown`."""
    if record.get("commit", "unknown") == "unknown":
        return "unknown"
    return record["commit"][:SHORT] + ("+dirty" if record.get("dirty") else "")


def describe(commits):
    """One line for {phase: record}: the label once when every phase ran the same code, else each phase's."""
    labels = {phase: label(record) for phase, record in commits.items()}
    if not labels:
        return "unknown"
    if len(set(labels.values())) == 1:
        return next(iter(labels.values()))
    return ", ".join(f"{phase} {text}" for phase, text in labels.items())
