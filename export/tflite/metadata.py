"""The TFLite metadata (`TFLITE_METADATA`, schema "M001") MediaPipe Tasks and the Task Library read, with the labels
appended as a zip; the schema's bindings are loaded from the installed `mediapipe` package's file."""

import functools
import importlib.util
import io
import zipfile
from pathlib import Path

import numpy as np

from keras_vit.preprocessing import PIXEL_CENTER, PIXEL_SCALE

from ..description import Description, Output
from ..errors import ExportError

METADATA_NAME = "TFLITE_METADATA"
METADATA_IDENTIFIER = b"M001"
TFLITE_IDENTIFIER = b"TFL3"
LABELS_FILE = "labels.txt"
# Every field written here exists since schema 1.0.0 (NormalizationOptions, ImageProperties, FeatureProperties,
# TENSOR_AXIS_LABELS, Stats), so any metadata parser can read it.
MIN_PARSER_VERSION = "1.0.0"
OUTPUT_KINDS = ("probabilities", "logits")
# An embedder's quantisation in the words of its metadata's description.
QUANTIZATION_WORDS = {
    "float32": "float32 weights and activations",
    "float16": "float16 weights, float32 activations",
    "dynamic_int8": "int8 weights, float32 activations (dynamic range)",
    "int8": "int8 weights and activations (full integer, calibrated), float32 input and output",
    "int8_matmul": "calibrated int8 matmuls and convolutions, float32 LayerNorm/GELU/softmax",
}


