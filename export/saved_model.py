"""The SavedModel format: `saved_model/` with a uint8-image `serving_default` signature (preprocessing inside) and a
`model_space` one, its writer for every kind, its runner and its entry in the export."""

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from keras_vit import files

from . import commit, runtime
from .description import INPUT, SIGNATURE, check_images, model_space_in_graph
from .errors import ExportError
from .io import read_labels
from .runtime import batches, check_batch, gather, median_ms, named_call, record

SERVING_KEY = SIGNATURE
MODEL_SPACE_KEY = "model_space"


def build_serving_module(model, labels, top_k=5):
    """Wraps a Keras model in a `tf.Module` with the two exported signatures.

    `serving_default(images)`: uint8 RGB images (batch, any height, any width, 3) -> `logits`,
    `probabilities` (batch, classes), `top_k_ids` (int32), `top_k_probabilities`, `top_k_labels` (string),
    each (batch, k). The bilinear resize to the model's size and the scaling to [-1, 1] happen inside.

    `model_space(images)`: float32 images already resized and scaled (batch, H, W, 3) -> `logits`,
    `probabilities`.

    Args:
        model: a Keras classifier with a static (H, W, 3) input and logits output; a keras_vit model built with
            `dynamic_image_size=True` is served at its `image_size` (the signature resizes every image to it).
        labels: class names, one per model output.
        top_k: how many classes the serving signature returns (capped at the class count).
    """
    import tensorflow as tf

    from keras_vit.models.vision_transformer import fixed_size_model

    model = fixed_size_model(model)
    num_classes = int(model.output_shape[-1])
    if len(labels) != num_classes:
        raise ValueError(f"{len(labels)} labels for a model with {num_classes} outputs; they must match.")
    k = max(1, min(int(top_k), num_classes))
    names = tf.constant(list(labels), dtype=tf.string)

    def heads(images):
        logits = model(images, training=False)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}

    def top(out):
        top_probabilities, top_ids = tf.math.top_k(out["probabilities"], k=k)
        return {"top_k_ids": top_ids, "top_k_probabilities": top_probabilities,
                "top_k_labels": tf.gather(names, top_ids)}  # fmt: skip

    return serving_module(model, heads, top, labels=names)


def serving_module(model, outputs, served=None, **tracked):
    """The one SavedModel builder of every kind: a `tf.Module` holding `model` (and `tracked`) with the two
    signatures, `model_space(images)` (float32 images already resized and scaled, (batch, H, W, C)) ->
    `outputs(images)`, a dict by name, and `serving_default(images)` (uint8 RGB images of any size, resized
    bilinearly and scaled to [-1, 1] inside) -> the same dict, plus `served(it)` where given. Returns (module,
    signatures)."""
    import tensorflow as tf

    height, width, channels = model.input_shape[1:]
    module = tf.Module()
    module.model = model
    for name, value in tracked.items():
        setattr(module, name, value)

    @tf.function(input_signature=[tf.TensorSpec((None, height, width, channels), tf.float32, name="images")])
    def model_space(images):
        return outputs(images)

    @tf.function(input_signature=[tf.TensorSpec((None, None, None, channels), tf.uint8, name="images")])
    def serving(images):
        out = outputs(model_space_in_graph(images, (height, width)))
        return {**out, **(served(out) if served else {})}

    module.serving, module.model_space = serving, model_space
    return module, {SERVING_KEY: serving.get_concrete_function(), MODEL_SPACE_KEY: model_space.get_concrete_function()}


