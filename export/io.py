"""Reading models, labels and images (the writes go through keras_vit.files)."""

import io
import os
import zipfile

import numpy as np

from keras_vit import files
from keras_vit import images as image_reader

from .errors import ExportError


def load_keras_model(path):
    """Loads a `.keras` file with the keras_vit layers registered; clear errors for anything else.

    Raises:
        ExportError: the path is missing, is not a `.keras` archive, or does not hold a Keras model.
    """
    import keras

    import keras_vit  # noqa: F401  (registers the custom layers so deserialisation finds them)

    path = os.fspath(path)
    if not files.isfile(path):
        raise ExportError(f"No model file at {str(path)!r}. Pass a .keras file or a training workdir.")
    if not path.endswith(".keras"):
        raise ExportError(
            f"Expected a Keras v3 model file ending in .keras. Received: {str(path)!r}. "
            "Save the model with model.save('model.keras') or pass a training workdir."
        )
    # Keras reports a truncated or foreign archive as "File not found"; check the container first.
    if not zipfile.is_zipfile(io.BytesIO(files.read_bytes(path)) if files.is_remote(path) else path):
        raise ExportError(
            f"{str(path)!r} is not a .keras archive (a .keras file is a zip; this one is truncated or something "
            "else). Re-save the model with model.save(...)."
        )
    try:
        # compile=False: export needs the network only; a training run may have saved an optimizer whose
        # custom schedule lives in training/, which export/ must not import.
        model = keras.saving.load_model(path, compile=False)
    except Exception as exc:  # Keras raises many types for broken archives
        raise ExportError(f"Could not load a Keras model from {str(path)!r}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, keras.Model):
        raise ExportError(f"{str(path)!r} holds a {type(model).__name__}, not a keras.Model.")
    return model


def read_labels(path):
    """Reads class names, one per line (blank trailing lines ignored)."""
    path = os.fspath(path)
    if not files.isfile(path):
        raise ExportError(f"No labels file at {str(path)!r}. Expected class names, one per line.")
    labels = files.read_text(path).splitlines()
    while labels and not labels[-1].strip():
        labels.pop()
    if not labels:
        raise ExportError(f"The labels file {str(path)!r} is empty. Expected class names, one per line.")
    return labels


def model_labels(model):
    """A model's class names (its `class_names`), else None."""
    names = getattr(model, "class_names", None)
    return None if names is None else list(names)


def check_labels(labels, num_classes):
    """`labels` as a list of strings after checking they can be written one per line and match the outputs.

    Raises:
        ExportError: a count that does not match `num_classes`, or a name that is blank or has a line break
            (labels.txt, in the TFLite metadata and the SavedModel assets, holds one name per line).
    """
    labels = [str(label) for label in labels]
    if len(labels) != num_classes:
        raise ExportError(f"{len(labels)} labels for a model with {num_classes} outputs. They must match.")
    for i, label in enumerate(labels):
        if "\n" in label or "\r" in label or not label.strip():
            problem = "has a line break" if label.strip() else "is blank"
            raise ExportError(
                f"Class name {i} ({label!r}) {problem}, but the exported labels.txt holds one name per line. Rename "
                "that class (set model.class_names, or fix the dataset's class names) or pass --labels FILE."
            )
    return labels


def read_image(path, background=image_reader.DEFAULT_BACKGROUND):
    """Decodes an image file to a uint8 RGB array (H, W, 3) with `keras_vit.images.read_image`, the reader
    training uses: 16-bit scaled to 8, EXIF orientation applied, transparency composited onto `background`.

    Raises:
        ExportError: the file is missing or is not a decodable image.
    """
    path = os.fspath(path)
    try:
        return image_reader.read_image(path, background=background)
    except FileNotFoundError as exc:
        raise ExportError(f"No image file at {str(path)!r}.") from exc
    except ValueError as exc:  # ImageReadError names the file and the reason; a bad background says so
        raise ExportError(str(exc)) from exc


def load_image_set(path, background=image_reader.DEFAULT_BACKGROUND):
    """Reads a set of images and optional labels from an `.npz` (`images`, optional `labels`) or a folder.

    Returns:
        (images, labels): images a list of uint8 (H, W, 3) arrays, or one uint8 (N, H, W, 3) array for an
        `.npz`; labels an int64 array or None.
    """
    path = os.fspath(path)
    if files.isdir(path):
        suffixes = image_reader.image_suffixes()
        paths = [files.join(path, name) for name in files.listdir(path) if image_reader.is_image_path(name, suffixes)]
        if not paths:
            raise ExportError(
                f"The folder {str(path)!r} holds no images (any format Pillow reads: .png, .jpg, .webp, .tiff, "
                "...). Pass a folder of images or an .npz with an 'images' array."
            )
        return [read_image(p, background) for p in paths], None
    if not path.endswith(".npz") or not files.isfile(path):
        raise ExportError(
            f"Expected an .npz file with an 'images' array (uint8, N x H x W x 3) or a folder of images. "
            f"Received: {str(path)!r}"
        )
    try:
        with files.load_numpy(path) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:
        raise ExportError(f"Could not read {str(path)!r} as an .npz archive: {exc}") from exc
    if "images" not in arrays:
        raise ExportError(f"{str(path)!r} has no 'images' array (it has {sorted(arrays)}).")
    images = arrays["images"]
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ExportError(
            f"{str(path)!r}: 'images' must be uint8 shaped (N, H, W, 3) (raw RGB pixels). "
            f"Received dtype={images.dtype}, shape={images.shape}."
        )
    labels = arrays.get("labels")
    if labels is not None:
        labels = np.asarray(labels).astype(np.int64).reshape(-1)
        if len(labels) != len(images):
            raise ExportError(f"{str(path)!r}: {len(images)} images but {len(labels)} labels.")
    return images, labels
