"""What every exported file takes and gives, said once: the input contract (uint8 RGB -> bilinear resize ->
(x - 127.5) / 127.5) with its helpers, and the `Description` of outputs, labels and names each format renders."""

import dataclasses

import numpy as np

from keras_vit.preprocessing import PIXEL_CENTER, PIXEL_SCALE, scale_pixels

from .errors import ExportError

INPUT = "images"  # the input's name in every file
SIGNATURE = "serving_default"  # the signature every file is served by (SavedModel, TFLite)


def preprocessing_constants(image_size):
    """The preprocessing constants recorded next to every artifact."""
    return {
        "input": "uint8 RGB, channels last",
        "resize": {"method": "bilinear", "size": [int(image_size[0]), int(image_size[1])],
                   "half_pixel_centers": True, "antialias": False},
        "scale": f"x = (x - {PIXEL_CENTER}) / {PIXEL_SCALE}",
        "center": PIXEL_CENTER,
        "divisor": PIXEL_SCALE,
        "range": [-1.0, 1.0],
    }  # fmt: skip


def check_images(images):
    """Checks raw images are uint8 (N, H, W, 3) or a list of uint8 (H, W, 3); returns a list of arrays."""
    if isinstance(images, np.ndarray):
        if images.ndim == 3:
            images = images[None]
        if images.ndim != 4:
            raise ExportError(
                f"Expected uint8 RGB images shaped (N, H, W, 3) or (H, W, 3). Received shape {images.shape}."
            )
        images = list(images)
    out = []
    for i, image in enumerate(images):
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[-1] != 3:
            raise ExportError(f"Image {i} must be shaped (H, W, 3) RGB. Received shape {image.shape}.")
        if image.dtype != np.uint8:
            raise ExportError(
                f"Image {i} must hold raw uint8 pixels (0..255). Received dtype {image.dtype}; "
                "convert with np.clip(x, 0, 255).astype('uint8') if it holds pixel values."
            )
        out.append(image)
    return out


def resize_pixels(images, image_size):
    """Raw uint8 images -> float32 (N, H, W, 3) pixel values (0..255) at `image_size`, resized with
    `tf.image.resize` (bilinear, half-pixel centres, no antialias); images already at that size pass unchanged."""
    import tensorflow as tf

    images = check_images(images)
    height, width = image_size
    batch = []
    for image in images:
        x = tf.constant(image, tf.float32)
        if tuple(image.shape[:2]) != (height, width):
            x = tf.image.resize(x, (height, width), method="bilinear")
        batch.append(x.numpy())
    return np.stack(batch)


def app_pixels(images, image_size):
    """What an app feeds: uint8 pixels at the model's size (images of another size resized here, as the app's own
    resize would; MediaPipe's resize differs from tf.image.resize, see docs/mobile.md)."""
    return np.clip(np.round(resize_pixels(images, image_size)), 0, 255).astype(np.uint8)


def model_space_in_graph(images, image_size):
    """Inside a TensorFlow graph (the SavedModels' `serving_default`): a uint8 batch (N, any H, any W, 3) ->
    float32 model-space images at `image_size`, by the same bilinear `tf.image.resize` and scaling as
    `to_model_space`."""
    import tensorflow as tf

    x = tf.image.resize(tf.cast(images, tf.float32), image_size, method="bilinear")
    return (x - PIXEL_CENTER) / PIXEL_SCALE


def to_model_space(images, image_size):
    """Resizes raw uint8 images to `image_size` and scales them to [-1, 1]: the model's float32 input.

    Uses `tf.image.resize` (bilinear, half-pixel centres, no antialias), the same op the SavedModel's
    serving signature runs, so both paths see identical tensors.
    """
    return scale_pixels(resize_pixels(images, image_size))


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
        """The preprocessing constants every file states."""
        return preprocessing_constants(self.image_size)

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
