"""Feature maps: a `keras_vit.feature_model` (chosen blocks' outputs, several, each by a name that stays fixed from the
Keras model to every file), judged output by output against Keras by name; its files are `feature_maps_*` and
`saved_model/`, in SavedModel and TFLite.
"""

import numpy as np

from ..errors import ExportError
from .embedder import cosine

NAME = "feature_maps"
TITLE = " (feature maps)"
STEM = "feature_maps"
HEADER = ("outputs", "min cos", "max rel diff")
PREFIX_SUFFIX = "_prefix"
LABELLED = False
OPEN_BATCH = True  # its files may leave the batch open (--dynamic-batch)
INTEGER_IO = False  # its outputs stay float32 in every mode

# The TFLite modes offered for feature maps, and each one's budget on every output: the largest difference relative
# to max(1, max |Keras value|) of that output, and the least cosine of a token's width vector with Keras'
# (margins measured in docs/export.md).
BUDGETS = {
    "saved_model": {"max_rel_diff": 1e-4, "min_cosine": 0.9999},
    "float32": {"max_rel_diff": 1e-4, "min_cosine": 0.9999},
    "float16": {"max_rel_diff": 1e-2, "min_cosine": 0.999},
    "dynamic_int8": {"min_cosine": 0.99},
    "int8_matmul": {"min_cosine": 0.99},
}
MODES = tuple(m for m in BUDGETS if m != "saved_model")
# Why the other TFLite modes are not offered, in the one line that refuses them.
REFUSED = {
    "int8": "full-integer int8 (one int8 scale per activation tensor) keeps a token cosine of only 0.93 with Keras on "
    "the test model (tests/export/test_feature_maps.py); use int8_matmul (calibrated int8 matmuls, float activations)",
    "int8_int16": "its input and outputs are int16 tensors, and feature-map files keep float32 ones; use int8_matmul",
    "int4_weights": "ai-edge-quantizer's int4 weights have no budget verified here for block outputs; use dynamic_int8",
}


def matches(model):
    """True for a functional model whose every output is a `TokenSplit` layer's (what `keras_vit.feature_model`
    builds, or its `.keras` file loaded back); a keras_vit `VisionTransformer` (classifier or embedder) is not."""
    import keras

    from keras_vit.layers.token_split import TokenSplit
    from keras_vit.models.vision_transformer import VisionTransformer

    if not isinstance(model, keras.Model) or isinstance(model, VisionTransformer):
        return False
    outputs = getattr(model, "outputs", None) or []
    return bool(outputs) and all(isinstance(layer, TokenSplit) for layer, _ in output_layers(model))


is_feature_maps = matches


def output_layers(model):
    """(layer, index) of each of `model`'s outputs: the layer that computes it and which of its outputs it is."""
    # `_keras_history` is how Keras' own Functional model finds its output layers (keras/src/models/functional.py).
    return [(t._keras_history[0], t._keras_history[2]) for t in model.outputs]


def output_names(model):
    """The outputs' stable names, in the model's order: `encoderblock_{i}` and `encoderblock_{i}_prefix`."""
    names = []
    for layer, index in output_layers(model):
        base = layer.name.removesuffix("_features")
        names.append(base + PREFIX_SUFFIX if index else base)
    if len(set(names)) != len(names):
        raise ExportError(
            f"The feature model's outputs do not have distinct names ({names}); build it with one "
            "keras_vit.feature_model call, which names each block's outputs after the block."
        )
    return names


def describe_outputs(model):
    """{name: what it holds}: block, patch tokens or map, or prefix tokens, and the shape."""
    described = {}
    for name, (layer, index), tensor in zip(output_names(model), output_layers(model), model.outputs):
        block = name.removesuffix(PREFIX_SUFFIX)
        if index:
            what = "prefix tokens (class, distillation, register)"
        else:
            what = "patch map (NHWC)" if layer.output_form == "NHWC" else "patch tokens"
        shape = ", ".join("batch" if d is None else str(d) for d in tensor.shape)
        described[name] = f"{what} of {block}, ({shape})"
    return described


meanings = describe_outputs  # {name: what it holds} (export/description.py)


def compare(outputs, reference):
    """Per-output figures of an artifact's {name: array} against the Keras {name: array}, matched by name.

    Differences are relative to max(1, max |Keras value|) of that output, as the classifiers' are to the logit
    scale; cosines are of each token's (or map position's) width vector with Keras'.
    """
    figures = {}
    for name, ref in reference.items():
        if name not in outputs:
            figures[name] = {"missing": True}
            continue
        got, ref = np.asarray(outputs[name], np.float64), np.asarray(ref, np.float64)
        if got.shape != ref.shape:
            figures[name] = {"shape": list(got.shape), "keras_shape": list(ref.shape)}
            continue
        similarity = cosine(got.reshape(-1, got.shape[-1]), ref.reshape(-1, ref.shape[-1]))
        scale = max(1.0, float(np.abs(ref).max()))
        diff = float(np.abs(got - ref).max())
        figures[name] = {"shape": list(ref.shape), "scale": scale, "max_abs_diff": diff, "max_rel_diff": diff / scale,
                         "min_cosine": float(similarity.min()), "mean_cosine": float(similarity.mean())}  # fmt: skip
    for name in sorted(set(outputs) - set(reference)):
        figures[name] = {"unexpected": True}
    return figures


