"""Datasets and tf.data pipelines: digits, synthetic, TFDS and image folders, resumable at any step. Importing it
imports TensorFlow."""

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
