"""The table printed after every export, from the report dict alone: a row per artifact with its kind's columns, then
each artifact's budget, verdict and its format's lines, the notes and the status."""

from . import kinds
from .formats import FORMATS


def size(n):
    """A byte count as the tables print it."""
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def format_table(report):
    """A readable table, one row per artifact (plus the Keras reference), and each artifact's budget and notes."""
    kind = kinds.named(report["kind"])
    keras = report["keras"]
    header = ("artifact", "size", *kind.HEADER, "latency ms", "threads", "status")
    rows = [("keras (reference)", size(keras.get("file_bytes")), *kind.keras_cells(report),
             f"{keras['latency_ms']:.3f}", str(keras["threads"]), "")]  # fmt: skip
    for a in report["artifacts"]:
        rows.append((a["name"], size(a["file_bytes"]), *kind.cells(a), f"{a['latency_ms']:.3f}", str(a["threads"]),
                     "ok" if a["passed"] else "FAIL"))  # fmt: skip
    out = [f"Export of {report['source']}{kind.TITLE}  ->  {report['out']}", kind.verified(report), "",
           *table(header, rows), "", *kind.preamble(report)]  # fmt: skip
    for a in report["artifacts"]:
        # A NaFlex export's entries carry their own lines (export/naflex/exporter.py); the formats word the others'.
        out += [_budget_line(a), *(a["lines"] if "lines" in a else FORMATS[a["format"]].lines(a, kind))]
    out += [f"note: {note}" for note in report.get("notes", [])]
    out.append(f"status: {'PASSED' if report['passed'] else 'FAILED'}")
    return "\n".join(out)


def _budget_line(a):
    budget = ", ".join(f"{k} {v:g}" for k, v in a["budget"].items())
    if "logit_scale" in a and any("_rel_" in k for k in a["budget"]):  # what a classifier's limits are relative to
        budget += f" (logit scale {a['logit_scale']:.3g})"
    return f"{a['name']}: budget {budget}" + ("" if a["passed"] else f"; FAILED: {'; '.join(a['failures'])}")


def table(header, rows):
    """The lines of a plain-text table: the header, a rule, the rows, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()

    return [line(header), line(["-" * w for w in widths]), *[line(r) for r in rows]]
