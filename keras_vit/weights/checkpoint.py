"""What every format reader returns, `Checkpoint` (tensors in the original vit_jax layout, the model options, class
names and preprocessing), and the file helpers the format modules share."""

import dataclasses
import json
import os

import numpy as np

from keras_vit import files
from keras_vit.weights import content
from keras_vit.weights.errors import CheckpointError, unreadable_safetensors

# keras-vit's input contract: (pixels - 127.5) / 127.5, i.e. mean 0.5 and std 0.5 on pixels scaled to 0..1.
CONTRACT_MEAN = (0.5, 0.5, 0.5)
CONTRACT_STD = (0.5, 0.5, 0.5)


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint read from any format, converted to the original layout.

    Attributes:
        params: {original vit_jax key: numpy array}.
        options: `ViTConfig` fields the checkpoint states (shapes, pooling, GELU form, LayerNorm epsilon, ...).
        class_names: the head's class names in output order, or None.
        mean, std: per-channel normalisation of 0..1 pixels the weights expect.
        format: "npz", "timm", "transformers" or "keras_hub".
        source: the path it was read from.
        naflex: for a NaFlex folder (weights/naflex.py), {"max_num_patches": N, "style": its library's
            preprocessing}; None otherwise.
    """

    params: dict
    options: dict
    class_names: tuple | None = None
    mean: tuple = CONTRACT_MEAN
    std: tuple = CONTRACT_STD
    format: str = "npz"
    source: str = ""
    naflex: dict | None = None


def read_json(path):
    """A JSON file as a dict; a one-line `CheckpointError` when it is not JSON."""
    try:
        return json.loads(files.read_text(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"Cannot read {os.fspath(path)!r} as JSON ({err}); the file is corrupt.") from err


def write_json(path, data):
    files.atomic_write_text(path, json.dumps(data, indent=2) + "\n")


# safetensors dtype -> numpy's (little-endian, as the format stores them). BF16 has no numpy dtype.
_NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1"}
_NUMPY_DTYPES |= {"U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    """Every tensor of a `.safetensors` file as numpy arrays (no torch needed).

    A local file is memory-mapped: the arrays are read-only views of the file, so its bytes are read once, when
    used, and never held twice. A URL (or a dtype numpy lacks) goes through safetensors' own numpy API.
    """
    from safetensors import SafetensorError

    try:
        if not files.is_remote(path):
            header, start = content.safetensors_header(path)
            tensors = {k: t for k, t in header.items() if k != "__metadata__"}
            if all(t["dtype"] in _NUMPY_DTYPES for t in tensors.values()):
                return _mapped_tensors(path, tensors, start)
            return _safe_open_tensors(path)
        from safetensors.numpy import load

        return dict(load(files.read_bytes(path)))
    except (SafetensorError, ValueError) as err:  # content.ContentError is a ValueError
        raise unreadable_safetensors(path, err) from err


def _mapped_tensors(path, tensors, start):
    size = os.path.getsize(path) - start
    if size == 0:
        return {k: np.zeros(t["shape"], _NUMPY_DTYPES[t["dtype"]]) for k, t in tensors.items()}
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(size,))
    out = {}
    for key, t in tensors.items():
        begin, end = t["data_offsets"]
        out[key] = np.asarray(data[begin:end]).view(_NUMPY_DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def _safe_open_tensors(path):
    from safetensors import safe_open

    with safe_open(os.fspath(path), framework="numpy") as f:
        return {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (safe_open is not iterable)


def write_safetensors(path, tensors, metadata=None):
    """Writes float32 contiguous tensors atomically, with the `{"format": "pt"}` metadata PyTorch loaders expect."""
    from safetensors.numpy import save

    arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
    files.atomic_write_bytes(path, save(arrays, metadata={"format": "pt", **(metadata or {})}))


def leftover_error(source, library, keys):
    """The error for tensors a converter did not consume: parts of the other model keras-vit does not have."""
    keys = sorted(keys)
    shown = ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
    return CheckpointError(
        f"{os.fspath(source)!r} holds {library} tensors with no counterpart in keras-vit's ViT: {shown}. "
        f"It is another architecture (or a ViT variant keras-vit does not build); it cannot be loaded."
    )


def linear_to_kernel(weight):
    """PyTorch Linear weight (out, in) -> Keras/Flax kernel (in, out)."""
    return np.asarray(weight).T


def conv_to_hwio(weight):
    """PyTorch Conv2d weight (out, in, kh, kw) -> HWIO (kh, kw, in, out)."""
    return np.asarray(weight).transpose(2, 3, 1, 0)


def hwio_to_conv(kernel):
    return np.asarray(kernel).transpose(3, 2, 0, 1)


def split_heads(kernel, num_heads):
    """(D, D) kernel -> (D, H, D/H), the checkpoint's query/key/value layout."""
    d_in, d_out = kernel.shape
    return kernel.reshape(d_in, num_heads, d_out // num_heads)


def is_contract_normalisation(mean, std):
    return np.allclose(mean, CONTRACT_MEAN, atol=1e-6) and np.allclose(std, CONTRACT_STD, atol=1e-6)
