"""Datasets and tf.data pipelines: digits, synthetic, TFDS and image folders, resumable at any step.

A `Source` holds raw (undecoded) training and held-out elements. `train_dataset` turns it into an endless
stream of augmented, batched examples that is a pure function of (seed, step): every pass over the training
split has its own order seeded by (seed, pass), every element is augmented with stateless ops seeded by its
position in the stream, and a run resumed at step `s` starts the stream at element `s * batch_size`, rebuilding
only the current pass (so a resume costs at most one pass, never `s` batches). Nothing is lost or repeated after
a restart, and with op determinism the batches are bitwise the ones an uninterrupted run would have seen.
Held-out batches all have one static shape (`eval_dataset` pads with zero-weight samples). Pre-processing
follows the contract of the project: uint8 RGB, bilinear resize to the model's size, then `(x - 127.5) / 127.5`.
Augmentation lives here, never in the model (TPU-friendly).
"""

import dataclasses
import os
import warnings
from collections.abc import Callable

import numpy as np
import tensorflow as tf

import keras_vit.files
import keras_vit.images
from keras_vit.preprocessing import PIXEL_CENTER, PIXEL_SCALE
from training.augment import quantize, randaugment

_DATASET_FORMS = "'digits', 'synthetic', 'tfds:NAME' (with --data-dir) or 'folder:PATH'"


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

    @property
    def num_classes(self):
        return len(self.class_names)


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
        return _folder(
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


def _stratified_split(labels, fraction):
    """Fixed (seed 0) stratified split, so every run and every tool sees the same held-out images."""
    from sklearn.model_selection import train_test_split

    index = np.arange(len(labels))
    train, heldout = train_test_split(index, test_size=fraction, stratify=labels, random_state=0)
    return np.sort(train), np.sort(heldout)


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
    train, heldout = _stratified_split(labels, fraction)
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


# libjpeg's accurate integer IDCT: the pixels Pillow (`keras_vit.images`, what predict reads) decodes. TensorFlow's
# default ("INTEGER_FAST") differs from them by up to 4 levels.
JPEG_DCT = "INTEGER_ACCURATE"
# Rows/columns decoded around a JPEG window: chroma upsampling at the window's edges needs its neighbours, and
# without them edge pixels differ by up to 9 levels from the full decode's (MCUs are at most 16 pixels wide).
JPEG_WINDOW_MARGIN = 16


def _decode_encoded(raw):
    image = tf.cond(
        tf.io.is_jpeg(raw),
        lambda: tf.io.decode_jpeg(raw, channels=3, dct_method=JPEG_DCT),
        lambda: tf.io.decode_image(raw, channels=3, expand_animations=False),
    )
    image.set_shape([None, None, 3])
    return image


def _jpeg_window(data, box):
    """The window `box` picks of JPEG bytes, decoding only that window and a margin around it (the reference's
    decode-and-crop, with the full decode's pixels)."""
    shape = tf.io.extract_jpeg_shape(data, output_type=tf.int32)
    begin, size = box(shape)
    start = tf.maximum(begin[:2] - JPEG_WINDOW_MARGIN, 0)
    stop = tf.minimum(begin[:2] + size[:2] + JPEG_WINDOW_MARGIN, shape[:2])
    window = tf.io.decode_and_crop_jpeg(data, tf.concat([start, stop - start], 0), channels=3, dct_method=JPEG_DCT)
    return tf.slice(window, tf.concat([begin[:2] - start, [0]], 0), tf.concat([size[:2], [3]], 0))


def _slice_window(image, box):
    begin, size = box(tf.shape(image))
    return tf.slice(image, begin, size)


def _window_encoded(raw, box):
    """`Source.decode_window` for encoded images (TFDS): JPEGs through `_jpeg_window`, others in full."""
    image = tf.cond(
        tf.io.is_jpeg(raw),
        lambda: _jpeg_window(raw, box),
        lambda: _slice_window(tf.io.decode_image(raw, channels=3, expand_animations=False), box),
    )
    image.set_shape([None, None, 3])
    return image


def _path_window_decoder(background, pillow_jpegs):
    """`Source.decode_window` for image folders (raw: a path).

    A JPEG goes through `_jpeg_window` unless the folder scan found that Pillow reads it differently
    (`keras_vit.images.plain_jpeg`: an EXIF orientation, CMYK, ...); those and every other format are decoded by
    `keras_vit.images.decode_image`, as `decode` does, and sliced.
    """
    decode = _bytes_decoder(background)
    table = None
    if pillow_jpegs:
        keys = tf.constant(sorted(pillow_jpegs))
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, tf.ones_like(keys, tf.bool)),
                                          default_value=False)  # fmt: skip

    def decode_window(path, box):
        data = tf.io.read_file(path)
        fast = tf.io.is_jpeg(data)
        if table is not None:
            fast = tf.logical_and(fast, tf.logical_not(table.lookup(path)))
        image = tf.cond(fast, lambda: _jpeg_window(data, box), lambda: _slice_window(decode(data, path), box))
        image.set_shape([None, None, 3])
        return image

    return decode_window


