"""What ONNX and OpenVINO files share: the contract documents each carries (`properties`), one runner base, and the one
check of a written file (`check`) that every kind goes through with its own figures and budget (`kind.CHECKS`)."""

import json

import numpy as np

from keras_vit.preprocessing import PIXEL_CENTER, PIXEL_SCALE

from ..description import INPUT, to_model_space
from ..errors import ExportError
from ..runtime import batches, check_batch, median_ms

FORMATS = ("onnx", "openvino")
CONTRACT_KEYS = ("labels", "input", "output", "preprocessing")
INPUT_NAME, EMBEDDING_NAME = INPUT, "embedding"
DYNAMIC_BATCHES = (1, 3)
DYNAMIC_SIZE_IMAGES = 32


def input_spec(model):
    """float32 NHWC images, batch open (and height and width, for a model built with dynamic_image_size=True)."""
    import tensorflow as tf

    return tf.TensorSpec((None, *model.input_shape[1:]), tf.float32, name=INPUT_NAME)


def properties(description):
    """`description` (export/description.py) as the documents written into an ONNX or OpenVINO file: {key: JSON
    text} for `CONTRACT_KEYS` (ONNX `metadata_props`, OpenVINO rt_info).

    A classifier's carries its labels and a `logits` output; an embedder's no labels, and an output document saying
    the output is a feature vector of its size, L2-normalised or not, in float32.
    """
    d = description
    height, width = d.image_size
    (out,) = d.outputs
    vector = {"kind": "feature_vector", "dimensions": d.dimensions, "l2_normalized": d.l2_normalized,
              "quantization": "float32"} if out.meaning == EMBEDDING_NAME else {}  # fmt: skip
    open_size = d.dynamic_image_size
    documents = {
        "labels": None if d.labels is None else list(d.labels),
        "input": {
            "name": INPUT_NAME,
            "dtype": d.dtype,
            "layout": d.layout,
            "color": d.color,
            "shape": ["batch", "height" if open_size else height, "width" if open_size else width, 3],
            "image_size": [height, width],
            "dynamic_image_size": open_size,
            "range": list(d.range),
            "from_uint8": f"bilinear resize to {height}x{width}, then x = (x - {PIXEL_CENTER}) / {PIXEL_SCALE}",
        },
        "output": {"name": out.name, "meaning": out.meaning, **vector, "shape": ["batch", d.dimensions]},
        "preprocessing": d.preprocessing,
    }
    return {key: json.dumps(value) for key, value in documents.items() if value is not None}


def contract_complete(parsed):
    """True when the file carries every document its kind needs (an embedder has no labels)."""
    needed = [k for k in CONTRACT_KEYS if not (k == "labels" and output_kind(parsed) == "embedding")]
    return all(parsed.get(k) is not None for k in needed)


def output_kind(parsed):
    """The kind of output the file says it has: "embedding" (a feature vector), else "logits"."""
    return "embedding" if (parsed.get("output") or {}).get("meaning") == "embedding" else "logits"


def read_contract(text_by_key, what):
    """Parses the documents `contract` wrote ({key: JSON text}, any missing); unreadable JSON is an ExportError."""
    parsed = {}
    for key in CONTRACT_KEYS:
        if text_by_key.get(key) is None:
            parsed[key] = None
            continue
        try:
            parsed[key] = json.loads(text_by_key[key])
        except ValueError:
            raise ExportError(f"{what} has unreadable keras_vit.{key} metadata; re-export it with export/.") from None
    return parsed


