"""What an exported file holds, said once per export (`Description`, made by `describe` from the kind and the plan) and
rendered by each format: the TFLite sidecar and metadata, the ONNX and OpenVINO documents, the SavedModel's assets."""

import dataclasses

from . import preprocessing

INPUT = "images"  # the input's name in every file
SIGNATURE = "serving_default"  # the signature every file is served by (SavedModel, TFLite)


@dataclasses.dataclass(frozen=True)
class Output:
    """One output of the model, by the name it keeps in every file."""

    name: str  # "logits", "embedding", "encoderblock_{i}", "encoderblock_{i}_prefix"
    meaning: str  # what it holds, in words ("logits", "embedding", "patch tokens of encoderblock_2, (batch, 15, 32)")
    shape: tuple  # the Keras model's, None for the batch (and an open height or width)


@dataclasses.dataclass(frozen=True)
class Description:
    """What every file of one export holds: the input it takes, the outputs it gives, the labels, the names."""

    kind: str  # the kind's NAME: "classifier", "embedder", "feature_maps"
    image_size: tuple  # (height, width): the files' input size, the size the model was trained at
    outputs: tuple  # `Output`s in the model's order
    labels: tuple = None  # a classifier's class names, in output order
    dynamic_image_size: bool = False  # the model keeps an open height and width (ONNX and OpenVINO keep it open)
    l2_normalized: bool = False  # an embedder's vectors as written
    tflite_output: str = "probabilities"  # what a classifier's TFLite file ends in: "probabilities" or "logits"
    name: str = None  # the model's name in the files' metadata (None: each rendering's default)
    fields: tuple = ()  # further descriptive metadata, (key, value) pairs: description, version, license, author
    # The input: float32 NHWC RGB in [-1, 1], from uint8 pixels by `preprocessing` (one contract for every kind).
    dtype: str = "float32"
    layout: str = "NHWC"
    color: str = "RGB"
    range: tuple = (-1.0, 1.0)

    @property
    def preprocessing(self):
        """The preprocessing constants every file states (export/preprocessing.py)."""
        return preprocessing.describe(self.image_size)

    @property
    def dimensions(self):
        """The size of the first output's last axis (an embedder's vector, a classifier's classes)."""
        return int(self.outputs[0].shape[-1])

    @property
    def metadata(self):
        """The descriptive fields the metadata renderings take: name (where given), description, version, ..."""
        return {**({"name": self.name} if self.name else {}), **dict(self.fields)}


def describe(kind, model, labels=None, dynamic_image_size=False, l2_normalize=False, tflite_output="probabilities",
             name=None, metadata=None):  # fmt: skip
    """The `Description` of `model` exported as `kind` (a module of export/kinds/: its `NAME`, `output_names` and
    `meanings`), at `model`'s fixed input size. `metadata`: descriptive fields (name, description, version, license,
    author); its `name` wins over `name`."""
    shapes = model.output_shape if isinstance(model.output_shape, list) else [model.output_shape]
    meanings = kind.meanings(model)
    outputs = tuple(Output(n, meanings[n], tuple(None if d is None else int(d) for d in shape))
                    for n, shape in zip(kind.output_names(model), shapes))  # fmt: skip
    fields = dict(metadata or {})
    return Description(
        kind=kind.NAME,
        image_size=tuple(int(d) for d in model.input_shape[1:3]),
        outputs=outputs,
        labels=None if labels is None else tuple(labels),
        dynamic_image_size=bool(dynamic_image_size),
        l2_normalized=bool(l2_normalize),
        tflite_output=tflite_output,
        name=fields.pop("name", None) or name,
        fields=tuple(fields.items()),
    )
