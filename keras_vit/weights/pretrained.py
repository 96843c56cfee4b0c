"""`from_pretrained`, whose first step needs no Keras: a local weights file that is not what its name says (a
`.safetensors` header, an `.npz` zip directory) is refused before the framework is imported."""

import os
import zipfile

from keras_vit import files
from keras_vit.weights import config_precheck, content, sources
from keras_vit.weights.errors import unknown_folder, unreadable_keras, unreadable_npz, unreadable_safetensors

NPY_MAGIC = b"\x93NUMPY"
# The weights file of the folder layouts that hold safetensors (timm, transformers).
FOLDER_WEIGHTS = "model.safetensors"


def check_local(source):
    """Raises `CheckpointError` for a local `.safetensors` / `.npz` file, or a folder's `model.safetensors`, that
    cannot be what its name says. Anything else (a catalogue name, a Hub id, a URL, a missing path) is left to
    the readers, which word those cases."""
    if not isinstance(source, str | os.PathLike) or files.is_remote(source):
        return
    path = os.fspath(source)
    if os.path.isdir(path):
        path = os.path.join(path, FOLDER_WEIGHTS)
    if not os.path.isfile(path):
        return
    if path.endswith(".safetensors"):
        try:
            content.safetensors_header(path)
        except content.ContentError as err:
            raise unreadable_safetensors(path, err) from None
    elif path.endswith(".keras"):
        try:
            zipfile.ZipFile(path).close()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as err:
            raise unreadable_keras(path, err) from None
    elif path.endswith(".npz"):
        with open(path, "rb") as f:
            if f.read(len(NPY_MAGIC)) == NPY_MAGIC:
                return  # a lone .npy array under an .npz name: read_npz says what it is
        try:
            zipfile.ZipFile(path).close()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as err:
            raise unreadable_npz(path, err) from None


def check_source(source):
    """`check_local`, and a local source no reader could take, still without Keras: a path that does not exist
    and is no catalogue name (`FileNotFoundError`, the closest names in it), a folder with neither a config.json
    nor a single `.npz` (`CheckpointError`). The messages are the readers' own. Nothing is downloaded."""
    check_local(source)
    if not isinstance(source, str | os.PathLike) or files.is_remote(source):
        return
    path = os.fspath(source)
    if not os.path.exists(path):
        sources.catalogue_entry(path)
        return
    if os.path.isdir(path):
        config_precheck.check_folder(path)
    if os.path.isdir(path) and not _may_hold_a_checkpoint(path):
        raise unknown_folder(path)


def _may_hold_a_checkpoint(folder):
    """What `model_io._read_local` reads from a folder: a config.json (each layout's own file) or one `.npz`."""
    names = os.listdir(folder)
    return "config.json" in names or sum(name.endswith(".npz") for name in names) == 1


def from_pretrained(source, **overrides):
    """Builds the model a checkpoint describes and loads it.

    Args:
        source: a catalogue name (`python -m keras_vit.weights list`), a Hub id (`hf://timm/NAME`,
            `hf://google/vit-...`, a keras-hub preset repo), a URL (`https://`, `gs://`), or a local `.npz` file or
            folder in timm, transformers or keras-hub layout. Downloads happen once, into the caches.
        **overrides: any `ViTConfig` field (`image_size=384` interpolates the position embeddings;
            `num_classes=10` starts a zero-initialised head, with a warning, as `load_npz` does), `name`,
            `class_names`, and `resize_method` ("zoom", "bilinear", "bicubic") for the position embeddings.
            `naflex=True` builds a `NaFlexViT` (SigLIP 2 NaFlex: patch sequences of any aspect ratio) from a
            SigLIP-style checkpoint, with `max_num_patches` (N); a transformers `siglip2` or timm `naflexvit_*`
            folder builds one by default (`naflex=False`: the fixed-resolution `VisionTransformer` instead).

    Returns:
        A `VisionTransformer` (or `NaFlexViT`) taking images in [-1, 1], with `model.class_names` when the
        checkpoint names its classes. The checkpoint's own normalisation is folded into the patch embedding
        (module docstring of keras_vit/weights/model_io.py).

    Raises:
        FileNotFoundError: a source that is no path, URL, Hub id or catalogue name (with the closest names).
        keras_vit.weights.download.DownloadError: a failed download (names the URL and where to place the file).
        CheckpointError: unreadable source, unknown folder layout, or weights that do not fit the overrides; a
            local file that cannot be what its name says is refused before Keras is imported.
    """
    check_source(source)
    from keras_vit.weights import model_io

    return model_io.load_pretrained(source, **overrides)
