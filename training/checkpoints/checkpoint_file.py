"""One checkpoint file, `checkpoints/ckpt-<step>.npz`: its arrays (model, optimizer, metric sums by path), its JSON
header and the SHA-256 sealing both; a file that fails its checksum is unreadable."""

import hashlib
import json
import re
import struct
import zipfile
import zlib

import numpy as np

from keras_vit import files

NAME = re.compile(r"ckpt-(\d+)\.npz$")
# Header format 2: the SHA-256 covers the header too (paths, step, schedule, run id, fingerprint, history).
FORMAT = 2
# What reading a damaged file raises: a bad or truncated zip, an array cut short, a header that is not JSON or fails
# its checksum (ValueError). Anything else (PermissionError, a network error) is not evidence of damage.
DAMAGE = (ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error, struct.error)


class NonFiniteStateError(FloatingPointError):
    """A model or optimizer variable is NaN or infinite; such a state is never written as a checkpoint."""


def file_name(step):
    return f"ckpt-{step:08d}.npz"


def step_of(path):
    """The step a checkpoint file's name carries."""
    return int(NAME.search(path).group(1))


def checksum(arrays, header=None):
    """SHA-256 over `header` (a dict; its own "sha256" left out; None for format-1 files, which covered only their
    arrays) and the names, dtypes, shapes and bytes of `arrays` (a dict), in name order."""
    digest = hashlib.sha256()
    if header is not None:
        covered = {k: v for k, v in header.items() if k != "sha256"}
        digest.update(json.dumps(covered, sort_keys=True).encode("utf-8") + b"\0")
    for key in sorted(arrays):
        value = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def sealed(arrays, header):
    """`arrays` with the header array added: `header` in format `FORMAT`, as `read` will see it, and its checksum."""
    header = {**header, "format": FORMAT}
    header = json.loads(json.dumps(header))  # as `read` will see it (tuples become lists)
    header["sha256"] = checksum(arrays, header)
    return {**arrays, "header": np.frombuffer(json.dumps(header).encode("utf-8"), np.uint8)}


def read(path):
    """(header, arrays) of one checkpoint file; raises if it cannot be read or fails its checksum."""
    archive = files.load_numpy(path)
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError("an .npy file, not an .npz checkpoint")
    with archive:
        if "header" not in archive.files:
            raise ValueError("no header: not a checkpoint of this trainer")
        header = json.loads(archive["header"].tobytes().decode("utf-8"))
        if not isinstance(header, dict) or not isinstance(header.get("paths"), dict):
            raise ValueError("its header is not a checkpoint header")
        arrays = {k: archive[k] for k in archive.files if k != "header"}
    expected = header.pop("sha256", None)
    if expected is None:
        raise ValueError("its header carries no checksum, so nothing in it can be verified")
    # Format-1 files (no "format", no run id) had a checksum of their arrays only; a run resumes them once.
    covered = header if "format" in header else None
    if covered is not None and header["format"] != FORMAT:
        raise ValueError(f"header format {header['format']!r} is not one this version reads ({FORMAT})")
    if checksum(arrays, covered) != expected:
        raise ValueError("its header and arrays do not match the checksum it carries (a damaged or edited file)")
    listed = {**header["paths"], "metrics": header.get("metric_paths", [])}
    for group in ("model", "optimizer", "metrics"):
        if len(listed.get(group, ())) != sum(k.startswith(group + "/") for k in arrays):
            raise ValueError(
                f"its header lists {len(listed.get(group, ()))} {group} paths for a different number of arrays"
            )
    return header, arrays


_AUTO_SUFFIX = re.compile(r"_\d+(?=/|$)")


def pair_by_path(saved_paths, run_paths):
    """Pairs the run's variables with a checkpoint's by path: {run index: saved index}, and the unpaired of each.

    Exact paths pair first. Keras numbers automatic names per process (a second optimizer is `adam_w_1`, seed
    generators count up across models), so a run in a fresh process and one in a notebook name the same variable
    differently: what is left pairs by the path without those `_N` suffixes, in order.
    """
    pairs = {}
    left_saved = {}
    for i, path in enumerate(saved_paths):
        left_saved.setdefault(path, []).append(i)
    left_run = []
    for j, path in enumerate(run_paths):
        if left_saved.get(path):
            pairs[j] = left_saved[path].pop(0)
        else:
            left_run.append(j)
    by_stem = {}
    for i in sorted(i for indices in left_saved.values() for i in indices):
        by_stem.setdefault(_AUTO_SUFFIX.sub("", saved_paths[i]), []).append(i)
    missing = []
    for j in left_run:
        stem = by_stem.get(_AUTO_SUFFIX.sub("", run_paths[j]))
        if stem:
            pairs[j] = stem.pop(0)
        else:
            missing.append(run_paths[j])
    unused = [saved_paths[i] for indices in by_stem.values() for i in indices]
    return pairs, missing, sorted(unused)


def listing(names, limit=5):
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
