"""Is a downloaded file what it claims to be (not a portal's HTML page, a cut file or another file)? Checks of an
`.npz`, a `.safetensors` file and a catalogue entry's size, reading headers only, before a download is cached."""

import json
import os
import re
import struct
import zipfile

# Publishers round their sizes (to 1 MiB in the AugReg README, 0.01 MiB in vit_jax.ipynb); 1 % covers any
# rounding, yet no other model of the family is that close in size to the one named.
SIZE_TOLERANCE = 0.01
_HEADER_LIMIT = 100 << 20  # safetensors refuses headers over 100 MB; so does this check
_PREFIX = re.compile(r"^(params/|opt/target/)")


class ContentError(ValueError):
    """A file whose content is not what its name or its catalogue entry says."""


def check(path, entry=None):
    """Raises `ContentError` unless the local file at `path` is what its name (and `entry`, if any) says."""
    name = os.path.basename(path).removesuffix(".part")
    if name.endswith(".npz"):
        members = npz_members(path)
        if entry is not None:
            _check_entry_keys(members, entry)
    elif name.endswith(".safetensors"):
        safetensors_header(path)
    if entry is not None:  # after the format: "not a zip" says more about a portal's page than its size does
        _check_size(path, entry)


def _check_size(path, entry):
    size = os.path.getsize(path)
    if entry.size_bytes is not None and size != entry.size_bytes:
        raise ContentError(f"{size} bytes, not the published {entry.size_bytes}")
    if entry.size_mib is not None and abs(size / 2**20 - entry.size_mib) > SIZE_TOLERANCE * entry.size_mib:
        raise ContentError(
            f"{size / 2**20:.2f} MiB ({size} bytes), not the published {entry.size_mib:g} MiB ({entry.size_source})"
        )


def npz_members(path):
    """{array name: (shape, dtype string)} of an `.npz`, read from its members' headers; `ContentError` if not one."""
    import numpy as np

    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if not infos:
                raise ContentError("an empty zip archive")
            bad = archive.testzip()  # reads each member once, through zlib for compressed ones; nothing is kept
            if bad is not None:
                raise ContentError(f"a zip archive whose member {bad!r} fails its CRC-32")
            members = {}
            for info in infos:
                if not info.filename.endswith(".npy"):
                    raise ContentError(f"a zip archive holding {info.filename!r}, which is no .npy array")
                with archive.open(info) as f:
                    shape, dtype = _npy_header(np, f)
                if dtype.hasobject:
                    raise ContentError(f"an archive whose {info.filename!r} holds Python objects, not numbers")
                members[info.filename.removesuffix(".npy")] = (tuple(shape), dtype.str)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as err:
        raise ContentError(f"not a readable zip archive ({type(err).__name__}: {err})") from None
    except ValueError as err:
        if isinstance(err, ContentError):
            raise
        raise ContentError(f"a zip archive with a member that is no .npy array ({err})") from None
    return members


def _npy_header(np, f):
    version = np.lib.format.read_magic(f)
    read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:  # format 3.0 (UTF-8 field names) has no public reader
        shape, _, dtype = np.lib.format._read_array_header(f, version)
    else:
        shape, _, dtype = read(f)
    return shape, dtype


def _required_keys(entry):
    keys = ["embedding/kernel", "Transformer/encoder_norm/scale", "head/kernel"]
    if entry.pooling == "token":
        keys.append("cls")
    if "+" in entry.variant:  # a hybrid: the ResNet stem comes first
        keys.append("conv_root/kernel")
    return keys


def _check_entry_keys(members, entry):
    names = {_PREFIX.sub("", k): v for k, v in members.items()}
    missing = [k for k in _required_keys(entry) if k not in names]
    if missing:
        shown = ", ".join(sorted(names)[:4]) + (" ..." if len(names) > 4 else "")
        raise ContentError(f"an .npz without {', '.join(missing)} (it holds {shown}), so no ViT checkpoint")
    head = names["head/kernel"][0]
    if not head or head[-1] != entry.num_classes:
        raise ContentError(f"an .npz whose head is {head}, not {entry.num_classes} classes wide as the entry says")


def safetensors_header(path):
    """(parsed header, offset of the data) of a `.safetensors` file; `ContentError` unless its tensors fill the file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        start = f.read(8)
        if len(start) < 8:
            raise ContentError(f"{size} bytes, too short for a safetensors header")
        (length,) = struct.unpack("<Q", start)
        if length > min(_HEADER_LIMIT, size - 8):
            raise ContentError(f"no safetensors file (its first 8 bytes give a {length}-byte header)")
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, TypeError, IndexError) as err:
        raise ContentError(f"no safetensors file (its header does not parse: {err})") from None
    if 8 + length + end != size:
        raise ContentError(f"a safetensors file whose tensors end at byte {8 + length + end} of {size}")
    return header, 8 + length
