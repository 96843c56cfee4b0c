"""Verification of an exported artifact against the Keras model it came from, with stated budgets."""

import numpy as np

# The budget each artifact must meet. Logit differences are max |artifact - keras| over the verification
# set; accuracy drops are in percentage points of top-1 accuracy on the labelled held-out set (or, with no
# labels, of disagreement with the Keras model's top-1; on an unlabelled set, often random noise near class
# boundaries, one flipped image is always allowed, so the budget there is max(limit, 100 / N) points).
# For an artifact that outputs probabilities (TFLite's default) the logit limits apply to its probabilities,
# compared with the softmax of the Keras logits (on the probability scale, 1, max_rel equals max_abs).
BUDGETS = {
    "saved_model": {"max_abs_logit_diff": 1e-4},
    "float32": {"max_abs_logit_diff": 1e-4},
    # float16 weights: logits within 1% of the logits' own scale, and at most half a point of accuracy.
    "float16": {"max_rel_logit_diff": 1e-2, "max_accuracy_drop": 0.5},
    "dynamic_int8": {"max_accuracy_drop": 1.0},
    "int8": {"max_accuracy_drop": 1.0},
    "int8_matmul": {"max_accuracy_drop": 1.0},
}


def softmax(logits):
    z = np.asarray(logits, np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def compare(outputs, reference, labels=None, output="logits"):
    """Agreement figures of an artifact's `outputs` against the Keras logits `reference` (both (N, classes)).

    With `output="probabilities"` the outputs are compared with softmax(reference), and the difference figures
    are named `max_abs_probability_diff` / `max_rel_probability_diff`.
    """
    outputs, reference = np.asarray(outputs, np.float64), np.asarray(reference, np.float64)
    if outputs.shape != reference.shape:
        raise ValueError(f"Shapes differ: artifact {outputs.shape} vs keras {reference.shape}.")
    if output == "probabilities":
        reference = softmax(reference)
    elif output != "logits":
        raise ValueError(f"output must be 'logits' or 'probabilities'. Received: {output!r}")
    word = "logit" if output == "logits" else "probability"
    diff = np.abs(outputs - reference)
    scale = max(1.0, float(np.abs(reference).max()))
    top1, ref_top1 = outputs.argmax(-1), reference.argmax(-1)
    result = {
        "images": int(len(outputs)),
        "output": output,
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
            if figures.get("output") == "probabilities":
                key = key.replace("logit", "probability")
            value, what = figures[key], key.replace("_", " ")
        if not np.isfinite(value) or value > limit:
            failures.append(f"{what} = {value:.3g} > {limit:g}")
    return failures