def _item(value):
    """A tf.numpy_function argument as Python: bytes arrive as 0-d arrays in a graph, as bytes/str eagerly."""
    return value.item() if isinstance(value, np.ndarray) else value


def _path_text(path):
    path = _item(path)
    return path.decode("utf-8") if isinstance(path, bytes) else str(path)


def _bytes_decoder(background):
    """(bytes, path) tensors -> uint8 (H, W, 3) by `keras_vit.images.decode_image` (errors name the path)."""

    def read(data, path):
        return keras_vit.images.decode_image(_item(data), background=background, name=_path_text(path))

    def decode(data, path):
        image = tf.numpy_function(read, [data, path], tf.uint8, stateful=False, name="decode_image")
        image.set_shape([None, None, 3])
        return image

    return decode


def _path_decoder(background, max_bytes=None):
    """path tensor -> uint8 (H, W, 3), decoded by `keras_vit.images.read_image`: the pixels predict sees.

    tf.io.decode_image would be faster but reads fewer formats (no TIFF; it sniffs the content, so a TIFF
    named .jpg fails mid-epoch), ignores EXIF orientation and drops alpha. Pillow decodes outside the GIL, so
    the parallel map still decodes several files at once; the result depends on the path only, so the stream
    stays a pure function of (seed, step).
    """

    def read(path):
        return keras_vit.images.read_image(_path_text(path), background=background, max_bytes=max_bytes)

    def decode(path):
        image = tf.numpy_function(read, [path], tf.uint8, stateful=False, name="read_image")
        image.set_shape([None, None, 3])
        return image

    return decode


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
        _decode_encoded,
        decode_window=_window_encoded,
        shard_count=shard_count,
    )


def list_image_folder(path, follow_symlinks=False):
    """(paths, labels, class names) of a folder with one sub-folder of images per class.

    Every file whose extension is a format Pillow reads is listed (`keras_vit.images.image_suffixes()`:
    .jpg, .png, .webp, .tif(f), .bmp, .gif, .ppm, ...); other files are ignored. Class names are checked first
    (`check_class_name`). A symbolic link (a class folder or a file) is followed when its target lies inside
    `path`; one pointing outside it is refused unless `follow_symlinks`, so a data set cannot pull in files from
    elsewhere on the machine (their pixels would land in samples/*.npz).
    """
    if not keras_vit.files.isdir(path):  # a local path or a gs:// URL
        raise FileNotFoundError(
            f"Image folder {path!r} does not exist. Use folder:PATH with one sub-folder per class "
            f"(PATH/cat/1.jpg, PATH/dog/2.png, ...)."
        )
    class_names = [d for d in keras_vit.files.listdir(path) if keras_vit.files.isdir(keras_vit.files.join(path, d))]
    for name in class_names:
        check_class_name(name, path)
    suffixes = keras_vit.images.image_suffixes()
    paths, labels = [], []
    for label, name in enumerate(class_names):
        for file in keras_vit.files.walk(keras_vit.files.join(path, name)):
            if keras_vit.images.is_image_path(file, suffixes):
                paths.append(file)
                labels.append(label)
    if not follow_symlinks and not keras_vit.files.is_remote(path):
        _check_links_inside(path, [keras_vit.files.join(path, name) for name in class_names], paths)
    if not paths:
        raise ValueError(
            f"No images found in {path!r} (found sub-folders: {class_names or 'none'}). Expected one sub-folder per "
            f"class holding image files (any format Pillow reads: .jpg, .png, .webp, .tiff, .bmp, .gif, ...): put each "
            f"class's images into {path}/CLASS_NAME/ and run again."
        )
    return paths, np.asarray(labels, np.int64), class_names