def figures(outputs, reference, truth=None):
    """`compare`: every named output against Keras' output of that name (`truth` has no use here)."""
    return compare(outputs, reference)


def check_budget(figures, budget):
    """The budget misses of `compare`'s figures, one line each (empty when every output passes)."""
    failures = []
    for name, f in figures.items():
        if f.get("missing") or f.get("unexpected"):
            where = "the artifact lacks it" if f.get("missing") else "Keras has no output of that name"
            failures.append(f"{name}: {where}")
        elif "keras_shape" in f:
            failures.append(f"{name}: shape {tuple(f['shape'])} != Keras {tuple(f['keras_shape'])}")
        else:
            if "max_rel_diff" in budget and not f["max_rel_diff"] <= budget["max_rel_diff"]:
                failures.append(f"{name}: max relative diff {f['max_rel_diff']:.3g} > {budget['max_rel_diff']:g}")
            if not f["min_cosine"] >= budget["min_cosine"]:
                failures.append(f"{name}: min cosine {f['min_cosine']:.6f} < {budget['min_cosine']:g}")
    return failures


def summary(outputs):
    """The artifact's worst figures over its outputs (its row in the table)."""
    good = [f for f in outputs.values() if "min_cosine" in f]
    if len(good) < len(outputs):
        return {"min_cosine": None, "max_rel_diff": None}
    return {"min_cosine": min(f["min_cosine"] for f in good), "max_rel_diff": max(f["max_rel_diff"] for f in good)}


def tflite_modes(options, has_representative):
    """The TFLite modes to convert and the notes on what was left out.

    Raises:
        ExportError: a mode that feature maps are not exported in, named with the reason and what to use.
    """
    if options.quantize is not None:
        for mode in options.quantize:
            if mode not in MODES:
                raise ExportError(
                    f"Feature maps export as TFLite {', '.join(MODES)}; {mode} is not offered: {REFUSED[mode]} "
                    "(e.g. --quantize float32,dynamic_int8)."
                )
    modes, note = options.modes(has_representative)
    notes = [note] if note else []
    left_out = [m for m in modes if m not in MODES]
    notes += [f"{m} not written for feature maps: {REFUSED[m]}" for m in left_out]
    return tuple(m for m in modes if m in MODES), notes


def _check(model, options, offered):
    """The notes on the formats not written; raises for a request that cannot be met."""
    if any(d is None for d in model.input_shape[1:]):
        raise ExportError(
            f"Feature maps export at one image size; this feature model's input is {model.input_shape} "
            "(dynamic_image_size=True). Build it from the fixed-size model: keras_vit.feature_model("
            "keras_vit.models.vision_transformer.fixed_size_model(model), ...)."
        )
    if not set(offered) & set(options.formats):
        raise ExportError(
            f"A feature-map model exports as {' and '.join(offered)} only; --formats asks for "
            f"{','.join(options.formats)}. Pass --formats {','.join(offered)}."
        )
    if options.gpu_check == "require":
        raise ExportError(
            "--gpu-check require checks single-output classifier and embedder files; feature-map files are not run "
            "on the GPU check. Pass --gpu-check auto or off."
        )
    others = [f for f in options.formats if f not in offered]
    notes = [f"{', '.join(others)} not written: a feature-map model exports as {' and '.join(offered)}"] * bool(others)
    if "tflite" in options.formats and options.gpu_check == "auto":
        notes.append("GPU check not run: it checks single-output files")
    return notes


def plan(source, options, model, offered):
    """(labels: None, TFLite modes, notes) of a feature-map export (in the `offered` formats, those that write feature
    maps); raises for a request it cannot meet."""
    notes = _check(model, options, offered)
    modes, mode_notes = tflite_modes(options, source.has_representative)
    return None, modes, notes + mode_notes


def describe_model(plan):
    return {"parameters": int(plan.model.count_params()), "outputs": describe_outputs(plan.model)}


def report_fields(plan, options):
    return {}


def keras_fields(reference, truth, source):
    return {}


def entry_figures(found, plan):
    return {**summary(found), "outputs": found}


def keras_cells(report):
    return (str(len(report["model"]["outputs"])), "-", "-")


def cells(a):
    worst = "-" if a["min_cosine"] is None else f"{a['min_cosine']:.6f}"
    rel = "-" if a["max_rel_diff"] is None else f"{a['max_rel_diff']:.2e}"
    return (str(len(a["outputs"])), worst, rel)


def verified(report):
    v = report["verification"]
    return f"Verified on {v['images']} images from {v['set']}: every output, by name, against Keras'."


def preamble(report):
    """The lines after the table, before the files': what each output holds."""
    return [f"output {name}: {what}" for name, what in report["model"]["outputs"].items()]


def words(f):
    """An output's figures (`compare`'s, or the worst of them) in a few words, for the lines of the export table."""
    return f"min cos {f['min_cosine']:.6f}, max rel diff {f['max_rel_diff']:.2e}"
