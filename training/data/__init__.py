"""Datasets and tf.data pipelines: digits, synthetic, TFDS and image folders, resumable at any step.

A `Source` holds raw (undecoded) training and held-out elements. `train_dataset` turns it into an endless stream
of augmented, batched examples that is a pure function of (seed, step), so a resumed run sees exactly the batches
an uninterrupted one would have (`training.data.pipeline` says how); `eval_dataset` gives held-out batches of one
static shape. Pre-processing and augmentation live here, never in the model (`training.data.preprocess`).

Modules: `source` (the `Source` record, the fixed held-out split), `loaders` (`load_source`; digits, synthetic,
TFDS), `folders` (image folders), `decoders` (image decoding, JPEG windows), `preprocess` (the pixel contract,
resizes, augmentation, Mixup) and `pipeline` (`train_dataset`, `eval_dataset`). Importing it imports TensorFlow.
"""

# The names other modules use, and (aliased to themselves: re-exported on purpose) the internals the tests reach as
# `training.data.NAME`; a monkeypatch must target the defining submodule, where the code looks the name up.
from .decoders import JPEG_DCT, JPEG_WINDOW_MARGIN
from .decoders import _decode_encoded as _decode_encoded
from .decoders import _path_decoder as _path_decoder
from .decoders import _window_encoded as _window_encoded
from .folders import check_class_name, list_image_folder
from .loaders import _in_memory as _in_memory
from .loaders import digits_uint8, load_source
from .pipeline import eval_dataset, train_dataset, uint8_images
from .preprocess import _inception_box as _inception_box
from .preprocess import _mixup as _mixup
from .preprocess import (
    augment_fn,
    eval_preprocess,
    mixup_weights,
    resize,
    resize_small_central_crop,
    scale,
)
from .source import Source

__all__ = [
    "JPEG_DCT",
    "JPEG_WINDOW_MARGIN",
    "Source",
    "augment_fn",
    "check_class_name",
    "digits_uint8",
    "eval_dataset",
    "eval_preprocess",
    "list_image_folder",
    "load_source",
    "mixup_weights",
    "resize",
    "resize_small_central_crop",
    "scale",
    "train_dataset",
    "uint8_images",
]
