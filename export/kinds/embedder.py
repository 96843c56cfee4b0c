"""An image embedder: a head-less keras_vit model (`num_classes=0`), one vector per image, judged against the Keras
vectors by every image's cosine similarity and the difference of their norms, with a budget per mode; its files are
`embedder_*`, in TFLite (for MediaPipe's ImageEmbedder), ONNX and OpenVINO.
"""

import numpy as np

from ..errors import ExportError

NAME = "embedder"
TITLE = " (image embedder)"
STEM = "embedder"
HEADER = ("dims", "min cos", "mean cos", "max|diff|", "norm diff")
OUTPUT = "embedding"
LABELLED = False
OPEN_BATCH = False  # its files take one image at a time, as MediaPipe's ImageEmbedder feeds them
INTEGER_IO = False  # its vectors stay float32 in every mode
# The least cosine similarity between an image's TFLite and Keras vectors, and the largest difference of their
# norms relative to the Keras norm, over the verification set (measured margins in docs/mobile.md).
BUDGETS = {
    "float32": {"min_cosine": 0.9999, "max_rel_norm_diff": 1e-4},
    "float16": {"min_cosine": 0.999, "max_rel_norm_diff": 1e-2},
    "dynamic_int8": {"min_cosine": 0.995, "max_rel_norm_diff": 0.05},
    # The full-int8 files' least cosine depends on the trained weights: the digits recipe's embedders ranged
    # 0.9789-0.9972 (int8) and 0.9883-0.9992 (int8_matmul) over four trained models (docs/mobile.md); the
    # budgets leave room below the worst of them.
    "int8": {"min_cosine": 0.95, "max_rel_norm_diff": 0.1},
    "int8_matmul": {"min_cosine": 0.975, "max_rel_norm_diff": 0.05},
}

# An ONNX or OpenVINO file's checks beyond its figures (export/interchange/portable.py: `check`), as for a classifier
# (export/kinds/classifier.py); the entry repeats the file's output document.
CHECKS = {
    "summary": ("min_cosine", min),
    "size_figures": ("min_cosine", "max_rel_norm_diff"),
    "precision_figures": ("min_cosine", "max_rel_norm_diff"),
    "contract": "the input contract and the feature-vector output document",
    "stated": ("output",),
}


def matches(model):
    """A keras_vit model without a classification head."""
    return is_feature_model(model)


def is_feature_model(model):
    """True for a keras_vit model without a classification head (`num_classes=0`): its output is features."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    if getattr(config, "num_classes", None) == 0:
        return True
    try:
        model.get_layer("head")
    except ValueError:
        return True
    return False


def headless_model(model):
    """The head-less copy of a keras_vit classifier: the same weights up to the pooled features (or `pre_logits`)."""
    from keras_vit.models.vision_transformer import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ExportError(f"headless_model takes a keras_vit model. Received: {type(model).__name__}.")
    headless = VisionTransformer.from_config({**model.get_config(), "num_classes": 0, "class_names": None})
    for layer in headless.layers:
        layer.set_weights(model.get_layer(layer.name).get_weights())
    return headless


def cosine(a, b):
    """Row-wise cosine similarity of two (N, D) arrays (float64)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-30)


def expected_vectors(vectors, l2_normalize):
    """The vectors a file should give: the Keras ones, L2-normalised where the file normalises them."""
    vectors = np.asarray(vectors, np.float64)
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True) if l2_normalize else vectors


def compare(outputs, reference):
    """Agreement of an artifact's vectors with the Keras vectors (both (N, D))."""
    outputs, reference = np.asarray(outputs, np.float64), np.asarray(reference, np.float64)
    if outputs.shape != reference.shape:
        raise ValueError(f"Shapes differ: artifact {outputs.shape} vs keras {reference.shape}.")
    similarity = cosine(outputs, reference)
    norms, ref_norms = np.linalg.norm(outputs, axis=-1), np.linalg.norm(reference, axis=-1)
    return {
        "images": len(outputs),
        "output": OUTPUT,
        "min_cosine": float(similarity.min()),
        "mean_cosine": float(similarity.mean()),
        "max_abs_diff": float(np.abs(outputs - reference).max()),
        "max_rel_norm_diff": float((np.abs(norms - ref_norms) / np.maximum(ref_norms, 1e-30)).max()),
        "mean_norm": float(norms.mean()),
    }


def figures(outputs, reference, truth=None):
    """`compare` on named outputs: the file's `embedding` against the Keras one (`truth` has no use here)."""
    return compare(outputs[OUTPUT], reference[OUTPUT])


def check_budget(figures, budget):
    """The budget misses of `compare`'s figures, one line each."""
    failures = []
    if not figures["min_cosine"] >= budget["min_cosine"]:
        failures.append(f"min cosine similarity with Keras = {figures['min_cosine']:.6f} < {budget['min_cosine']:g}")
    if not figures["max_rel_norm_diff"] <= budget["max_rel_norm_diff"]:
        failures.append(
            f"max relative norm difference = {figures['max_rel_norm_diff']:.3g} > {budget['max_rel_norm_diff']:g}"
        )
    return failures


def plan(source, options, model, offered):
    """(labels: None, TFLite modes, notes) of an embedder's export; raises when none of the `offered` formats (those
    that write embedders) is asked for."""
    modes, note = options.modes(source.has_representative)
    if not any(f in offered for f in options.formats):
        raise ExportError(
            f"This model outputs pooled features (num_classes=0, output {model.output_shape}), which export as image "
            "embedders (embedder_<mode>.tflite for MediaPipe's ImageEmbedder, embedder.onnx, embedder.xml); pass "
            f"--formats {','.join(offered)}."
        )
    notes = [note] if note else []
    for name in (f for f in options.formats if f not in offered):
        notes.append(
            f"{name} not written: a num_classes=0 model exports as TFLite, ONNX and OpenVINO image embedders only"
        )
    return None, modes, notes


def describe_model(plan):
    return {"dimensions": int(plan.model.output_shape[-1]), "parameters": int(plan.model.count_params())}


def report_fields(plan, options):
    return {}


def keras_fields(reference, truth, source):
    return {"top1_accuracy": None, "file_bytes": None}


def entry_figures(found, plan):
    return {**found, "dimensions": int(plan.model.output_shape[-1]), "l2_normalized": bool(plan.l2_normalize)}


def output_names(model):
    """An embedder's one output: the vector."""
    return [OUTPUT]


def meanings(model):
    """{name: what it holds} (export/description.py)."""
    return {OUTPUT: OUTPUT}


def keras_cells(report):
    return (str(report["model"]["dimensions"]), "-", "-", "-", "-")


def cells(a):
    return (str(a["dimensions"]), f"{a['min_cosine']:.6f}", f"{a['mean_cosine']:.6f}", f"{a['max_abs_diff']:.2e}",
            f"{a['max_rel_norm_diff']:.2e}")  # fmt: skip


def verified(report):
    v = report["verification"]
    return f"Verified on {v['images']} images from {v['set']}: cosine similarity of each image's vector with Keras'."


def preamble(report):
    return []


def words(f):
    """Figures of `compare` (or any of them) in a few words, for the lines of the export table."""
    out = [f"min cos {f['min_cosine']:.6f}"] if "min_cosine" in f else []
    return ", ".join(out + ([f"norm diff {f['max_rel_norm_diff']:.2e}"] if "max_rel_norm_diff" in f else []))