def check_class_name(name, path="."):
    """Refuses a class folder name that cannot be one line of a labels file, naming it and the fix.

    Labels files (the export's labels.txt, TFLite metadata) hold one name per line, so a name that
    `str.splitlines` splits (a newline, U+2028, ...), a blank name, or one that is not UTF-8 (the file system's
    bytes, which os.listdir hands back as surrogate escapes) would come back as other labels than were trained.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"The class folder {name!r} in {path!r} has a name that is not UTF-8 (its bytes: "
            f"{os.fsencode(name)!r}); class names become labels. Rename the folder to a UTF-8 name."
        ) from None
    if name.splitlines() != [name] or not name.strip():
        raise ValueError(
            f"The class folder {name!r} in {path!r} has a name with a line break (or no visible character); class "
            f"names are written one per line to labels files. Rename the folder to a one-line name."
        )


def _check_links_inside(root, class_dirs, paths):
    """Raises if a class folder or a file listed under the local folder `root` resolves outside it."""
    real_root = os.path.realpath(root)
    outside = []
    # os.walk follows no link below a class folder, so only class folders and links among the files can lead out.
    for p in class_dirs + [p for p in paths if os.path.islink(p)]:
        target = os.path.realpath(p)
        if os.path.commonpath([real_root, target]) != real_root:
            outside.append(f"{p!r} -> {target!r}")
    if outside:
        shown = ", ".join(outside[:3]) + (f" and {len(outside) - 3} more" if len(outside) > 3 else "")
        raise ValueError(
            f"{len(outside)} symbolic link(s) in {root!r} point outside it ({shown}); they are not followed. Copy "
            f"the files into the folder, or, if their targets are trusted, allow them with "
            f"--set follow_symlinks=True."
        )


def _folder(path, fraction, background=keras_vit.images.DEFAULT_BACKGROUND, skip_unreadable=False,
            follow_symlinks=False, max_bytes=None):  # fmt: skip
    keras_vit.images.resolve_background(background)  # a bad option fails before the scan, not after
    paths, labels, class_names = list_image_folder(path, follow_symlinks)
    # Each file is decoded in full through the pipeline's reader, so a file that passes cannot fail mid-epoch
    # (unless it changes on disk in between); a bad one is named before training.
    scan = keras_vit.images.scan_images(paths, background=background, max_bytes=max_bytes)
    bad = [(p, reason) for p, (reason, _) in zip(paths, scan) if reason]
    # JPEGs by their bytes that Pillow reads differently from TensorFlow: these few stay on the Pillow path.
    pillow_jpegs = [p for p, (reason, kind) in zip(paths, scan) if not reason and kind == "jpeg"]
    if bad:
        listing = "\n".join(f"  {p}: {reason}" for p, reason in bad[:20])
        more = f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
        if not skip_unreadable:
            raise ValueError(
                f"{len(bad)} unreadable image(s) in {path!r}; remove or replace them and run again, or skip them "
                f"with --set skip_unreadable_images=True:\n{listing}{more}"
            )
        warnings.warn(
            f"Skipping {len(bad)} unreadable image(s) of {len(paths)} in {path!r} "
            f"(skip_unreadable_images=True):\n{listing}{more}",
            stacklevel=2,
        )
        unreadable = {p for p, _ in bad}
        keep = np.asarray([p not in unreadable for p in paths])
        paths, labels = [p for p, k in zip(paths, keep) if k], labels[keep]
    if len(class_names) < 2:
        raise ValueError(f"Image folder {path!r} has {len(class_names)} class sub-folder(s); at least 2 are needed.")
    counts = np.bincount(labels, minlength=len(class_names))
    if counts.min() < 2:
        few = [class_names[i] for i in np.flatnonzero(counts < 2)]
        raise ValueError(
            f"Classes {few} in {path!r} have fewer than 2 (readable) images; a held-out split needs at least 2. "
            f"Add images to those sub-folders (2 or more each) or remove the sub-folders, and run again."
        )
    train, heldout = _stratified_split(labels, fraction)
    paths = np.asarray(paths)
    source = Source(
        train=tf.data.Dataset.from_tensor_slices((paths[train], labels[train])),
        heldout=tf.data.Dataset.from_tensor_slices((paths[heldout], labels[heldout])),
        num_train=len(train),
        num_heldout=len(heldout),
        class_names=class_names,
        decode=_path_decoder(background, max_bytes),
        train_arrays=(paths[train], labels[train]),
        decode_window=_path_window_decoder(background, pillow_jpegs),
    )
    return source


# --------------------------------------------------------------------------------------------- pre-processing


def scale(image):
    """uint8 (or float 0..255) -> float32 in [-1, 1], the project's contract."""
    return (tf.cast(image, tf.float32) - PIXEL_CENTER) / PIXEL_SCALE


