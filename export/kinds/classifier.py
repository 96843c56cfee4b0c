"""A classifier: logits per image, judged against the Keras logits (export/verify.py) by their difference relative to
the logit scale, top-1 agreement and accuracy, with a budget per file and mode; its files are `model_*` and it is
exported in every format that writes classifiers."""

from keras_vit import files

from .. import gpu, table_lines
from ..errors import ExportError
from ..io import check_labels
from ..verify import BUDGETS, check_budget, compare

NAME = "classifier"
TAG = {}  # what its report and entries say of the kind: nothing, as before kinds were named
TITLE = ""
STEM = "model"
# max|diff| is against the Keras logits, or against their softmax for an artifact that outputs probabilities.
HEADER = ("output", "max|diff|", "top1 agree", "top1 acc")
LABELLED = True  # judged on the verification set's labels where it has them
# Why a classifier's report has no accuracy, by where its verification set came from.
# An ONNX or OpenVINO file's checks beyond its figures (export/portable.py: `check`): the figure that sums up its runs
# at other batch sizes and which of them is the worst, the figures stated at a second image size and at OpenVINO's
# default precision, the documents the file must carry in words, and those the entry repeats.
INTERCHANGE = {
    "summary": ("max_rel_logit_diff", max),
    "size_figures": ("max_rel_logit_diff", "max_abs_logit_diff", "top1_agreement", "logit_scale"),
    "precision_figures": ("max_rel_logit_diff", "max_abs_logit_diff", "top1_agreement"),
    "contract": "the labels and input contract",
    "stated": (),
}
NO_ACCURACY = {
    "representative": "accuracy unavailable: no labelled held-out set; budgets use top-1 disagreement with Keras",
    "random": "accuracy unavailable: verified on random images; budgets use top-1 disagreement with Keras",
}

__all__ = ["BUDGETS", "check_budget", "compare", "matches"]


def matches(model):
    """Any model the other kinds do not take: logits per image."""
    return True


def plan(source, options, model, offered):
    """(labels, TFLite modes, notes) of a classifier's export (in any of the `offered` formats); raises for a model
    without (batch, classes) logits."""
    modes, note = options.modes(source.has_representative)
    if len(model.output_shape) != 2:
        raise ExportError(f"Expected a classifier with logits shaped (batch, classes); output is {model.output_shape}.")
    num_classes = int(model.output_shape[-1])
    labels = source.labels if source.labels is not None else getattr(model, "class_names", None)
    labels = check_labels(labels, num_classes) if labels is not None else [str(i) for i in range(num_classes)]
    return labels, modes, [note] if note else []


def describe_model(plan):
    return {"classes": len(plan.labels), "parameters": int(plan.model.count_params())}


def report_fields(plan, options):
    return {"tflite_output": options.tflite_output if plan.modes else None, "labels": plan.labels}


def keras_fields(reference, truth, source):
    accuracy = None if truth is None else float((reference["logits"].argmax(-1) == truth).mean())
    return {"top1_accuracy": accuracy,
            "file_bytes": files.size(source.name) if source.name and files.isfile(source.name) else None}  # fmt: skip


def entry_figures(found, plan):
    return found


def output_names(model):
    """A classifier's one output: its logits."""
    return ["logits"]


def meanings(model):
    """{name: what it holds} (export/description.py)."""
    return {"logits": "logits"}


def figures(outputs, reference, truth=None):
    """`compare` on named outputs: the file's one output (`logits` or `probabilities`) against the Keras `logits`."""
    ((name, values),) = outputs.items()
    return compare(values, reference["logits"], truth, name)


def keras_cells(report):
    return ("logits", "-", "-", _pct(report["keras"].get("top1_accuracy")))


def cells(a):
    return (_output(a), f"{_max_diff(a):.2e}", _pct(a["top1_agreement"]), _pct(a["top1_accuracy"]))


def verified(report):
    v = report["verification"]
    return (
        f"Verified on {v['images']} images from {v['set']} ({'labelled' if v['labelled'] else 'no labels'}); "
        f"latency: median of {report['latency_runs']} batch-1 runs after {report['latency_warmup']} warm-up."
    )


def preamble(report):
    return []


def _pct(x):
    return "-" if x is None else f"{100 * x:.2f}%"


def _output(figures):
    return "probs" if figures.get("output") == "probabilities" else "logits"


def _max_diff(figures):
    return figures["max_abs_probability_diff" if figures.get("output") == "probabilities" else "max_abs_logit_diff"]


def lines(a):
    """A classifier artifact's lines below its budget line: what its format adds."""
    out = []
    if "serving_default_max_abs_logit_diff" in a:
        served = a["serving_default_max_abs_logit_diff"]
        out.append(f"  serving_default on raw uint8 images: max |dlogit| {served:.2e}")
    if a["format"] == "tflite":
        project = a["project_preprocessing"]
        agree, accuracy = _pct(project["top1_agreement"]), _pct(project["top1_accuracy"])
        out.append(table_lines.fed(a, f"max|diff| {_max_diff(project):.2e}, top1 agree {agree}, top1 acc {accuracy}"))
        meta = a.get("metadata")
        out.append(
            "  metadata: none" if not meta else
            f"  metadata: {meta['name']!r} v{meta['version']}, input normalisation mean {meta['input']['mean']} "
            f"std {meta['input']['std']}, output {meta['output']['name']}, "
            f"labels in {meta['output']['labels_file']}"
        )  # fmt: skip
        out.append(table_lines.ops(a))
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
    default = entry.get("default_precision") or {}
    figures = (f"max rel diff {default.get('max_rel_logit_diff', 0):.2e}, "
               f"top1 agree {100 * default.get('top1_agreement', 0):.2f}%")  # fmt: skip
    lines += [table_lines.interchange_runtime(entry, figures), table_lines.ops(entry)]
    lines.append(f"  labels and input contract in the file: {'yes' if entry['contract_in_file'] else 'NO'}")
    return lines
