"""Reading what the command line is given: a model (.keras, training workdir, or variant + .npz) and images."""

import io
import os
import zipfile

import keras
import numpy as np

from keras_vit import files
from keras_vit.images import DEFAULT_BACKGROUND, read_image
from keras_vit.inspect.layout import token_layout
from keras_vit.models import create_model, get_variant
from keras_vit.preprocessing import scale_pixels
from keras_vit.weights import load_npz, read_npz, to_original_layout


def load_model(spec, *, variant=None, npz=None, image_size=None):
    """Loads the model to inspect.

    Args:
        spec: a `.keras` file; a training workdir holding `model.keras`; an `.npz` checkpoint (with `variant`);
            or a variant name such as "B/16" (with `npz`).
        variant: the checkpoint's variant, for an `.npz`.
        npz: the checkpoint, when `spec` is a variant name.
        image_size: input size for a model built from a checkpoint (int or (h, w)); default: the variant's.

    Returns:
        The model (checked to be a keras_vit Vision Transformer).

    Raises:
        FileNotFoundError: a file that does not exist.
        ValueError: anything else that cannot work, with the reason and what would.
    """
    spec = os.fspath(spec)
    if files.isdir(spec):
        inner = files.join(spec, "model.keras")
        if not files.exists(inner):
            raise FileNotFoundError(
                f"{spec!r} is a directory without model.keras; pass a .keras file, a training workdir, or a "
                f"checkpoint .npz with --variant."
            )
        spec = inner
    if spec.endswith(".keras"):
        if variant or npz:
            raise ValueError("--variant and --npz build a model from a checkpoint; not for a .keras file.")
        return _load_keras(spec)
    if spec.endswith(".npz"):
        if not variant:
            raise ValueError(f"Loading the checkpoint {spec!r} needs its variant: add --variant (e.g. --variant B/16).")
        return _from_checkpoint(variant, spec, image_size)
    if npz:
        if variant:
            raise ValueError(f"Got both a variant {spec!r} as MODEL and --variant {variant!r}; pass one of them.")
        return _from_checkpoint(spec, npz, image_size)
    if _is_variant(spec):
        raise ValueError(f"{spec!r} is a variant name: add --npz CHECKPOINT to load its weights.")
    if not files.exists(spec):
        raise FileNotFoundError(f"Model file not found: {spec!r}.")
    raise ValueError(
        f"Do not know how to read the model {spec!r}: pass a .keras file, a training workdir, a checkpoint .npz "
        f"with --variant, or a variant name with --npz."
    )


def _is_variant(name):
    try:
        get_variant(name)
    except ValueError:
        return False
    return True


def _load_keras(path):
    if not files.exists(path):
        raise FileNotFoundError(f"Model file not found: {path!r}.")
    if not zipfile.is_zipfile(path if not files.is_remote(path) else io.BytesIO(files.read_bytes(path))):
        raise ValueError(f"{path!r} is not a readable .keras archive (truncated or another format); save it again.")
    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as err:  # Keras raises many types here; say which file and why, once.
        raise ValueError(f"Could not load {path!r} as a Keras model ({type(err).__name__}: {err}).") from err
    token_layout(model)  # raises a clear error for a model that is not a ViT
    return model


def _from_checkpoint(variant, path, image_size):
    if not files.exists(path):
        raise FileNotFoundError(f"Checkpoint not found: {path!r}.")
    params = to_original_layout(read_npz(path))
    has_cls = "cls" in params
    overrides = dict(
        num_classes=int(params["head/kernel"].shape[-1]) if "head/kernel" in params else 0,
        class_token=has_cls,
        pooling="token" if has_cls else "gap",
    )
    if "pre_logits/kernel" in params:
        overrides["representation_size"] = int(params["pre_logits/kernel"].shape[-1])
    if image_size is not None:
        overrides["image_size"] = image_size
    model = create_model(variant, **overrides)
    load_npz(model, path)
    return model


