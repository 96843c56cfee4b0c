"""The released `.npz` checkpoints: the original vit_jax layout, and big_vision's (plain or scan) converted to it."""

import os
import re
import zipfile
import zlib

import numpy as np

from keras_vit import files
from keras_vit.weights.errors import CheckpointError, unreadable_npz
from keras_vit.weights.loading import POSEMB_KEY, load_params

# big_vision names -> original names, inside an encoder block.
_BIG_VISION_BLOCK = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}


def read_npz(path):
    """Reads every array of an `.npz` checkpoint (no pickles); a clear `CheckpointError` if it is unreadable.

    A local file is read without a second copy: members stored uncompressed (`np.savez`, the released files) are
    memory-mapped as read-only arrays, compressed ones (`np.savez_compressed`) are read one array at a time.
    """
    path = os.fspath(path)
    if not files.exists(path):
        raise FileNotFoundError(f"Checkpoint not found: {path!r}")
    if not files.is_remote(path) and zipfile.is_zipfile(path):
        try:
            return _read_local_npz(path)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError) as err:
            raise unreadable_npz(path, err) from err
    try:
        archive = files.load_numpy(path, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as err:
        raise unreadable_npz(path, err) from err
    if not hasattr(archive, "files"):  # np.load returns a bare array for an .npy file, whatever its name
        raise CheckpointError(
            f"{path!r} is an .npy file holding one array {tuple(archive.shape)}, not an .npz checkpoint of named "
            f"tensors. Pass the .npz checkpoint (e.g. ViT-B_16.npz), or save named arrays with np.savez."
        )
    try:
        with archive:
            return {key: archive[key] for key in archive.files}
    # zlib.error: a corrupt np.savez_compressed member, found only when that member is decompressed.
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError) as err:
        raise unreadable_npz(path, err) from err


def _read_local_npz(path):
    out = {}
    with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                shape, fortran, dtype = _npy_header(member, version)
                if dtype.hasobject:
                    raise ValueError(f"member {info.filename!r} holds pickled Python objects; refusing to load it")
                if info.compress_type == zipfile.ZIP_STORED and dtype.itemsize:
                    offset = _member_data_offset(raw, info) + member.tell()
                    count = int(np.prod(shape))
                    order = "F" if fortran else "C"
                    mapped = np.memmap(raw, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
                    out[name] = np.asarray(mapped) if count else np.zeros(shape, dtype)  # plain, read-only views
                else:  # compressed: decompressed straight into the array, one member at a time
                    out[name] = np.lib.format.read_array(archive.open(info), allow_pickle=False)
    return out


def _npy_header(member, version):
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(member)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(member)
    return np.lib.format._read_array_header(member, version)  # 3.0 has no public reader


def _member_data_offset(raw, info):
    """Where a stored member's bytes start: after its local header (its name and extra field have their own lengths)."""
    raw.seek(info.header_offset)
    local = raw.read(30)
    if local[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local header for {info.filename!r}")
    name_length, extra_length = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
    return info.header_offset + 30 + name_length + extra_length


def to_original_layout(params):
    """Returns the checkpoint in the original vit_jax key layout, converting big_vision's when found.

    big_vision differs by a `params/` prefix (`params/img/` in a two-tower SigLIP or LiT file: its image tower), a
    top-level `pos_embedding` added before the class token is prepended (so it has no class row: a zero row is the
    exact equivalent), `*_0`/`LayerNorm_1` block names, and optionally all blocks stacked along a leading axis under
    `Transformer/encoderblock/` (scan layout).
    """
    params = _image_tower({re.sub(r"^(params/|opt/target/)", "", k): v for k, v in params.items()})
    out = {}
    for key, value in params.items():
        if key.startswith("Transformer/encoderblock/"):  # scan layout: unstack the layer axis
            rest = key[len("Transformer/encoderblock/") :]
            for i, layer_value in enumerate(value):
                out[f"Transformer/encoderblock_{i}/{rest}"] = layer_value
        else:
            out[key] = value
    renamed = {}
    for key, value in out.items():
        match = re.match(r"^(Transformer/encoderblock_\d+/)([^/]+)(/.*)$", key)
        if match and match.group(2) in _BIG_VISION_BLOCK:
            key = match.group(1) + _BIG_VISION_BLOCK[match.group(2)] + match.group(3)
        renamed[key] = value
    if "pos_embedding" in renamed:
        posemb = renamed.pop("pos_embedding")
        if "cls" in renamed:
            posemb = np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)
        renamed[POSEMB_KEY] = posemb
    return renamed


def _image_tower(params):
    """A big_vision two-tower checkpoint's image tower (`img/...`; the text tower and the temperature left out);
    any other checkpoint as it is."""
    if "embedding/kernel" in params or not any(k.startswith("img/") for k in params):
        return params
    return {k[len("img/") :]: v for k, v in params.items() if k.startswith("img/")}


def load_npz(model, path, *, resize_method="zoom", checkpoint_grid=None):
    """Loads a released ViT `.npz` checkpoint into a model made by `create_model`.

    Args:
        model: a `VisionTransformer` of the checkpoint's variant (any image size, any class count).
        path: the `.npz` file, in the original vit_jax layout or big_vision's (plain or scan).
        resize_method: how position embeddings are interpolated to the model's patch grid when it differs:
            "zoom" (default; the original code's corner-aligned linear interpolation), "bilinear", "bicubic".
        checkpoint_grid: the checkpoint's patch grid (gh, gw), needed only when it is not square.

    Returns:
        A `LoadReport`.

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: unreadable file, or a checkpoint that does not fit the model (missing, unexpected
            or mis-shaped tensors, listed in the message). Nothing is loaded then.
    """
    params = to_original_layout(read_npz(path))
    return load_params(
        model, params, source=path, resize_method=resize_method, checkpoint_grid=checkpoint_grid, caller="load_npz"
    )
