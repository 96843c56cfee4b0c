"""Top-k predictions from any artifact (.keras, SavedModel directory, .tflite) on image files."""

from pathlib import Path

import numpy as np

from keras_vit.images import DEFAULT_BACKGROUND
from keras_vit.labels import decode_predictions, softmax

from .errors import ExportError, check_count
from .formats import load_runner
from .io import read_image, read_labels

# What predict and similar read: one output that is a classifier's or an embedder's.
_SINGLE = ("logits", "probabilities", "embedding")


def _open(artifact, num_threads):
    """The runner of `artifact`; a feature-map file (several named outputs, no classes) refused in one line."""
    runner = load_runner(artifact, num_threads=num_threads)
    if runner.output_kind not in _SINGLE or len(runner.names) != 1:
        what = "a feature-map SavedModel" if runner.kind == "saved_model" else "a feature-map file"
        raise ExportError(
            f"{str(artifact)!r} is {what} (several named outputs, no classes): predict and similar take classifiers "
            "and image embedders. Read its outputs by name with export.load_runner(path).outputs(x)."
        )
    return runner


def predict(artifact, images, top_k=5, labels=None, num_threads=1, background=DEFAULT_BACKGROUND):
    """Classifies images with an exported (or Keras) model.

    Args:
        artifact: path to a `.keras` file, a SavedModel directory or a `.tflite` file.
        images: image file paths, or uint8 RGB arrays (H, W, 3) of any size.
        top_k: how many classes to return per image.
        labels: a labels file path or a list of names; default: the labels shipped with the artifact (for a
            `.tflite` file its `.json` sidecar, else the labels file embedded in its metadata).
        num_threads: LiteRT interpreter threads.
        background: what transparent pixels of image files are composited onto ("white", "black" or (R, G, B));
            use the one the model was trained with (`TrainConfig.image_background`).

    Returns:
        One dict per image: `{"image": name, "top_k": [{"id", "label", "probability"}, ...]}`.
    """
    check_count("top_k", top_k, 1, "--top-k")
    check_count("num_threads", num_threads, 1, "--num-threads")
    runner = _open(artifact, num_threads)
    names, arrays = [], []
    for i, image in enumerate(images):
        if isinstance(image, (str, Path)):
            names.append(str(image))
            arrays.append(read_image(image, background))
        else:
            names.append(f"image[{i}]")
            arrays.append(image)
    if not arrays:
        raise ExportError("No images given. Pass one or more image files.")
    outputs = runner.outputs_from_images(arrays)[runner.output_kind]
    if runner.output_kind == "embedding":  # an image embedder: the vector, its size and its norm
        return [
            {"image": name, "embedding": [float(v) for v in row], "size": int(row.size),
             "norm": float(np.linalg.norm(row.astype(np.float64)))}
            for name, row in zip(names, outputs)
        ]  # fmt: skip
    if isinstance(labels, (str, Path)):
        labels = read_labels(labels)
    labels = labels or runner.labels
    if labels is not None and len(labels) != outputs.shape[-1]:
        raise ExportError(f"{len(labels)} labels for a model with {outputs.shape[-1]} classes; they must match.")
    # TFLite models end in a softmax by default; the others (and `--tflite-output logits`) return logits.
    if runner.output_kind == "probabilities":
        probabilities = outputs.astype(np.float64)
    else:
        probabilities = softmax(outputs.astype(np.float64))
    # Without labels a class is named by its index: no ImageNet names are guessed from the class count here.
    class_names = labels or [str(c) for c in range(outputs.shape[-1])]
    try:
        decoded = decode_predictions(probabilities, top_k, class_names, from_logits=False)
    except ValueError as exc:  # NaN outputs: a broken model, said in one line
        raise ExportError(str(exc)) from None
    return [
        {"image": name, "top_k": [{"id": p.index, "label": p.name, "probability": p.score} for p in top]}
        for name, top in zip(names, decoded)
    ]


def format_predictions(results):
    """Readable lines: the image, then `index  probability  name` for each of its top-k classes (the name left
    out where it is only the index, for a model exported without class names)."""
    lines = []
    for result in results:
        lines.append(result["image"])
        if "embedding" in result:
            head = ", ".join(f"{v:.4f}" for v in result["embedding"][:4])
            lines.append(f"  embedding: {result['size']} values, L2 norm {result['norm']:.4f} ({head}, ...)")
            continue
        for t in result["top_k"]:
            name = "" if t["label"] == str(t["id"]) else f"  {t['label']}"
            lines.append(f"  {t['id']:>5}  {t['probability']:.4f}{name}")
    return "\n".join(lines)


def similar(artifact, first, second, num_threads=1, background=DEFAULT_BACKGROUND):
    """The cosine similarity of two images' vectors under an image embedder (a `.keras` head-less model, an
    `embedder_<mode>.tflite`, `embedder.onnx` or `embedder.xml`); image files or uint8 RGB arrays of any size."""
    check_count("num_threads", num_threads, 1, "--num-threads")
    runner = _open(artifact, num_threads)
    if runner.output_kind != "embedding":
        raise ExportError(
            f"{str(artifact)!r} is a classifier ({runner.output_kind} out), not an image embedder. Pass a "
            "num_classes=0 model (.keras) or an embedder_<mode>.tflite, embedder.onnx or embedder.xml file."
        )
    arrays = [read_image(x, background) if isinstance(x, (str, Path)) else x for x in (first, second)]
    a, b = np.asarray(runner.outputs_from_images(arrays)["embedding"], np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))