def resize(image, size):
    return tf.image.resize(tf.cast(image, tf.float32), (size, size), method="bilinear")


def resize_small_central_crop(image, small, size):
    """big_vision's `resize_small(small)|central_crop(size)`: the shorter side resized to `small` (area
    interpolation, aspect ratio kept, stored as uint8 again), then the central `size` x `size` crop."""
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    new_shape = tf.cast(tf.round(shape * (float(small) / tf.reduce_min(shape))), tf.int32)
    image = tf.floor(
        tf.clip_by_value(tf.image.resize(tf.cast(image, tf.float32), new_shape, method="area"), 0.0, 255.0)
    )
    top, left = (new_shape[0] - size) // 2, (new_shape[1] - size) // 2
    return tf.slice(image, [top, left, 0], [size, size, 3])


def eval_preprocess(image, size, resize_small=None):
    """Held-out pre-processing: a squash resize to `size` (the paper's), or with `resize_small` set big_vision's
    shorter-side resize and central crop (`TrainConfig.eval_resize_small`); then scaled to [-1, 1]."""
    image = resize_small_central_crop(image, resize_small, size) if resize_small else resize(image, size)
    return tf.ensure_shape(scale(image), [size, size, 3])


def _inception_box(area, seed):
    """shape (H, W, C) -> (begin, size) of an Inception crop: a function of the image's shape and `seed` only, so
    decoding the window alone (`Source.decode_window`) and slicing the decoded image pick the same pixels."""

    def box(shape):
        begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.concat([shape[:2], [3]], 0),  # a grey JPEG's header says 1 channel; it is decoded as 3
            bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
            seed=seed,
            area_range=area,
            aspect_ratio_range=(3 / 4, 4 / 3),
            min_object_covered=0.0,  # any crop; the reference's inception_crop does the same
            use_image_if_no_bounding_boxes=True,
        )
        return begin, crop_size

    return box


def _inception_crop(image, size, area, seed, decode_window=None):
    """Inception crop of `image` resized to `size`; with `decode_window`, `image` is the raw element it decodes."""
    box = _inception_box(area, seed)
    window = decode_window(image, box) if decode_window is not None else _slice_window(image, box)
    return resize(window, size)


def _translate(image, size, max_shift, seed):
    """Random shift by up to `max_shift` pixels (of the model's input), padding with black (-1 after scaling)."""
    pad = int(np.ceil(max_shift))
    image = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
    offset = tf.random.stateless_uniform([2], seed, -max_shift, max_shift)
    offset = tf.cast(tf.round(offset), tf.int32) + pad
    return tf.slice(image, [offset[0], offset[1], 0], [size, size, 3])


def augment_fn(config, original_size=None):
    """(uint8 image, stateless seed) -> float32 training image in [-1, 1], per `config.augment`."""
    size = config.image_size

    def augment(image, seed, decode_window=None):
        """`image`: a uint8 image; or, with `decode_window` (`Source.decode_window`, Inception crops only), the raw
        element, of which only the crop window is decoded."""
        seeds = tf.random.experimental.stateless_split(seed, 2)
        if config.augment == "inception":
            image = _inception_crop(image, size, config.crop_area, seeds[0], decode_window)
        else:
            image = resize(image, size)
        if config.augment == "translate" and config.translate > 0:
            factor = size / original_size if original_size else 1.0
            image = _translate(image, size, config.translate * factor, seeds[0])
        if config.flip and config.augment == "inception":
            image = tf.image.stateless_random_flip_left_right(image, seeds[1])
        return tf.ensure_shape(image, [size, size, 3])  # static shapes for XLA/TPU; still 0..255 for RandAugment

    return augment


