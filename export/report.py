"""The export report: `report.json` written last into the staging directory, then the commit; its printed table
is export/tables.py's."""

from keras_vit import files

from . import commit
from .errors import VerificationError
from .tables import format_table

__all__ = ["format_table", "publish", "write_report"]


def publish(report, staging, target, out):
    """The last stage of every export: refuse a failed report, else list the staged files in it, write it last
    and commit the staging directory to `target` (`out` as `commit.claim` resolved it). Returns the report.

    Raises:
        VerificationError: an artifact missed its budget (`.report` holds the figures); nothing was committed.
    """
    if not report["passed"]:
        error = VerificationError(
            "Export verification failed; nothing in the output directory was changed.\n" + format_table(report)
        )
        error.report = report
        raise error
    # What the directory holds besides the report, each file with its size and checksum: after the commit `out`
    # holds exactly these files and report.json.
    report["files"] = commit.manifest(staging)
    commit.write_staged(staging / commit.REPORT, files.json_bytes(report))
    commit.commit(staging, target)
    report["report_path"] = files.join(out, commit.REPORT)
    return report


def write_report(report, path):
    """Writes `report` as JSON, atomically."""
    return files.atomic_write_json(path, report)
