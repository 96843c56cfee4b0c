"""Verification of an exported artifact against the Keras model it came from, with stated budgets."""

import numpy as np

# The budget each artifact must meet. Logit differences are max |artifact - keras| over the verification
# set; accuracy drops are in percentage points of top-1 accuracy on the labelled held-out set (or, with no
# labels, of disagreement with the Keras model's top-1; on an unlabelled set, often random noise near class
# boundaries, one flipped image is always allowed, so the budget there is max(limit, 100 / N) points).
BUDGETS = {
    "saved_model": {"max_abs_logit_diff": 1e-4},
    "float32": {"max_abs_logit_diff": 1e-4},
    # float16 weights: logits within 1% of the logits' own scale, and at most half a point of accuracy.
    "float16": {"max_rel_logit_diff": 1e-2, "max_accuracy_drop": 0.5},
    "dynamic_int8": {"max_accuracy_drop": 1.0},
    "int8": {"max_accuracy_drop": 1.0},
    "int8_matmul": {"max_accuracy_drop": 1.0},
}


def compare(logits, reference, labels=None):
    """Agreement figures of `logits` against the Keras `reference` (both (N, classes))."""
    logits, reference = np.asarray(logits, np.float64), np.asarray(reference, np.float64)
    if logits.shape != reference.shape:
        raise ValueError(f"Shapes differ: artifact {logits.shape} vs keras {reference.shape}.")
    diff = np.abs(logits - reference)
    scale = max(1.0, float(np.abs(reference).max()))
    top1, ref_top1 = logits.argmax(-1), reference.argmax(-1)
    result = {
        "images": int(len(logits)),
        "max_abs_logit_diff": float(diff.max()),
        "max_rel_logit_diff": float(diff.max() / scale),
        "top1_agreement": float((top1 == ref_top1).mean()),
        "top1_accuracy": None,
        "keras_top1_accuracy": None,
    }
    if labels is not None:
        result["top1_accuracy"] = float((top1 == labels).mean())
        result["keras_top1_accuracy"] = float((ref_top1 == labels).mean())
        result["accuracy_drop_points"] = 100.0 * (result["keras_top1_accuracy"] - result["top1_accuracy"])
    else:
        result["accuracy_drop_points"] = 100.0 * (1.0 - result["top1_agreement"])
    return result


def check_budget(figures, budget):
    """Returns the list of budget violations (empty when the artifact passes)."""
    failures = []
    for key, limit in budget.items():
        if key == "max_accuracy_drop" and figures["top1_accuracy"] is None:
            limit = max(limit, 100.0 / max(figures["images"], 1))
        if key == "max_accuracy_drop":
            value, what = figures["accuracy_drop_points"], (
                "top-1 accuracy drop (points)" if figures["top1_accuracy"] is not None
                else "top-1 disagreement with Keras (points; no labels)"
            )  # fmt: skip
        else:
            value, what = figures[key], key.replace("_", " ")
        if not np.isfinite(value) or value > limit:
            failures.append(f"{what} = {value:.3g} > {limit:g}")
    return failures