def mixup_weights(alpha, num_images, seed):
    """Mixing weights of one batch: a symmetric Dirichlet(alpha) draw (Beta(alpha, alpha) for two images), largest
    first.

    This is big_vision's `mixup(p=alpha, n=num_images)`: `p` is the concentration, not a probability, and every
    batch is mixed. Sorting keeps each image the dominant one of its mix (with a small alpha the draw is nearly
    one-hot, and unsorted it would as often replace the image by its partner). Drawn as normalised Gamma(alpha)
    variables in float64: with alpha = 0.2 a float32 Gamma draw underflows to 0 often enough to matter.
    """
    gammas = tf.random.stateless_gamma([num_images], seed, alpha=tf.constant(alpha, tf.float64), dtype=tf.float64)
    total = tf.reduce_sum(gammas)
    weights = tf.where(total > 0, gammas / tf.maximum(total, 1e-300), tf.one_hot(0, num_images, dtype=tf.float64))
    return tf.cast(tf.sort(weights, direction="DESCENDING"), tf.float32)


def _mixup(images, labels, alpha, seed, num_images=2):
    """Mixes a batch with its copies rolled by 1..num_images-1 places, images and labels with the same weights."""
    weights = mixup_weights(alpha, num_images, seed)

    def mix(batch):
        return tf.add_n([weights[i] * tf.roll(batch, i, axis=0) for i in range(num_images)])

    return mix(images), mix(labels)


