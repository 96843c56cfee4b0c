"""The export report: `report.json` and the table printed after an export."""

from keras_vit import files

from . import commit, gpu, portable
from .errors import VerificationError


def _size(n):
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _pct(x):
    return "-" if x is None else f"{100 * x:.2f}%"


def _output(figures):
    return "probs" if figures.get("output") == "probabilities" else "logits"


def _max_diff(figures):
    return figures["max_abs_probability_diff" if figures.get("output") == "probabilities" else "max_abs_logit_diff"]


def format_table(report):
    """A readable table, one row per artifact (plus the Keras reference), and each artifact's op notes."""
    if report.get("kind") == "embedder":
        from .embedder import format_table as embedder_table

        return embedder_table(report)
    if report.get("kind") == "feature_maps":
        from .feature_maps import format_table as feature_maps_table

        return feature_maps_table(report)
    # max|diff| is against the Keras logits, or against their softmax for an artifact that outputs probabilities.
    header = ("artifact", "size", "output", "max|diff|", "top1 agree", "top1 acc", "latency ms", "threads", "status")
    keras = report["keras"]
    rows = [("keras (reference)", _size(keras.get("file_bytes")), "logits", "-", "-", _pct(keras.get("top1_accuracy")),
             f"{keras['latency_ms']:.3f}", str(keras["threads"]), "")]  # fmt: skip
    for a in report["artifacts"]:
        rows.append((
            a["name"], _size(a["file_bytes"]), _output(a), f"{_max_diff(a):.2e}", _pct(a["top1_agreement"]),
            _pct(a["top1_accuracy"]), f"{a['latency_ms']:.3f}", str(a["threads"]),
            "ok" if a["passed"] else "FAIL",
        ))  # fmt: skip
    v = report["verification"]
    out = [
        f"Export of {report['source']}  ->  {report['out']}",
        f"Verified on {v['images']} images from {v['set']} ({'labelled' if v['labelled'] else 'no labels'}); "
        f"latency: median of {report['latency_runs']} batch-1 runs after {report['latency_warmup']} warm-up.",
        "",
        *table(header, rows),
        "",
    ]
    for a in report["artifacts"]:
        out.extend(_artifact_lines(a))
    for note in report.get("notes", []):
        out.append(f"note: {note}")
    out.append(f"status: {'PASSED' if report['passed'] else 'FAILED'}")
    return "\n".join(out)


def table(header, rows):
    """The lines of a plain-text table: the header, a rule, the rows, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()

    return [line(header), line(["-" * w for w in widths]), *[line(r) for r in rows]]


def _artifact_lines(a):
    """A classifier artifact's lines below the table: its budget and verdict, then what its format adds."""
    budget = ", ".join(f"{k} {v:g}" for k, v in a["budget"].items())
    if any("_rel_" in k for k in a["budget"]):  # what the relative limits are relative to
        budget += f" (logit scale {a['logit_scale']:.3g})"
    out = [f"{a['name']}: budget {budget}" + ("" if a["passed"] else f"; FAILED: {'; '.join(a['failures'])}")]
    if "serving_default_max_abs_logit_diff" in a:
        served = a["serving_default_max_abs_logit_diff"]
        out.append(f"  serving_default on raw uint8 images: max |dlogit| {served:.2e}")
    if a["format"] == "tflite":
        project = a["project_preprocessing"]
        out.append(
            f"  fed as an app feeds it ({a['fed_as']}): figures above; with the project's preprocessing: "
            f"max|diff| {_max_diff(project):.2e}, top1 agree {_pct(project['top1_agreement'])}, "
            f"top1 acc {_pct(project['top1_accuracy'])}"
        )
        meta = a.get("metadata")
        out.append(
            "  metadata: none" if not meta else
            f"  metadata: {meta['name']!r} v{meta['version']}, input normalisation mean {meta['input']['mean']} "
            f"std {meta['input']['std']}, output {meta['output']['name']}, "
            f"labels in {meta['output']['labels_file']}"
        )  # fmt: skip
        ops = ", ".join(f"{k} x{n}" for k, n in a["ops"].items())
        out.append(f"  ops ({sum(a['ops'].values())}): {ops}")
        out.append(f"  non-builtin ops: {', '.join(a['non_builtin_ops']) or 'none'}")
        if "gpu" in a:
            out.append(gpu.describe(a["gpu"]))
    if a["format"] in ("onnx", "openvino"):
        out.extend(portable.describe(a))
    return out


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
