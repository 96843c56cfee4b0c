"""The TFLite metadata read back as a dict (the fields MediaPipe Tasks read), and its associated files, read with a size
cap since a model read here may come from elsewhere."""

import io
import zipfile
import zlib

from ..errors import ExportError
from .metadata import METADATA_NAME, OUTPUT_KINDS, decoded, metadata_schema, model_schema

# The largest associated file read from a model's metadata: 21,843 ImageNet-21k class names take under 1 MB.
MAX_ASSOCIATED_FILE_BYTES = 16 * 2**20


def _text(value):
    return None if value is None else decoded(value)


def read_metadata(flatbuffer):
    """The metadata of a TFLite model as a dict, or None when it has none.

    Returns:
        {"name", "description", "version", "author", "license", "min_parser_version", "input": {"name",
        "mean", "std", "color_space", "size", "min", "max"}, "output": {"name", "kind", "min", "max",
        "labels_file"}, "labels": [...] or None}.
    """
    m = metadata_schema()
    meta = _read_model_metadata(flatbuffer, m)
    if meta is None:
        return None
    sub = meta.subgraphMetadata[0]
    inp, out = sub.inputTensorMetadata[0], sub.outputTensorMetadata[0]
    labels_file = next(
        (decoded(f.name) for f in out.associatedFiles or [] if f.type == m.AssociatedFileType.TENSOR_AXIS_LABELS), None
    )
    out_name = _text(out.name)
    return {
        "name": _text(meta.name),
        "description": _text(meta.description),
        "version": _text(meta.version),
        "author": _text(meta.author),
        "license": _text(meta.license),
        "min_parser_version": _text(meta.minParserVersion),
        "input": _input_fields(inp, m),
        "output": {
            "name": out_name,
            "kind": out_name if out_name in (*OUTPUT_KINDS, "embedding") else None,
            "min": _stats(out.stats, "min"),
            "max": _stats(out.stats, "max"),
            "labels_file": labels_file,
        },
        "labels": None if labels_file is None else _read_labels(flatbuffer, labels_file),
    }


def _read_model_metadata(flatbuffer, m):
    """The unpacked ModelMetadataT of a TFLite model (one subgraph, one input, one output), or None."""
    model = model_schema().Model.GetRootAs(bytearray(flatbuffer), 0)
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if decoded(entry.Name()) == METADATA_NAME:
            data = model.Buffers(entry.Buffer()).DataAsNumpy()
            break
    else:
        return None
    if isinstance(data, int) or not m.ModelMetadata.ModelMetadataBufferHasIdentifier(data.tobytes(), 0):
        raise ExportError(f"The model's {METADATA_NAME} buffer does not hold metadata (identifier M001 missing).")
    meta = m.ModelMetadataT.InitFromPackedBuf(bytearray(data.tobytes()), 0)
    if not meta.subgraphMetadata:
        raise ExportError("The model's metadata describes no subgraph; re-export it with `python -m export`.")
    sub = meta.subgraphMetadata[0]
    if len(sub.inputTensorMetadata or []) != 1 or len(sub.outputTensorMetadata or []) != 1:
        raise ExportError("Expected metadata for one input and one output tensor; re-export with `python -m export`.")
    return meta


def _input_fields(inp, m):
    normalization = next(
        (u.options for u in inp.processUnits or [] if u.optionsType == m.ProcessUnitOptions.NormalizationOptions),
        None,
    )
    image = inp.content.contentProperties if inp.content is not None else None
    size = getattr(image, "defaultSize", None)
    names = {v: k for k, v in vars(m.ColorSpaceType).items() if not k.startswith("_")}
    return {
        "name": _text(inp.name),
        "mean": None if normalization is None else [float(x) for x in normalization.mean],
        "std": None if normalization is None else [float(x) for x in normalization.std],
        "color_space": names.get(getattr(image, "colorSpace", None)),
        "size": None if size is None else [int(size.height), int(size.width)],
        "min": _stats(inp.stats, "min"),
        "max": _stats(inp.stats, "max"),
    }


def _stats(stats, key):
    v = getattr(stats, key, None) if stats is not None else None
    return None if v is None or len(v) == 0 else [float(x) for x in v]


def _read_labels(flatbuffer, labels_file):
    try:
        labels = read_associated_file(flatbuffer, labels_file).decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise ExportError(f"The labels file {labels_file!r} is not UTF-8 ({err}); re-export the model.") from err
    while labels and not labels[-1].strip():
        labels.pop()
    return labels


def associated_files(flatbuffer):
    """{name: bytes} of the zip appended to a TFLite model (empty when there is none). Decompresses every entry:
    for this project's own models only; `read_associated_file` reads one entry of an untrusted model."""
    try:
        with zipfile.ZipFile(io.BytesIO(bytes(flatbuffer))) as zf:
            return {info.filename: zf.read(info) for info in zf.infolist()}
    except zipfile.BadZipFile:
        return {}


def read_associated_file(flatbuffer, name, max_bytes=MAX_ASSOCIATED_FILE_BYTES):
    """The bytes of the associated file `name` of a TFLite model, the only entry of its zip that is opened.

    A model from elsewhere may carry a zip bomb (a few MB that decompress to GBs) in any entry: the others are
    never decompressed, and this one is refused when its declared size is over `max_bytes` and read as a stream
    of at most `max_bytes + 1` bytes (in case the declared size lies).

    Raises:
        ExportError: no such entry, or one over `max_bytes`, naming it and the fix.
    """
    too_big = (
        f"The model's associated file {name!r} is over the {max_bytes}-byte limit for metadata files; it is not "
        f"read. Re-export the model with `python -m export` (its metadata then holds one labels file)."
    )
    try:
        with zipfile.ZipFile(io.BytesIO(bytes(flatbuffer))) as zf:
            try:
                info = zf.getinfo(name)
            except KeyError:
                raise ExportError(
                    f"The metadata names {name!r}, which is not in the model's associated files."
                ) from None
            if info.file_size > max_bytes:
                raise ExportError(too_big)
            with zf.open(info) as entry:
                data = entry.read(max_bytes + 1)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError) as err:
        raise ExportError(
            f"Cannot read the associated file {name!r} of the model ({type(err).__name__}: {err}). Re-export the "
            f"model with `python -m export`."
        ) from err
    if len(data) > max_bytes:
        raise ExportError(too_big)
    return data