def train_dataset(source, config, *, start_step=0, num_steps=None, shard=(0, 1)):
    """The endless (or `num_steps`-long) stream of training batches, starting at global step `start_step`.

    Args:
        source: a `Source`.
        config: a `TrainConfig` (batch_size, seed, augmentation options, shuffle_buffer, image_size).
        start_step: the global step of the first batch (a resumed run passes its optimizer's step count).
        num_steps: the number of steps to yield; None for an endless stream.
        shard: (this process's index, number of processes) of a multi-process run, which feeds each global batch
            from every process at once. Process i yields rows [i * m, (i + 1) * m) of every micro-batch of the
            one-process stream (m = micro-batch / processes), so the batches the processes assemble are exactly
            the one-process ones, augmentation included (it is seeded by the element's global position). A TFDS
            source read per process (`Source.shard_count`) streams its own share instead. Mixup mixes within each
            process's rows.

    Returns:
        A `tf.data.Dataset` of (images float32 (B, S, S, 3) in [-1, 1], one-hot labels float32 (B, K)), B the
        global batch divided by the number of processes; with `config.accum_steps > 1`, each step's batch comes as
        `accum_steps` consecutive micro-batches of B // accum_steps.
    """
    index, processes = shard
    batch = config.batch_size
    count = source.num_train
    if batch > count:
        raise ValueError(
            f"batch_size={batch} is larger than the training split ({count} images); static-shape batches "
            f"(drop_remainder) need batch_size <= {count}. Use --batch-size {min(count, 64)} or more data."
        )
    buffer = config.shuffle_buffer or count
    augment = augment_fn(config, source.original_size)
    num_classes = source.num_classes
    pixel_scale = config.image_size / 224.0 if config.randaugment_scale_pixels else 1.0

    def prepare(index, element):
        raw, label = element
        # Each element's augmentation is seeded by its position in the stream: restart-proof and stateless.
        seed = tf.stack([tf.cast(config.seed, tf.int64), index])
        if config.augment == "inception" and source.decode_window is not None:
            image = augment(raw, seed, source.decode_window)
        else:
            image = augment(source.decode(raw), seed)
        if config.randaugment:
            # Per image, on the uint8 crop as big_vision's `...|flip_lr|randaug(2,10)|value_range(-1, 1)`.
            num_layers, magnitude = config.randaugment
            image = randaugment(
                quantize(image), num_layers, magnitude, tf.random.experimental.stateless_fold_in(seed, 1), pixel_scale
            )
        return scale(image), tf.one_hot(label, num_classes)

    micro = batch // config.accum_steps
    rows = micro // processes
    if rows * processes * config.accum_steps != batch:
        raise ValueError(
            f"batch_size={batch} cannot be split into {config.accum_steps} micro-batch(es) over {processes} "
            f"process(es): use a batch size divisible by {config.accum_steps * processes}."
        )
    positions = _process_positions(index, rows, micro)
    if source.train_arrays is not None:
        ds = _indexed_stream(source.train_arrays, config.seed, start_step * batch // processes, positions)
    elif source.shard_count is None:
        ds = _shuffled_stream(source.train, count, buffer, config.seed, start_step * batch)
        if processes > 1:  # the whole split on every process: each keeps its own rows
            ds = ds.filter(lambda position, element: (position % micro) // rows == index)
    else:  # this process's share of the split; augmentation seeded by the rows' positions in the global batches
        local = source.shard_count
        ds = _shuffled_stream(source.train, local, min(buffer, local), config.seed, start_step * batch // processes)
        ds = ds.map(lambda k, element: (positions(k), element))
    ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.batch(batch // processes, drop_remainder=True)
    if config.mixup_alpha > 0:
        # Seeded by (seed, step) only: every worker of a multi-worker run draws the same weights for a step, as
        # big_vision's global mixing coefficient (fold_in=None). Batches are mixed in parallel, in order.
        ds = ds.enumerate(start_step).map(
            lambda step, b: _mixup(
                b[0],
                b[1],
                float(config.mixup_alpha),
                tf.stack([tf.cast(config.seed, tf.int64), step]),
                config.mixup_images,
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    if num_steps is not None:
        ds = ds.take(num_steps)
    if config.accum_steps > 1:
        ds = ds.map(_micro_batches(config.accum_steps), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        ds = ds.unbatch()
    return _with_options(ds.prefetch(tf.data.AUTOTUNE))


def _micro_batches(accum_steps):
    """A step's batch -> `accum_steps` micro-batches stacked on a new leading axis (`unbatch` then yields them in
    order). The step's batch, Mixup included, is made first: the images of an optimiser step and their mixing do
    not depend on `accum_steps`."""

    def split(images, labels):
        def stack(x):
            return tf.reshape(x, [accum_steps, x.shape[0] // accum_steps, *x.shape[1:]])  # static shapes, for XLA

        return stack(images), stack(labels)

    return split


def _process_positions(index, rows, micro):
    """This process's k-th element -> its position in the one-process stream (rows `rows` of each micro-batch)."""

    def position(k):
        return (k // rows) * micro + index * rows + k % rows

    return position


def _indexed_stream(arrays, seed, start, positions=None):
    """(position, (raw, label)) from element `start` of the endless stream: pass p is permutation (seed, p).

    `positions` maps this process's element number to its position in the stream (`_process_positions`).
    """
    raw, labels = (tf.constant(a) for a in arrays)
    count = len(arrays[1])

    def element(k):
        position = positions(k) if positions is not None else k
        p, j = position // count, position % count
        index = tf.random.experimental.index_shuffle(j, tf.stack([tf.cast(seed, tf.int64), p]), count - 1)
        return position, (tf.gather(raw, index), tf.gather(labels, index))

    return tf.data.Dataset.range(start, np.iinfo(np.int64).max).map(element)


def _shuffled_stream(train, count, buffer, seed, start):
    """(position, (raw, label)) from element `start` of the endless stream of a source read in order (TFDS).

    Pass p is the split read once through a shuffle buffer seeded by (seed, p) alone, so a resumed run rebuilds
    only its current pass and skips within it: it reads at most one pass plus one buffer of raw (undecoded)
    elements, whatever the step. A single shuffle reseeded by tf.data on every pass would have to replay all
    earlier passes, i.e. read `start` elements. A distribution strategy that rewrites the pipeline may re-seed
    the shuffle, so the order is strategy-specific (but still the same on a resume under the same strategy).
    """
    first_pass, offset = divmod(start, count)

    def one_pass(p):
        # This runs while tf.data traces the function, so it clears the seed of that function's graph only: the
        # order then depends on (seed, p) and not on the global TF seed (which TF would also compare with the
        # tensor seed as a Python bool when it is 0, an error).
        tf.compat.v1.get_default_graph().seed = None
        pass_seed = tf.random.stateless_uniform(
            [], tf.stack([tf.cast(seed, tf.int64), p]), minval=None, maxval=None, dtype=tf.int64
        )
        return train.shuffle(buffer, seed=pass_seed, reshuffle_each_iteration=False)

    passes = tf.data.Dataset.range(first_pass, np.iinfo(np.int64).max).flat_map(one_pass)
    return passes.enumerate(first_pass * count).skip(offset)


def eval_dataset(source, config, batch_size=None, shard=(0, 1)):
    """Held-out batches of one static shape: every image once, the last batch padded with zero-weight samples.

    A TPU compiles one program per input shape and rejects a partial batch under `drop_remainder` semantics, so
    the held-out split is padded to a whole number of batches. Padding has weight 0; every real image has weight
    `padded_count / num_heldout` instead of 1. Keras divides a batch's loss by the batch size (reduction
    "sum_over_batch_size") and averages the batch losses weighted by batch size, so over the whole split its
    reported loss is sum(weight * loss) / padded_count: with these weights exactly the mean loss over the real
    images (Keras' own masking uses the same total/valid rescaling). Weighted metrics (`weighted_metrics=` in
    `compile`, not `metrics=`) divide by the sum of weights, so the constant cancels and top-1/top-5 are the
    unpadded ones too.

    In a multi-process run (`shard` = (index, processes)) process i takes every processes-th held-out image from
    the i-th on and pads its share to the same number of batches of B / processes as every other process, so the
    global batches cover the split once; the weights use the padded count of all processes together.

    Args:
        source: a `Source`.
        config: a `TrainConfig` (image_size, batch_size, eval_resize_small).
        batch_size: overrides `config.batch_size` (the global batch).
        shard: (this process's index, number of processes).

    Returns:
        A `tf.data.Dataset` of (images float32 (B, S, S, 3), one-hot labels float32 (B, K), weights float32 (B,)),
        `ceil(num_heldout / B)` batches (one process), every one of static batch size B.
    """
    index, processes = shard
    batch = int(batch_size or config.batch_size)
    count = source.num_heldout
    if batch < 1 or count < 1:
        raise ValueError(
            f"Evaluation needs batch_size >= 1 and a non-empty held-out split. Received: "
            f"batch_size={batch}, {count} held-out images. Use --batch-size 1 or more, or another "
            f"eval_split."
        )
    if batch % processes:
        raise ValueError(f"The evaluation batch of {batch} cannot be split over {processes} processes evenly.")
    batch //= processes
    share = len(range(index, count, processes))
    largest = -(-count // processes)  # every process pads to the largest share, in whole batches
    padded = -(-largest // batch) * batch
    weight = padded * processes / count
    num_classes = source.num_classes
    size = config.image_size
    heldout = source.heldout.shard(processes, index) if processes > 1 else source.heldout
    ds = heldout.map(
        lambda raw, label: (
            eval_preprocess(source.decode(raw), size, config.eval_resize_small),
            tf.one_hot(label, num_classes),
            tf.constant(weight, tf.float32),
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    padding = tf.data.Dataset.from_tensors(
        (tf.zeros([size, size, 3]), tf.zeros([num_classes]), tf.constant(0.0))
    ).repeat(padded - share)
    ds = ds.concatenate(padding).batch(batch, drop_remainder=True)
    return _with_options(ds.prefetch(tf.data.AUTOTUNE))


def _with_options(ds):
    options = tf.data.Options()
    # AUTO: a multi-worker run shards TFDS sources by file (each worker reads its own files) and in-memory
    # sources by element.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.AUTO
    options.deterministic = True
    return ds.with_options(options)


def uint8_images(ds, decode, size, limit):
    """Up to `limit` (images uint8 (N, size, size, 3), labels int64) resized to the model's size, no augmentation."""
    images, labels = [], []
    for raw, label in ds.take(limit):
        image = resize(decode(raw), size)
        images.append(np.clip(np.round(image.numpy()), 0, 255).astype(np.uint8))
        labels.append(int(label))
    return np.stack(images), np.asarray(labels, np.int64)
