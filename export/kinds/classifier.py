"""A classifier: logits per image, judged against the Keras logits by their difference relative to the logit scale,
top-1 agreement and accuracy, with a budget per format and mode (`BUDGETS`, `compare`, `check_budget`)."""

import numpy as np

from keras_vit import files
from keras_vit.labels import softmax

from ..errors import ExportError
from ..io import check_labels

NAME = "classifier"
TITLE = ""
STEM = "model"
# max|diff| is against the Keras logits, or against their softmax for an artifact that outputs probabilities.
HEADER = ("output", "max|diff|", "top1 agree", "top1 acc")
LABELLED = True  # judged on the verification set's labels where it has them
OPEN_BATCH = True  # its files may leave the batch open (--dynamic-batch)
INTEGER_IO = True  # its full-integer files may take and give uint8 (--int8-io uint8)
# An ONNX or OpenVINO file's checks beyond its figures (export/interchange/portable.py: `check`): the figure that
# sums up its runs at other batch sizes and the worse way, the figures stated at a second image size and at
# OpenVINO's default precision, the documents the file must carry in words, and those the entry repeats.
CHECKS = {
    "summary": ("max_rel_logit_diff", max),
    "size_figures": ("max_rel_logit_diff", "max_abs_logit_diff", "top1_agreement", "logit_scale"),
    "precision_figures": ("max_rel_logit_diff", "max_abs_logit_diff", "top1_agreement"),
    "contract": "the labels and input contract",
    "stated": (),
}
# Why a classifier's report has no accuracy, by where its verification set came from.
NO_ACCURACY = {
    "representative": "accuracy unavailable: no labelled held-out set; budgets use top-1 disagreement with Keras",
    "random": "accuracy unavailable: verified on random images; budgets use top-1 disagreement with Keras",
}


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


def words(f):
    """Figures of `compare` (or any of them) in a few words, for the lines of the export table."""
    out = []
    if "max_rel_logit_diff" in f or "max_rel_probability_diff" in f:
        out.append(f"max rel diff {f.get('max_rel_logit_diff', f.get('max_rel_probability_diff')):.2e}")
    if "top1_agreement" in f:
        out.append(f"top1 agree {_pct(f['top1_agreement'])}")
    if f.get("top1_accuracy") is not None:
        out.append(f"top1 acc {_pct(f['top1_accuracy'])}")
    return ", ".join(out)


# The budget each artifact must meet. Output differences are max |artifact - keras| over the verification set,
# divided by the logit scale: max(1, max |keras logit|) on that set. Float error grows with the size of the
# values computed, so an absolute limit that suits a small model's logits fails a large model whose logits run
# to tens; relative to the scale the same limit holds for both (and equals the absolute one for logits within
# [-1, 1]). For an artifact that outputs probabilities (TFLite's default) the difference is taken against the
# softmax of the Keras logits and divided by the same logit scale: the softmax changes no output by more than
# half the largest change of its inputs (its Jacobian's infinity norm is max 2p(1 - p) <= 1/2), so a logit error
# within the budget stays within it after the softmax.
# Accuracy drops are in percentage points of top-1 accuracy on the labelled held-out set (or, with no labels,
# of disagreement with the Keras model's top-1). Top-1 agreement is the fraction of images whose top-1 class
# equals the Keras model's: accuracy alone cannot see a quantised model that trades right answers for wrong
# ones on different images. One flipped image is always allowed where it would otherwise decide alone: on an
# unlabelled set (often random images, which sit near class boundaries) the drop limit is at least 100 / N
# points, and on any set the agreement limit is at most 1 - 1 / N.
BUDGETS = {
    "saved_model": {"max_rel_logit_diff": 1e-4},
    "float32": {"max_rel_logit_diff": 1e-4},
    # float16 weights: logits within 1% of the logits' own scale, at most half a point of accuracy.
    "float16": {"max_rel_logit_diff": 1e-2, "max_accuracy_drop": 0.5, "min_top1_agreement": 0.99},
    "dynamic_int8": {"max_accuracy_drop": 1.0, "min_top1_agreement": 0.97},
    "int8": {"max_accuracy_drop": 1.0, "min_top1_agreement": 0.97},
    "int8_matmul": {"max_accuracy_drop": 1.0, "min_top1_agreement": 0.97},
    "int8_int16": {"max_accuracy_drop": 1.0, "min_top1_agreement": 0.97},
    "int4_weights": {"max_accuracy_drop": 1.0, "min_top1_agreement": 0.97},
}


def compare(outputs, reference, labels=None, output="logits"):
    """Agreement figures of an artifact's `outputs` against the Keras logits `reference` (both (N, classes)).

    With `output="probabilities"` the outputs are compared with softmax(reference), and the difference figures
    are named `max_abs_probability_diff` / `max_rel_probability_diff`.
    """
    outputs, reference = np.asarray(outputs, np.float64), np.asarray(reference, np.float64)
    if outputs.shape != reference.shape:
        raise ValueError(f"Shapes differ: artifact {outputs.shape} vs keras {reference.shape}.")
    scale = max(1.0, float(np.abs(reference).max())) if reference.size else 1.0  # of the logits, before any softmax
    if output == "probabilities":
        reference = softmax(reference)
    elif output != "logits":
        raise ValueError(f"output must be 'logits' or 'probabilities'. Received: {output!r}")
    word = "logit" if output == "logits" else "probability"
    diff = np.abs(outputs - reference)
    top1, ref_top1 = outputs.argmax(-1), reference.argmax(-1)
    result = {
        "images": len(outputs),
        "output": output,
        "logit_scale": scale,
        f"max_abs_{word}_diff": float(diff.max()),
        f"max_rel_{word}_diff": float(diff.max() / scale),
        "top1_agreement": float((top1 == ref_top1).mean()),
        "top1_accuracy": None,
        "keras_top1_accuracy": None,
    }
    if labels is not None:
        result["top1_accuracy"] = float((top1 == labels).mean())
        result["keras_top1_accuracy"] = float((ref_top1 == labels).mean())
        result["accuracy_drop_points"] = 100.0 * (result["keras_top1_accuracy"] - result["top1_accuracy"])
    else:
        # From the count: 100 * (1 - 11/12) rounds above 100 / 12, the one flipped image check_budget allows.
        result["accuracy_drop_points"] = 100.0 * float((top1 != ref_top1).sum()) / len(top1)
    return result


def check_budget(figures, budget):
    """Returns the list of budget violations (empty when the artifact passes)."""
    failures = []
    n = max(figures["images"], 1)
    for key, limit in budget.items():
        if key == "min_top1_agreement":
            limit = min(limit, 1.0 - 1.0 / n)
            value = figures["top1_agreement"]
            if not np.isfinite(value) or value < limit:
                failures.append(f"top-1 agreement with Keras = {value:.4g} < {limit:.4g}")
            continue
        if key == "max_accuracy_drop" and figures["top1_accuracy"] is None:
            limit = max(limit, 100.0 / n)
        if key == "max_accuracy_drop":
            value, what = figures["accuracy_drop_points"], (
                "top-1 accuracy drop (points)" if figures["top1_accuracy"] is not None
                else "top-1 disagreement with Keras (points; no labels)"
            )  # fmt: skip
        else:
            if figures.get("output") == "probabilities":
                key = key.replace("logit", "probability")
            value, what = figures[key], key.replace("_", " ")
        if not np.isfinite(value) or value > limit:
            failures.append(f"{what} = {value:.3g} > {limit:g}")
    return failures