def write_saved_model(model, path, labels, top_k=5, metadata=None):
    """Exports `model` as a SavedModel directory at `path`, atomically.

    The directory is built beside `path` under a temporary name and renamed into place only when complete,
    so an existing SavedModel at `path` survives a failed or interrupted export. A URL `path` (`gs://...`) is
    built in a local temporary directory and uploaded file by file (`keras_vit.files.replace_path`).
    `assets/labels.txt` and `assets/preprocessing.json` travel with it; the labels are also baked into the graph.

    Args:
        model: Keras classifier (static input size).
        path: target directory.
        labels: class names in output order.
        top_k: classes returned by `serving_default`.
        metadata: extra JSON-serialisable facts written into `assets/preprocessing.json`.

    Returns:
        The `Path` of the SavedModel directory (a URL as a str).
    """
    remote = files.is_remote(path)
    if not remote:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
    name = files.basename(path)
    from keras_vit.models.vision_transformer import fixed_size_model

    from .description import describe
    from .kinds import classifier

    described = describe(classifier, fixed_size_model(model), labels)
    with tempfile.TemporaryDirectory(dir=None if remote else path.parent, prefix=f".{name}.staging-") as staging:
        staged = save_saved_model(model, Path(staging) / name, described, top_k=top_k, metadata=metadata)
        return files.replace_path(staged, path, last="saved_model.pb")


def assets(description, metadata=None):
    """`description` (export/description.py) as a classifier's SavedModel assets: {file name: text}, `labels.txt`
    (one class name a line) and `preprocessing.json` (the preprocessing, the labels file, what each signature takes,
    and `metadata`'s facts). Feature maps' SavedModel carries none: its signatures name every output."""
    if description.labels is None:
        return {}
    info = {"preprocessing": description.preprocessing, "labels_file": "labels.txt",
            "signatures": {SERVING_KEY: "uint8 images (batch, any H, any W, 3)",
                           MODEL_SPACE_KEY: "float32 images in [-1, 1] at the model size"}}  # fmt: skip
    info.update(metadata or {})
    return {"labels.txt": "\n".join(description.labels) + "\n", "preprocessing.json": json.dumps(info, indent=2) + "\n"}


def save_saved_model(model, path, description, top_k=5, metadata=None):
    """Writes a classifier's SavedModel to `path`, which must not exist yet (no atomicity: see `write_saved_model`),
    with `description`'s labels in the graph and its `assets`."""
    import tensorflow as tf

    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{str(path)!r} exists; save_saved_model writes only new directories.")
    with tempfile.TemporaryDirectory() as scratch:
        for name, text in assets(description, metadata).items():
            (Path(scratch) / name).write_text(text, encoding="utf-8")
        module, signatures = build_serving_module(model, list(description.labels), top_k=top_k)
        # Tracked assets are copied into the SavedModel's assets/ folder and found again by tf.saved_model.load.
        module.labels_file = tf.saved_model.Asset(str(Path(scratch) / "labels.txt"))
        module.preprocessing_file = tf.saved_model.Asset(str(Path(scratch) / "preprocessing.json"))
        tf.saved_model.save(module, str(path), signatures=signatures)
    return path


def save_named(model, path, names):
    """Writes a model of several outputs (feature maps) as a SavedModel at `path` (which must not exist; the export
    stages it), its outputs named `names`.

    `serving_default(images)`: uint8 RGB images (batch, any H, any W, 3), resized (bilinear) and scaled to [-1, 1]
    inside, as the classifiers' SavedModel does; `model_space(images)`: float32 images in [-1, 1] at the model's
    size. Both return {name: output}.
    """
    import tensorflow as tf

    module, signatures = serving_module(model, named_call(model, names))
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path