def first_line(exc):
    """The informative line of a runtime's multi-line error (OpenVINO's say where in its C++ sources first:
    'Exception from src/...', "Check '...' failed at src/...")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith("Exception from") and " failed at src/" not in line]
    return (useful or lines or [type(exc).__name__])[0]


class InterchangeRunner:
    """The runner interface of export/keras_runner.py over a runtime that maps float32 NHWC batches to one output, named
    `logits` or `embedding` as the file's contract says.

    Subclasses set `kind`, `what`, `input_shape` (None for open dimensions), `contract` (read back from the
    file) and `num_threads`, and define `run(x)`, the runtime's array for a batch of any shape the file accepts.
    """

    output_kind = "logits"

    def _setup(self, path):
        self.labels = self.contract["labels"]
        self.output_kind = output_kind(self.contract)
        self.names = [self.output_kind]
        self.contract_in_file = contract_complete(self.contract)
        static = self.input_shape[1:3]
        if self.contract["input"] is not None:
            self.image_size = tuple(int(d) for d in self.contract["input"]["image_size"])
        elif all(isinstance(d, int) for d in static):
            self.image_size = tuple(static)
        else:
            raise ExportError(
                f"{path!r} has an open image size and no keras_vit metadata saying which size it was trained at; "
                "re-export it with `python -m export`."
            )
        self.dynamic_batch = self.input_shape[0] is None
        self.dynamic_image_size = any(d is None for d in static)

    @property
    def threads(self):
        return self.num_threads

    def outputs(self, x, batch_size=64):
        x = check_batch(x, self.image_size, self.what)
        step = batch_size if self.dynamic_batch else int(self.input_shape[0])
        return {self.output_kind: np.concatenate([self.run(b) for b in batches(x, step)]).astype(np.float32)}

    def outputs_from_images(self, images):
        return self.outputs(to_model_space(images, self.image_size))

    def latency_ms(self, x1, runs=50, warmup=5):
        x1 = check_batch(x1, self.image_size, self.what)
        return median_ms(lambda: self.run(x1), runs, warmup)


def l2_normalized_model(model):
    """`model` with its vectors L2-normalised, as a functional model over the same layers (weights shared): what a
    file whose description says `l2_normalized` computes."""
    import keras

    inputs = keras.Input(model.input_shape[1:], name=INPUT_NAME)
    return keras.Model(inputs, keras.ops.normalize(model(inputs), axis=-1, order=2), name=f"{model.name}_l2")


def expected(outputs, description):
    """What a file of `description` should give for the Keras `outputs` (by name): the same, L2-normalised where the
    file normalises its vectors."""
    if not description.l2_normalized:
        return outputs
    vectors = {name: np.asarray(v, np.float64) for name, v in outputs.items()}
    return {name: v / np.linalg.norm(v, axis=-1, keepdims=True) for name, v in vectors.items()}


def check(kind, runner, x, reference, truth, budget, description, dynamic_model=None):
    """Judges an ONNX or OpenVINO file (`runner`, opened) as `kind` (export/kinds/) judges its files: returns (its
    figures on `x` against `reference`, the Keras outputs by name; failures; the entry's fields beyond those).

    The same checks for every kind, with the kind's figures, budget and words (`kind.CHECKS`): the figures on
    the verification images; dynamic batch, the first images at each batch size of `DYNAMIC_BATCHES`; dynamic image
    size, when `dynamic_model` (the Keras model built with `dynamic_image_size=True`) is given, up to
    `DYNAMIC_SIZE_IMAGES` images at a second size (two patches taller, one patch wider) against that Keras model at
    the same size; the runtime's details (OpenVINO's figures at its default precision, not budgeted); and the
    documents the file carries. All are held to `budget`; a file whose batch (or, for a dynamic model, image size)
    is fixed fails.
    """
    spec = kind.CHECKS
    reference = expected(reference, description)
    found = kind.figures(runner.outputs(x), reference, truth)
    failures = kind.check_budget(found, budget)
    fields = {"input_shape": [name if d is None else d for name, d in zip(("batch", "height", "width", "channels"),
                                                                          runner.input_shape)]}  # fmt: skip
    fields["dynamic_batch"] = _batches(kind, runner, x, reference, budget, failures)
    fields["dynamic_image_size"] = None
    if dynamic_model is not None:
        if not runner.dynamic_image_size:
            failures.append("the model was built with dynamic_image_size=True but the file's image size is fixed")
        else:
            fields["dynamic_image_size"] = _other_size(kind, runner, x, dynamic_model, description, budget, failures)
    fields.update(runner.details(x, reference, kind))
    fields.update({f"{key}_contract": runner.contract[key] for key in spec["stated"]})
    fields["contract_in_file"] = runner.contract_in_file
    failures += _contract_failures(runner, description, spec["contract"])
    return found, failures, fields


def _batches(kind, runner, x, reference, budget, failures):
    """The first images run at each batch size of `DYNAMIC_BATCHES` against `reference`: the worst of the kind's
    summary figure over the sizes (None when the file's batch is fixed); misses go to `failures`."""
    if not runner.dynamic_batch:
        failures.append(f"the batch dimension is fixed at {runner.input_shape[0]}; expected it open")
        return None
    runs = []
    for batch in DYNAMIC_BATCHES:
        if len(x) < batch:
            continue
        out = np.concatenate([runner.run(b) for b in batches(x[: batch * (len(x) // batch)], batch)])
        runs.append(kind.figures({runner.output_kind: out}, {k: v[: len(out)] for k, v in reference.items()}))
        failures += [f"batch {batch}: {f}" for f in kind.check_budget(runs[-1], budget)]
    key, worst = kind.CHECKS["summary"]
    return {"batches": list(DYNAMIC_BATCHES), key: worst(f[key] for f in runs)}


def second_size(runner, x, dynamic_model):
    """`x` resized to a second image size, two patches taller and one wider than the file's: (size, images)."""
    import tensorflow as tf

    patch = int(dynamic_model.config.patch_size) * int(dynamic_model.config.feature_stride)
    size = (runner.image_size[0] + 2 * patch, runner.image_size[1] + patch)
    # Model-space images resized again: any float32 images in [-1, 1] at the new size serve the comparison.
    return size, tf.clip_by_value(tf.image.resize(x, size, method="bilinear"), -1.0, 1.0).numpy()


def _other_size(kind, runner, x, dynamic_model, description, budget, failures):
    """The first images at `second_size`, against the dynamic Keras model at that size: the kind's figures there;
    misses go to `failures`."""
    size, bigger = second_size(runner, x[:DYNAMIC_SIZE_IMAGES], dynamic_model)
    chunks = range(0, len(bigger), 16)
    keras_out = np.concatenate([np.asarray(dynamic_model(bigger[i : i + 16], training=False)) for i in chunks])
    reference = expected(dict(zip(kind.output_names(dynamic_model), [keras_out])), description)
    out = np.concatenate([runner.run(bigger[i : i + 16]) for i in chunks])
    found = kind.figures({runner.output_kind: out}, reference)
    failures += [f"at {size[0]}x{size[1]}: {f}" for f in kind.check_budget(found, budget)]
    return {"size": list(size), "images": len(bigger), **{k: found[k] for k in kind.CHECKS["size_figures"]}}


def _contract_failures(runner, description, words):
    """The file must carry every document its kind needs (`words`: what they are, in the kind's words), and its
    output document must say what the export's description says."""
    if not runner.contract_in_file:
        return [f"{words} are missing from the file"]
    said, meant = runner.contract["output"], json.loads(properties(description)["output"])
    if said != meant:
        return [f"the file's output document says {said}; the export's description says {meant}"]
    return []
