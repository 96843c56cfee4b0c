"""`Source`, the raw data of one dataset, and the fixed held-out split of the in-memory and folder sources."""

import dataclasses
from collections.abc import Callable

import numpy as np
import tensorflow as tf


@dataclasses.dataclass
class Source:
    """Raw data of one dataset.

    Attributes:
        train, heldout: `tf.data.Dataset`s of (raw, label) with raw a uint8 image, an encoded image or a path.
        num_train, num_heldout: their sizes.
        class_names: label names in index order.
        decode: raw element -> uint8 (H, W, 3) image tensor.
        original_size: pixel size of the stored images when they all share one (digits: 8), else None.
        train_arrays: (raw, labels) numpy arrays of the training split when it is held in memory: the stream then
            indexes them with a stateless permutation per pass (exact under any strategy) instead of a shuffle
            buffer.
        decode_window: optional (raw, box) -> uint8 crop, where box(shape) -> (begin, size) picks the window from
            the image's (H, W, C) shape: decodes a JPEG's window only (`tf.io.decode_and_crop_jpeg`), any other
            image in full and then slices it. Same pixels as slicing `decode(raw)`; the Inception crop uses it.
        files: an image folder's files after the scan (both splits; unreadable ones left out when skipped), which
            the run's fingerprint hashes (`training.run_identity.folder_identity`); None for other sources.
    """

    train: tf.data.Dataset
    heldout: tf.data.Dataset
    num_train: int
    num_heldout: int
    class_names: list
    decode: Callable
    original_size: int | None = None
    train_arrays: tuple | None = None
    decode_window: Callable | None = None
    shard_count: int | None = None
    files: list | None = None

    @property
    def num_classes(self):
        return len(self.class_names)


def stratified_split(labels, fraction):
    """Fixed (seed 0) stratified split, so every run and every tool sees the same held-out images."""
    from sklearn.model_selection import train_test_split

    index = np.arange(len(labels))
    train, heldout = train_test_split(index, test_size=fraction, stratify=labels, random_state=0)
    return np.sort(train), np.sort(heldout)