class SavedModelRunner:
    """Runs an exported SavedModel: `model_space` for model-space tensors, `serving_default` for raw uint8 images
    (resized and scaled inside). A classifier's outputs are its `logits`; feature maps' every output by name."""

    kind = "saved_model"
    threads = "tf-default"

    def __init__(self, path):
        import tensorflow as tf

        path = os.fspath(path)
        if not files.isfile(files.join(path, "saved_model.pb")):
            raise ExportError(f"{str(path)!r} is not a SavedModel directory (no saved_model.pb).")
        try:
            self.loaded = tf.saved_model.load(str(path))  # held: the signatures' variables live with it
        except Exception as exc:
            raise ExportError(f"Could not load the SavedModel at {str(path)!r}: {exc}") from exc
        missing = {SERVING_KEY, MODEL_SPACE_KEY} - set(self.loaded.signatures)
        if missing:
            raise ExportError(f"{str(path)!r} lacks the signatures {sorted(missing)}; re-export it with export/.")
        self.serving = self.loaded.signatures[SERVING_KEY]
        self.model_space = self.loaded.signatures[MODEL_SPACE_KEY]
        named = self.model_space.structured_outputs
        # A classifier's signatures also return the softmax (and serving_default the top k): its logits are what
        # it is judged and predicted by.
        self.names = ["logits"] if "logits" in named else sorted(named)
        self.output_kind = self.names[0]
        spec = self.model_space.structured_input_signature[1][INPUT]
        self.image_size = tuple(int(d) for d in spec.shape[1:3])
        labels_file = files.join(path, "assets", "labels.txt")
        self.labels = read_labels(labels_file) if files.isfile(labels_file) else None

    def _named(self, result):
        return {name: result[name].numpy() for name in self.names}

    def outputs(self, x, batch_size=64):
        x = check_batch(x, self.image_size, "The SavedModel's model_space signature")
        return gather([self._named(self.model_space(images=b)) for b in batches(x, batch_size)])

    def latency_ms(self, x1, runs=50, warmup=5):
        return median_ms(lambda: self._named(self.model_space(images=x1)), runs, warmup)

    def outputs_from_images(self, images, batch_size=64):
        """`serving_default` on raw uint8 images (N, H, W, 3), or a list of them of any sizes (one call each)."""
        images = check_images(images)
        one_size = len({image.shape for image in images}) == 1
        batched = [np.stack(b) for b in batches(images, batch_size)] if one_size else [i[None] for i in images]
        return gather([self._named(self.serving(images=b)) for b in batched])


NAME = "saved_model"
KINDS = ("classifier", "feature_maps")  # the kinds of model it writes (an embedder's vector has no serving form here)
OWNED = ("saved_model",)  # the names it writes at the top of `out`, `{stem}` the kind's (regular expressions)
SUFFIXES = ()  # a directory, not a file: `load_runner` opens any directory with saved_model.pb


def open(path, num_threads=1):
    """The runner of a written file (`load_runner`)."""
    return SavedModelRunner(path)


def modes(plan):
    return (None,)


def entry(plan, mode, v, staging, out, options):
    """Writes `saved_model/`, reloads it and judges both signatures; its report entry."""
    kind, classifier = plan.kind, plan.labels is not None
    if classifier:
        path = save_saved_model(plan.model, staging / NAME, plan.description, top_k=options.top_k)
    else:
        path = save_named(plan.model, staging / NAME, [o.name for o in plan.description.outputs])
    commit.fault_point("saved_model staged")
    runner = SavedModelRunner(path)
    found = kind.figures(runner.outputs(v.x), v.reference, v.truth)
    # The signature users call: raw uint8 images in, resize and scaling inside the graph.
    served = kind.figures(runner.outputs_from_images(v.images), v.reference, v.truth)
    budget = kind.BUDGETS[NAME]
    failures = kind.check_budget(found, budget) + [f"serving_default: {f}" for f in kind.check_budget(served, budget)]
    if classifier:
        fields = {"serving_default_max_abs_logit_diff": served["max_abs_logit_diff"]}
    else:
        fields = {"serving_default": served, "signatures": [SERVING_KEY, MODEL_SPACE_KEY]}
    size = runtime.dir_bytes(path)
    return record(plan, v, options, NAME, NAME, None, out, size, found, runner, budget, failures, **fields)


def lines(a, kind):
    """An entry's lines in the export table, below its budget line."""
    if "serving_default_max_abs_logit_diff" not in a:
        return []
    return [f"  serving_default on raw uint8 images: max |dlogit| {a['serving_default_max_abs_logit_diff']:.2e}"]
