"""Datasets and tf.data pipelines: digits, synthetic, TFDS and image folders, resumable at any step.

A `Source` holds raw (undecoded) training and held-out elements. `train_dataset` turns it into an endless stream
of augmented, batched examples that is a pure function of (seed, step), so a resumed run sees exactly the batches
an uninterrupted one would have (`training.data.pipeline` says how); `eval_dataset` gives held-out batches of one
static shape. Pre-processing and augmentation live here, never in the model (`training.data.preprocess`).

Modules: `source` (the `Source` record, the fixed held-out split), `loaders` (`load_source`; digits, synthetic,
TFDS), `folders` (image folders), `decoders` (image decoding, JPEG windows), `preprocess` (the pixel contract,
resizes, augmentation, Mixup) and `pipeline` (`train_dataset`, `eval_dataset`). Importing it imports TensorFlow.
"""

# The names other modules use. Helpers the submodules share are public in the submodule that defines them; a test
# reaches them (and a monkeypatch targets them) there, where the code looks them up.
from .decoders import JPEG_DCT, JPEG_WINDOW_MARGIN
from .folders import check_class_name, list_image_folder
from .loaders import digits_uint8, load_source
from .pipeline import eval_dataset, train_dataset, uint8_images
from .preprocess import (
    augment_fn,
    eval_preprocess,
    mixup,
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
    "mixup",
    "mixup_weights",
    "resize",
    "resize_small_central_crop",
    "scale",
    "train_dataset",
    "uint8_images",
]