@functools.lru_cache(maxsize=1)
def metadata_schema():
    """The metadata schema's generated Python bindings, loaded from the installed `mediapipe` package's file
    (`mediapipe/tasks/metadata/metadata_schema_py_generated.py`, which needs only `flatbuffers`) rather than imported
    through `mediapipe`, whose `__init__` starts the task runtime (and fails in some wheels)."""
    spec = importlib.util.find_spec("mediapipe")
    if spec is None or not spec.submodule_search_locations:
        raise ExportError(
            "Writing or reading TFLite model metadata needs the schema bindings shipped by the `mediapipe` "
            "package, which is not installed. Install it with `pip install 'keras-vit[export]'` (in a checkout: "
            "`pip install -r requirements.txt`; mediapipe==1.2.3)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "tasks" / "metadata" / "metadata_schema_py_generated.py"
    if not path.is_file():
        raise ExportError(
            f"The installed mediapipe package has no {path.name} at {str(path)!r}; install mediapipe==1.2.3, "
            "which ships the metadata schema bindings."
        )
    module_spec = importlib.util.spec_from_file_location("keras_vit_tflite_metadata_schema", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def model_schema():
    """TFLite's model schema bindings (the object API the writer re-packs with)."""
    from tensorflow.lite.python import schema_py_generated as schema

    return schema


def finish(table, identifier):
    """The bytes of a packed object-API `table` (metadata or model) with its file identifier."""
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(table.Pack(builder), file_identifier=identifier)
    return bytes(builder.Output())


def input_tensor_metadata(image_size, input_dtype):
    """The input tensor's metadata (`TensorMetadataT`): an RGB image at `image_size`, with the project's
    normalisation as NormalizationOptions for a float32 input, raw pixels for a uint8 one."""
    m = metadata_schema()
    height, width = (int(d) for d in image_size)
    image = m.ImagePropertiesT()
    image.colorSpace = m.ColorSpaceType.RGB
    image.defaultSize = m.ImageSizeT()
    image.defaultSize.width, image.defaultSize.height = width, height
    normalization = m.NormalizationOptionsT()
    normalization.mean, normalization.std = [float(PIXEL_CENTER)], [float(PIXEL_SCALE)]
    unit = m.ProcessUnitT()
    unit.optionsType, unit.options = m.ProcessUnitOptions.NormalizationOptions, normalization
    inp = m.TensorMetadataT()
    inp.name = "image"
    inp.description = (
        f"RGB image, {height}x{width}, resized with bilinear interpolation; pixels scaled as "
        f"(x - {PIXEL_CENTER}) / {PIXEL_SCALE}"
        + (" inside the app." if np.dtype(input_dtype) == np.float32 else "; the model takes raw uint8 pixels.")
    )
    inp.content = m.ContentT()
    inp.content.contentPropertiesType = m.ContentProperties.ImageProperties
    inp.content.contentProperties = image
    inp.processUnits = [unit]
    inp.stats = m.StatsT()
    if np.dtype(input_dtype) == np.uint8:
        inp.stats.min, inp.stats.max = [0.0], [255.0]
    else:  # the values the model sees, after normalisation
        inp.stats.min = [(0.0 - PIXEL_CENTER) / PIXEL_SCALE]
        inp.stats.max = [(255.0 - PIXEL_CENTER) / PIXEL_SCALE]
    return inp


def render(description, quantize="float32", input_dtype=np.float32):
    """`description` (export/description.py) as the TFLite metadata of a file in mode `quantize` whose input tensor
    is `input_dtype`: (the metadata FlatBuffer, identifier "M001"; {name: bytes} of the files it names), or None for
    a kind that no MediaPipe task reads (feature maps).

    A classifier's names its output (probabilities or logits) and carries the labels file as TENSOR_AXIS_LABELS
    (MediaPipe's ImageClassifier); an embedder's describes a feature vector (MediaPipe's ImageEmbedder). Both give
    the input's normalisation. The descriptive fields (name, description, version, license, author) are the
    description's, else the defaults here.
    """
    d = description
    output = _classifier if d.labels is not None else _embedder if len(d.outputs) == 1 else None
    if output is None:
        return None
    m = metadata_schema()
    out, associated, defaults = output(m, description, quantize)
    fields = {**defaults, "version": "1", "license": None, "author": "keras-vit", **description.metadata}
    subgraph = m.SubGraphMetadataT()
    subgraph.inputTensorMetadata = [input_tensor_metadata(description.image_size, input_dtype)]
    subgraph.outputTensorMetadata = [out]
    model = m.ModelMetadataT()
    model.name, model.description, model.version = fields["name"], fields["description"], fields["version"]
    model.author, model.license = fields["author"], fields["license"]
    model.subgraphMetadata = [subgraph]
    model.minParserVersion = MIN_PARSER_VERSION
    return finish(model, METADATA_IDENTIFIER), associated


def attach(flatbuffer, description, quantize="float32", input_dtype=None):
    """`flatbuffer` with the metadata `render` makes of `description` (unchanged for a kind without metadata).

    `input_dtype` defaults to what the file's input tensor says: raw uint8 pixels for a uint8 input, else the float
    normalisation (an int16 input, int8_int16's, holds the normalised image quantized with the tensor's scale).
    """
    if input_dtype is None:
        input_dtype = np.uint8 if _input_type(flatbuffer) == model_schema().TensorType.UINT8 else np.float32
    rendered = render(description, quantize, input_dtype)
    return flatbuffer if rendered is None else add_metadata(flatbuffer, *rendered)


def _input_type(flatbuffer):
    """The schema's TensorType of a TFLite model's first input tensor."""
    graph = model_schema().Model.GetRootAs(bytearray(flatbuffer), 0).Subgraphs(0)
    return graph.Tensors(graph.Inputs(0)).Type()


def with_metadata(flatbuffer, labels, image_size, input_dtype, output_kind, **descriptive):
    """`flatbuffer` with a classifier's metadata and its labels file: `labels` over an output of `output_kind`
    ("probabilities" or "logits") at `image_size`; `descriptive`: name, description, version, license, author."""
    name = descriptive.pop("name", None)
    output = Output(output_kind, output_kind, (None, len(labels)))
    described = Description("classifier", tuple(image_size), (output,), labels=tuple(labels), tflite_output=output_kind,
                            name=name, fields=tuple(descriptive.items()))  # fmt: skip
    return attach(flatbuffer, described, input_dtype=input_dtype)


def _classifier(m, d, quantize):
    """A classifier's output tensor metadata, its labels file, and the default name and description."""
    if d.tflite_output not in OUTPUT_KINDS:
        raise ExportError(f"output_kind must be one of {OUTPUT_KINDS}. Received: {d.tflite_output!r}")
    height, width = d.image_size
    said = "class probabilities (softmax)" if d.tflite_output == "probabilities" else "logits"
    text = (f"Vision Transformer image classifier over {len(d.labels)} classes; input {height}x{width} RGB; "
            f"output {said}.")  # fmt: skip
    labels = ("\n".join(d.labels) + "\n").encode("utf-8")
    defaults = {"name": "keras-vit image classifier", "description": text}
    return _classifier_output(m, d.tflite_output), {LABELS_FILE: labels}, defaults


def _embedder(m, d, quantize):
    """An embedder's output tensor metadata (a feature vector), no files, and the default name and description."""
    height, width = d.image_size
    dim, output = d.dimensions, d.outputs[0].name
    norm = ("L2-normalised (unit length)" if d.l2_normalized
            else "not L2-normalised (normalise it for cosine similarity)")  # fmt: skip
    text = (f"Vision Transformer image embedder; input {height}x{width} RGB; output a {dim}-dimensional feature "
            f"vector, {norm}; quantisation: {QUANTIZATION_WORDS[quantize]}.")  # fmt: skip
    out = m.TensorMetadataT()
    out.name = output
    out.description = f"Image feature vector of {dim} float32 values, {norm}. Quantisation: {quantize}."
    out.content = m.ContentT()
    out.content.contentPropertiesType = m.ContentProperties.FeatureProperties
    out.content.contentProperties = m.FeaturePropertiesT()
    out.stats = m.StatsT()
    if d.l2_normalized:
        out.stats.min, out.stats.max = [-1.0], [1.0]
    return out, {}, {"name": "keras-vit image embedder", "description": text}


def _classifier_output(m, output_kind):
    """The output tensor's metadata: class scores, with the labels file attached."""
    labels_file = m.AssociatedFileT()
    labels_file.name = LABELS_FILE
    labels_file.description = "Class names, one per line, in the order of the output."
    labels_file.type = m.AssociatedFileType.TENSOR_AXIS_LABELS
    out = m.TensorMetadataT()
    out.name = output_kind
    out.description = (
        "Probability of each class (softmax; they sum to 1)." if output_kind == "probabilities"
        else "Logit of each class (apply a softmax for probabilities)."
    )  # fmt: skip
    out.content = m.ContentT()
    out.content.contentPropertiesType = m.ContentProperties.FeatureProperties
    out.content.contentProperties = m.FeaturePropertiesT()
    out.associatedFiles = [labels_file]
    # Stats must be true for the output: probabilities lie in [0, 1]; logits have no bound to state.
    out.stats = m.StatsT()
    if output_kind == "probabilities":
        out.stats.min, out.stats.max = [0.0], [1.0]
    return out


def without_associated_files(flatbuffer):
    """The flatbuffer without an appended zip of associated files: the model ends where the zip's first entry starts.

    `zipfile` appending to non-zip data records absolute offsets, so the first entry's offset is that position.
    """
    data = bytes(flatbuffer)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            offsets = [info.header_offset for info in zf.infolist()]
    except zipfile.BadZipFile:
        return data
    return data[: min(offsets)] if offsets else data


def add_metadata(flatbuffer, metadata, associated_files):
    """Returns `flatbuffer` with `metadata` stored as TFLITE_METADATA and `associated_files` appended as a zip.

    Args:
        flatbuffer: a TFLite model (bytes); metadata or associated files it already has are replaced.
        metadata: the metadata FlatBuffer (`render`'s first value).
        associated_files: {name: bytes} for every file the metadata names.

    The model's tensors, operators and weights are carried over unchanged (the model is unpacked and re-packed
    with TFLite's own schema bindings), so LiteRT computes exactly the same outputs.
    """
    import flatbuffers  # noqa: F401  (the bindings' dependency; imported here to fail before any work)

    schema = model_schema()
    base = without_associated_files(flatbuffer)
    model = schema.ModelT.InitFromPackedBuf(bytearray(base), 0)
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(metadata, np.uint8)
    entries = [e for e in (model.metadata or []) if decoded(e.name) != METADATA_NAME]
    model.buffers = list(model.buffers or [])
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(model.buffers) - 1
    model.metadata = [*entries, entry]
    packed = io.BytesIO()
    packed.write(finish(model, TFLITE_IDENTIFIER))
    # ZIP_STORED: the readers (MediaPipe, the Task Library) extract associated files without decompressing.
    with zipfile.ZipFile(packed, "a", compression=zipfile.ZIP_STORED) as zf:
        for file_name, content in associated_files.items():
            zf.writestr(zipfile.ZipInfo(file_name, date_time=(1980, 1, 1, 0, 0, 0)), content)
    return packed.getvalue()


def decoded(value):
    """A schema string field as str (the bindings give bytes or str by how the field was read)."""
    return value.decode() if isinstance(value, bytes) else value
