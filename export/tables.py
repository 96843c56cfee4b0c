"""The tables printed after an export: one per kind of model, a row per artifact (plus the Keras reference), then
each artifact's budget, verdict and what its format adds. They read the report dict only."""

from . import gpu


def size(n):
    """A byte count as the tables print it."""
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
        return _embedder_table(report)
    if report.get("kind") == "feature_maps":
        return _feature_maps_table(report)
    # max|diff| is against the Keras logits, or against their softmax for an artifact that outputs probabilities.
    header = ("artifact", "size", "output", "max|diff|", "top1 agree", "top1 acc", "latency ms", "threads", "status")
    keras = report["keras"]
    rows = [("keras (reference)", size(keras.get("file_bytes")), "logits", "-", "-", _pct(keras.get("top1_accuracy")),
             f"{keras['latency_ms']:.3f}", str(keras["threads"]), "")]  # fmt: skip
    for a in report["artifacts"]:
        rows.append((
            a["name"], size(a["file_bytes"]), _output(a), f"{_max_diff(a):.2e}", _pct(a["top1_agreement"]),
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
        out.extend(_interchange_lines(a))
    return out


def _interchange_lines(entry):
    """The report table's lines for an ONNX or OpenVINO entry."""
    lines = []
    batch = entry.get("dynamic_batch")
    lines.append(
        f"  input {entry['input_shape']} float32 NHWC in [-1, 1]; dynamic batch: "
        + (f"batches {batch['batches']} max rel diff {batch['max_rel_logit_diff']:.2e}" if batch else "no")
    )
    size = entry.get("dynamic_image_size")
    if size:
        lines.append(
            f"  dynamic image size: {size['size'][0]}x{size['size'][1]} on {size['images']} images, max rel diff "
            f"{size['max_rel_logit_diff']:.2e}, top1 agree {100 * size['top1_agreement']:.2f}%"
        )
    if entry["format"] == "onnx":
        lines.append(f"  runtime onnxruntime {entry['runtime_version']}, opset {entry['opset']}")
    else:
        default = entry["default_precision"]
        lines.append(
            f"  runtime OpenVINO {entry['runtime_version']} on {entry['device']}, inference precision "
            f"{entry['inference_precision']}; its default here ({default['inference_precision']}): max rel diff "
            f"{default['max_rel_logit_diff']:.2e}, top1 agree {100 * default['top1_agreement']:.2f}% (not budgeted)"
        )
    ops = ", ".join(f"{k} x{n}" for k, n in entry["ops"].items())
    lines.append(f"  ops ({sum(entry['ops'].values())}): {ops}")
    lines.append(f"  labels and input contract in the file: {'yes' if entry['contract_in_file'] else 'NO'}")
    return lines


def _embedder_table(report):
    """The printed summary of an embedder export."""
    header = ("artifact", "size", "dims", "min cos", "mean cos", "max|diff|", "norm diff", "latency ms", "threads",
              "status")  # fmt: skip
    keras = report["keras"]
    rows = [("keras (reference)", "-", str(report["model"]["dimensions"]), "-", "-", "-", "-",
             f"{keras['latency_ms']:.3f}", str(keras["threads"]), "")]  # fmt: skip
    for a in report["artifacts"]:
        rows.append((a["name"], size(a["file_bytes"]), str(a["dimensions"]), f"{a['min_cosine']:.6f}",
                     f"{a['mean_cosine']:.6f}", f"{a['max_abs_diff']:.2e}", f"{a['max_rel_norm_diff']:.2e}",
                     f"{a['latency_ms']:.3f}", str(a["threads"]), "ok" if a["passed"] else "FAIL"))  # fmt: skip
    v = report["verification"]
    out = [f"Export of {report['source']} (image embedder)  ->  {report['out']}",
           f"Verified on {v['images']} images from {v['set']}: cosine similarity of each image's vector with Keras'.",
           "", *table(header, rows), ""]  # fmt: skip
    for a in report["artifacts"]:
        budget = ", ".join(f"{k} {v:g}" for k, v in a["budget"].items())
        out.append(f"{a['name']}: budget {budget}" + ("" if a["passed"] else f"; FAILED: {'; '.join(a['failures'])}"))
        if a["format"] != "tflite":
            out.extend(_embedder_interchange_lines(a))
            continue
        out.append(f"  metadata: {a['metadata']['description']}")
        out.append(f"  ops ({sum(a['ops'].values())}): {', '.join(f'{k} x{n}' for k, n in a['ops'].items())}")
        out.append(gpu.describe(a["gpu"]))
    out += [f"note: {note}" for note in report.get("notes", [])]
    out.append(f"status: {'PASSED' if report['passed'] else 'FAILED'}")
    return "\n".join(out)


def _embedder_interchange_lines(entry):
    """The report table's lines for an ONNX or OpenVINO embedder."""
    batch, size = entry.get("dynamic_batch"), entry.get("dynamic_image_size")
    norm = "L2-normalised" if entry["l2_normalized"] else "not L2-normalised"
    lines = [
        f"  input {entry['input_shape']} float32 NHWC in [-1, 1]; output `embedding`: {entry['dimensions']} float32 "
        f"values, {norm}; dynamic batch: "
        + (f"batches {batch['batches']} min cosine {batch['min_cosine']:.6f}" if batch else "no")
    ]
    if size:
        lines.append(f"  dynamic image size: {size['size'][0]}x{size['size'][1]} on {size['images']} images, min "
                     f"cosine {size['min_cosine']:.6f}")  # fmt: skip
    if entry["format"] == "onnx":
        lines.append(f"  runtime onnxruntime {entry['runtime_version']}, opset {entry['opset']}")
    else:
        default = entry["default_precision"]
        lines.append(
            f"  runtime OpenVINO {entry['runtime_version']} on {entry['device']}, inference precision "
            f"{entry['inference_precision']}; its default here ({default['inference_precision']}): min cosine "
            f"{default['min_cosine']:.6f} (not budgeted)"
        )
    lines.append(f"  ops ({sum(entry['ops'].values())}): {', '.join(f'{k} x{n}' for k, n in entry['ops'].items())}")
    lines.append(f"  feature-vector contract in the file: {'yes' if entry['contract_in_file'] else 'NO'}")
    return lines


def _feature_maps_table(report):
    """The printed summary of a feature-map export."""
    header = ("artifact", "size", "outputs", "min cos", "max rel diff", "latency ms", "threads", "status")
    keras = report["keras"]
    count = str(len(report["model"]["outputs"]))
    rows = [("keras (reference)", "-", count, "-", "-", f"{keras['latency_ms']:.3f}", str(keras["threads"]), "")]
    for a in report["artifacts"]:
        worst = "-" if a["min_cosine"] is None else f"{a['min_cosine']:.6f}"
        rel = "-" if a["max_rel_diff"] is None else f"{a['max_rel_diff']:.2e}"
        rows.append((a["name"], size(a["file_bytes"]), str(len(a["outputs"])), worst, rel, f"{a['latency_ms']:.3f}",
                     str(a["threads"]), "ok" if a["passed"] else "FAIL"))  # fmt: skip
    v = report["verification"]
    lines = [f"Export of {report['source']} (feature maps)  ->  {report['out']}",
             f"Verified on {v['images']} images from {v['set']}: every output, by name, against Keras'.",
             "", *table(header, rows), ""]  # fmt: skip
    lines += [f"output {name}: {what}" for name, what in report["model"]["outputs"].items()]
    for a in report["artifacts"]:
        budget = ", ".join(f"{k} {val:g}" for k, val in a["budget"].items())
        lines.append(f"{a['name']}: budget {budget}" + ("" if a["passed"] else f"; FAILED: {'; '.join(a['failures'])}"))
    lines += [f"note: {note}" for note in report.get("notes", [])]
    lines.append(f"status: {'PASSED' if report['passed'] else 'FAILED'}")
    return "\n".join(lines)
