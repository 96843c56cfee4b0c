"""`load_source`: a dataset by name; the in-memory (digits, synthetic) and TFDS sources (image folders: `folders`)."""

import numpy as np
import tensorflow as tf

import keras_vit.files
import keras_vit.images

from .decoders import decode_encoded, window_encoded
from .folders import folder_source
from .source import Source, stratified_split

_DATASET_FORMS = "'digits', 'synthetic', 'tfds:NAME' (with --data-dir) or 'folder:PATH'"


def load_source(
    dataset,
    *,
    data_dir=None,
    train_split="train",
    eval_split="test",
    holdout_fraction=0.2,
    seed=0,
    image_background=keras_vit.images.DEFAULT_BACKGROUND,
    skip_unreadable_images=False,
    follow_symlinks=False,
    max_image_bytes=None,
    shard=(0, 1),
):
    """Loads a dataset by name; see `TrainConfig.dataset` for the forms. Raises clear errors for bad input.

    `image_background`, `skip_unreadable_images`, `follow_symlinks` and `max_image_bytes` apply to `folder:`
    datasets (see `TrainConfig`). `shard` is (this process's index, number of processes): a TFDS training split is
    then read as this process's part of `tfds.even_splits` (big_vision's per-process input); in-memory and folder
    sources are shared, and `train_dataset` picks each process's rows.
    """
    if dataset == "digits":
        return _digits(holdout_fraction)
    if dataset == "synthetic":
        return _synthetic(seed)
    if isinstance(dataset, str) and dataset.startswith("tfds:"):
        return _tfds(dataset[len("tfds:") :], data_dir, train_split, eval_split, shard)
    if isinstance(dataset, str) and dataset.startswith("folder:"):
        return folder_source(
            dataset[len("folder:") :],
            holdout_fraction,
            image_background,
            skip_unreadable_images,
            follow_symlinks,
            max_image_bytes,
        )
    raise ValueError(f"Unknown dataset {dataset!r}. Use {_DATASET_FORMS}.")


def digits_uint8():
    """scikit-learn's 8x8 digits as uint8 RGB (values 0..16 -> round(v * 255 / 16), grey repeated) and labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.round(digits.images * 255.0 / 16.0).astype(np.uint8)
    return np.repeat(images[..., None], 3, axis=-1), digits.target.astype(np.int64)


def _in_memory(images, labels, train_idx, heldout_idx, class_names, original_size=None):
    return Source(
        train=tf.data.Dataset.from_tensor_slices((images[train_idx], labels[train_idx])),
        heldout=tf.data.Dataset.from_tensor_slices((images[heldout_idx], labels[heldout_idx])),
        num_train=len(train_idx),
        num_heldout=len(heldout_idx),
        class_names=class_names,
        decode=tf.identity,
        original_size=original_size,
        train_arrays=(images[train_idx], labels[train_idx]),
    )


def _digits(fraction):
    images, labels = digits_uint8()
    train, heldout = stratified_split(labels, fraction)
    return _in_memory(images, labels, train, heldout, [str(i) for i in range(10)], original_size=8)


def _synthetic(seed, num_train=256, num_heldout=64, num_classes=10, size=32):
    """Learnable random images (a class-dependent colour plus noise): for tests and input-free benchmarks."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, num_train + num_heldout).astype(np.int64)
    palette = rng.integers(0, 256, (num_classes, 1, 1, 3))
    noise = rng.normal(0, 40, (len(labels), size, size, 3))
    images = np.clip(palette[labels] + noise, 0, 255).astype(np.uint8)
    index = np.arange(len(labels))
    return _in_memory(
        images,
        labels,
        index[:num_train],
        index[num_train:],
        [f"class_{i}" for i in range(num_classes)],
        original_size=size,
    )


def _tfds(name, data_dir, train_split, eval_split, shard=(0, 1)):
    import tensorflow_datasets as tfds

    if not name:
        raise ValueError("Empty TFDS name. Use e.g. --config ... --set dataset=tfds:cifar10 --data-dir DIR.")
    if data_dir is not None and not keras_vit.files.isdir(data_dir):
        raise FileNotFoundError(
            f"Data directory {data_dir!r} does not exist. Point --data-dir at the directory where the TFDS "
            f"dataset was prepared (e.g. `tfds build {name} --data_dir DIR`)."
        )
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as err:  # tfds raises several types (DatasetNotFoundError, registry errors)
        raise ValueError(
            f"Cannot find TFDS dataset {name!r} (data_dir={data_dir!r}): {err}. Check the name "
            f"(`tfds.list_builders()`) and --data-dir."
        ) from err
    if not builder.is_prepared():
        raise FileNotFoundError(
            f"TFDS dataset {name!r} is not prepared in {builder.data_dir!r}; this trainer never downloads. "
            f"Prepare it first: `tfds build {name} --data_dir {data_dir or '~/tensorflow_datasets'}`, then pass "
            f"--data-dir."
        )
    features = builder.info.features
    if "image" not in features or "label" not in features:
        raise ValueError(f"TFDS dataset {name!r} needs 'image' and 'label' features; it has {list(features)}.")
    class_names = list(features["label"].names)
    decoders = {"image": tfds.decode.SkipDecoding()}  # decode after shuffling: cheaper buffers, as the reference

    def split(split_name):
        try:
            ds = builder.as_dataset(split=split_name, decoders=decoders, shuffle_files=False)
            count = builder.info.splits[split_name].num_examples
        except (KeyError, ValueError) as err:
            raise ValueError(
                f"Unknown split {split_name!r} of TFDS dataset {name!r}: {err}. Known splits: "
                f"{list(builder.info.splits)} (slices like 'train[:90%]' work)."
            ) from err
        return ds.map(lambda ex: (ex["image"], ex["label"]), num_parallel_calls=tf.data.AUTOTUNE), count

    if eval_split is None:
        raise ValueError("TFDS datasets need an eval_split, e.g. --set eval_split=test or eval_split='train[99%:]'.")
    train, num_train = split(train_split)
    heldout, num_heldout = split(eval_split)
    shard_count = None
    if shard[1] > 1:  # this process reads its own files' worth of the training split, not every example
        train, shard_count = split(tfds.even_splits(train_split, n=shard[1], drop_remainder=False)[shard[0]])
    return Source(
        train,
        heldout,
        num_train,
        num_heldout,
        class_names,
        decode_encoded,
        decode_window=window_encoded,
        shard_count=shard_count,
    )