def load_images(paths, layout, *, resize=True, background=DEFAULT_BACKGROUND):
    """Reads image files (any format Pillow reads) or `.npz`/`.npy` arrays of uint8 images, as float32 in [-1, 1].

    Image files go through `keras_vit.images.read_image`, the reader training uses (16-bit scaled to 8,
    EXIF orientation applied, transparency composited onto `background`), in the model's channels (RGB or
    grey); then they are resized bilinearly to the model's input size and scaled with (x - 127.5) / 127.5, the
    project's preprocessing. An `.npz` is read from its `images` array (a training workdir's
    `samples/heldout.npz`).

    Args:
        paths: files.
        layout: the model's `TokenLayout`.
        resize: False to require the images to be at the model's size already (else a clear error).
        background: "white", "black" or (R, G, B), for images with transparency.

    Returns:
        float32 (B, H, W, C).
    """
    batches = []
    for path in paths:
        path = os.fspath(path)
        if not files.exists(path):
            raise FileNotFoundError(f"Image file not found: {path!r}.")
        if path.endswith((".npz", ".npy")):
            pictures = _read_arrays(path)
        else:
            pictures = _read_picture(path, layout.channels, background)
        if pictures.ndim != 4 or pictures.shape[-1] != layout.channels:
            raise ValueError(
                f"{path!r} holds images shaped {pictures.shape}; the model takes (N, H, W, {layout.channels}) "
                f"images with {layout.channels} channel(s)."
            )
        if tuple(pictures.shape[1:3]) != tuple(layout.image_size):
            if not resize:
                raise ValueError(
                    f"{path!r} is {pictures.shape[1]}x{pictures.shape[2]} but the model's input is fixed at "
                    f"{layout.image_size[0]}x{layout.image_size[1]}; resize it first, or drop --no-resize."
                )
            pictures = keras.ops.convert_to_numpy(
                keras.ops.image.resize(pictures.astype(np.float32), layout.image_size, interpolation="bilinear")
            )
        batches.append(pictures.astype(np.float32))
    images = np.concatenate(batches)
    return scale_pixels(images)


def heldout_labels(path, count):
    """The first `count` entries of the `labels` array of an `.npz` (a workdir's `samples/heldout.npz`), or None
    when it has none (the rollout figure then shows the predictions alone)."""
    with files.load_numpy(path, allow_pickle=False) as data:
        return data["labels"][:count].astype(np.int64) if "labels" in data.files else None


def _read_picture(path, channels, background):
    if channels not in (1, 3):
        raise ValueError(f"Image files can be read for 1- or 3-channel models only; this model has {channels}.")
    return read_image(path, background=background, channels=channels)[None]  # ImageReadError is a ValueError


def _read_arrays(path):
    data = files.load_numpy(path, allow_pickle=False)
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            if "images" not in data.files:
                raise ValueError(f"{path!r} has no 'images' array (it has {data.files}).")
            data = data["images"]
    if data.dtype != np.uint8:
        raise ValueError(f"{path!r}: images must be uint8 pixels (0..255); received dtype {data.dtype}.")
    return data[None] if data.ndim == 3 else data


def synthetic_images(layout, count=4):
    """A few deterministic test pictures (gradient, checkerboard, disc, blobs) at the model's size, in [-1, 1]."""
    height, width = layout.image_size
    rows, cols = np.meshgrid(np.linspace(0, 1, height), np.linspace(0, 1, width), indexing="ij")
    disc = ((rows - 0.5) ** 2 + (cols - 0.4) ** 2 < 0.08).astype(float)
    checker = ((np.floor(rows * 4) + np.floor(cols * 4)) % 2).astype(float)
    blobs = 0.5 + 0.5 * np.sin(6 * rows) * np.cos(5 * cols)
    planes = [
        np.stack([cols, rows, 1 - cols], axis=-1),
        np.stack([checker, 0.3 * checker, 1 - checker], axis=-1),
        np.stack([disc, 0.8 * disc, 0.2 + 0 * disc], axis=-1),
        np.stack([blobs, 1 - blobs, 0.5 * blobs], axis=-1),
    ]
    pictures = np.stack([planes[i % len(planes)] for i in range(count)])
    if layout.channels != 3:
        pictures = np.repeat(pictures.mean(axis=-1, keepdims=True), layout.channels, axis=-1)
    return (pictures * 2.0 - 1.0).astype(np.float32)
