"""SavedModel export: a uint8-image serving signature with preprocessing inside, plus a model-space one."""

import json
import tempfile
from pathlib import Path

from keras_vit import files

from . import preprocessing

SERVING_KEY = "serving_default"
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
        out = outputs(preprocessing.model_space_in_graph(images, (height, width)))
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
