"""Lines of the export table that more than one kind prints (export/kinds/), worded once."""


def ops(entry):
    """The file's op counts, as read back from it."""
    return f"  ops ({sum(entry['ops'].values())}): {', '.join(f'{k} x{n}' for k, n in entry['ops'].items())}"


def interchange_runtime(entry, default_figures):
    """An ONNX or OpenVINO file's runtime; for OpenVINO also `default_figures`, the kind's words for its figures
    at the CPU plugin's default precision (not budgeted)."""
    if entry["format"] == "onnx":
        return f"  runtime onnxruntime {entry['runtime_version']}, opset {entry['opset']}"
    return (
        f"  runtime OpenVINO {entry['runtime_version']} on {entry['device']}, inference precision "
        f"{entry['inference_precision']}; its default here ({entry['default_precision']['inference_precision']}): "
        f"{default_figures} (not budgeted)"
    )


def fed(entry, project_figures):
    """A single-output TFLite file's two feedings: how an app feeds it, and `project_figures`, the kind's words for its
    figures with the project's preprocessing."""
    return (f"  fed as an app feeds it ({entry['fed_as']}): figures above; with the project's preprocessing: "
            f"{project_figures}")  # fmt: skip
