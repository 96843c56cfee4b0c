"""The tf.data pipelines: `train_dataset`, a pure function of (seed, step) so a resume sees the same batches, and
`eval_dataset`, of one static shape (docs/guarantees.md)."""

import numpy as np
import tensorflow as tf

from ..augment import quantize
from ..options import model_config
from .naflex import naflex_blank, naflex_features, naflex_prepare_fn
from .preprocess import augment_fn, eval_pixels, mix_rows, mixup, mixup_weights, randaugment_fn, resize, scale


def train_dataset(source, config, *, start_step=0, num_steps=None, shard=(0, 1), device_input=False):
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
        device_input: yield uint8 images, to be scaled (and mixed) on the device (`training.device_input`). They
            are the float stream's 0..255 images rounded and clipped: with RandAugment, whose output is already
            whole levels, exactly those images; without it the bilinear resize's fractions are rounded (at most
            0.5 / 127.5 after scaling). With Mixup the labels are mixed here as always, and the images come with
            the step's mixing weights instead, the same (seed, step) draw. Mixup with `accum_steps > 1` is
            refused: the step's batch is mixed before it is split into micro-batches (rows roll across their
            boundaries), which a mix per micro-batch on the device cannot reproduce.

    Returns:
        A `tf.data.Dataset` of (images float32 (B, S, S, 3) in [-1, 1], one-hot labels float32 (B, K)), B the
        global batch divided by the number of processes; with `config.accum_steps > 1`, each step's batch comes as
        `accum_steps` consecutive micro-batches of B // accum_steps. With `device_input` the images are uint8
        in 0..255, and with Mixup the first element is a dict {"images": uint8 (B, S, S, 3), "mixup_weights":
        float32 (B, mixup_images)}, every row the batch's weights (one row per image, so Keras can split it).
    """
    if config.naflex and config.mixup_alpha > 0:
        raise ValueError(
            f"mixup_alpha={config.mixup_alpha} mixes images of one size, but a NaFlex run's images keep their own "
            f"sizes. Use mixup_alpha=0 with naflex."
        )
    if config.naflex and config.augment == "translate":
        raise ValueError(
            "augment='translate' shifts images within a fixed frame, but a NaFlex run keeps each image's own size. "
            "Use augment='inception' (a crop kept at its aspect ratio) or 'resize' (none) with naflex."
        )
    if device_input and config.mixup_alpha > 0 and config.accum_steps > 1:
        raise ValueError(
            f"device_input=True mixes each micro-batch on the device, but Mixup with accum_steps="
            f"{config.accum_steps} mixes the whole step's batch. Use device_input=false or accum_steps=1."
        )
    index, processes = shard
    micro, rows = _split_batch(config, source.num_train, processes)
    positions = _process_positions(index, rows, micro)
    ds = _element_stream(source, config, start_step, shard, micro, rows, positions)
    ds = ds.map(_prepare_fn(source, config, device_input), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.batch(config.batch_size // processes, drop_remainder=True)
    if config.mixup_alpha > 0:
        ds = _mixed(ds, config, start_step, device_input)
    if num_steps is not None:
        ds = ds.take(num_steps)
    if config.accum_steps > 1:
        ds = ds.map(_micro_batches(config.accum_steps), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        ds = ds.unbatch()
    return _with_options(ds.prefetch(tf.data.AUTOTUNE))


def _split_batch(config, count, processes):
    """(micro-batch, rows of it per process) of the global batch; a `ValueError` when it does not split."""
    batch = config.batch_size
    if batch > count:
        raise ValueError(
            f"batch_size={batch} is larger than the training split ({count} images); static-shape batches "
            f"(drop_remainder) need batch_size <= {count}. Use --batch-size {min(count, 64)} or more data."
        )
    micro = batch // config.accum_steps
    rows = micro // processes
    if rows * processes * config.accum_steps != batch:
        raise ValueError(
            f"batch_size={batch} cannot be split into {config.accum_steps} micro-batch(es) over {processes} "
            f"process(es): use a batch size divisible by {config.accum_steps * processes}."
        )
    return micro, rows


def _element_stream(source, config, start_step, shard, micro, rows, positions):
    """(position in the one-process stream, raw element) of this process's rows, from element `start_step * batch`."""
    index, processes = shard
    batch, count = config.batch_size, source.num_train
    buffer = config.shuffle_buffer or count
    if source.train_arrays is not None:
        return _indexed_stream(source.train_arrays, config.seed, start_step * batch // processes, positions)
    if source.shard_count is None:
        ds = _shuffled_stream(source.train, count, buffer, config.seed, start_step * batch)
        if processes > 1:  # the whole split on every process: each keeps its own rows
            ds = ds.filter(lambda position, element: (position % micro) // rows == index)
        return ds
    # This process's share of the split; augmentation seeded by the rows' positions in the global batches.
    local = source.shard_count
    ds = _shuffled_stream(source.train, local, min(buffer, local), config.seed, start_step * batch // processes)
    return ds.map(lambda k, element: (positions(k), element))


def _prepare_fn(source, config, device_input=False):
    """(position, raw element) -> (augmented image in [-1, 1], or uint8 with `device_input`; one-hot label),
    seeded by the position. A NaFlex run's: (NaFlex inputs, one-hot label) (`training.data.naflex`)."""
    if config.naflex:
        return naflex_prepare_fn(source, config, model_config(config, source.num_classes).patch_size)
    augment = augment_fn(config, source.original_size)
    randaugment_image = randaugment_fn(config) if config.randaugment else None

    def prepare(index, element):
        raw, label = element
        # Each element's augmentation is seeded by its position in the stream: restart-proof and stateless.
        seed = tf.stack([tf.cast(config.seed, tf.int64), index])
        if config.augment == "inception" and source.decode_window is not None:
            image = augment(raw, seed, source.decode_window)
        else:
            image = augment(source.decode(raw), seed)
        if randaugment_image:
            image = randaugment_image(image, seed)
        pixels = tf.cast(quantize(image), tf.uint8) if device_input else scale(image)
        return pixels, tf.one_hot(label, source.num_classes)

    return prepare


def _mixed(ds, config, start_step, device_input=False):
    """The batches with Mixup. Seeded by (seed, step) only: every worker of a multi-worker run draws the same
    weights for a step, as big_vision's global mixing coefficient (fold_in=None). Mixed in parallel, in order.
    With `device_input` only the labels are mixed; the images travel with the weights (`train_dataset`)."""
    alpha, count = float(config.mixup_alpha), config.mixup_images

    def mix(step, images, labels):
        seed = tf.stack([tf.cast(config.seed, tf.int64), step])
        if not device_input:
            return mixup(images, labels, alpha, seed, count)
        weights = mixup_weights(alpha, count, seed)  # the same draw as `mixup`'s
        rows = tf.ensure_shape(tf.tile(weights[tf.newaxis], [tf.shape(images)[0], 1]), [images.shape[0], count])
        return {"images": images, "mixup_weights": rows}, mix_rows(labels, weights)

    return ds.enumerate(start_step).map(
        lambda step, b: mix(step, *b), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )


def _micro_batches(accum_steps):
    """A step's batch -> `accum_steps` micro-batches stacked on a new leading axis (`unbatch` then yields them in
    order). The step's batch, Mixup included, is made first: the images of an optimiser step and their mixing do
    not depend on `accum_steps`."""

    def split(images, labels):
        def stack(x):
            return tf.reshape(x, [accum_steps, x.shape[0] // accum_steps, *x.shape[1:]])  # static shapes, for XLA

        return tf.nest.map_structure(stack, (images, labels))

    return split


def _process_positions(index, rows, micro):
    """This process's k-th element -> its position in the one-process stream (rows `rows` of each micro-batch)."""

    def position(k):
        return (k // rows) * micro + index * rows + k % rows

    return position


def _indexed_stream(arrays, seed, start, positions):
    """(position, (raw, label)) from element `start` of the endless stream: pass p is permutation (seed, p).

    `positions` maps this process's element number to its position in the stream (`_process_positions`).
    """
    raw, labels = (tf.constant(a) for a in arrays)
    count = len(arrays[1])

    def element(k):
        position = positions(k)
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


def eval_dataset(source, config, batch_size=None, shard=(0, 1), device_input=False):
    """Held-out batches of one static shape: every image once, the last batch padded with zero-weight samples.

    A TPU compiles one program per input shape, so the split is padded to whole batches. Padding weighs 0 and every
    real image `padded_count / num_heldout`: Keras' loss ("sum_over_batch_size", batch losses averaged by size) is
    then exactly the mean over the real images, and weighted metrics (`weighted_metrics=`) divide by the sum of
    weights, so top-1/top-5 are the unpadded ones. With `shard` = (index, processes), process i takes every
    processes-th image from the i-th on and pads its share to the batches of B / processes every process has.

    Args:
        source: a `Source`.
        config: a `TrainConfig` (image_size, batch_size, eval_resize_small).
        batch_size: overrides `config.batch_size` (the global batch).
        shard: (this process's index, number of processes).
        device_input: uint8 images (the float ones' 0..255 pixels, rounded), scaled on the device
            (`training.device_input`); the padding images are then 0 (-1 after scaling) instead of 0.0: they have
            weight 0 either way.

    Returns:
        A `tf.data.Dataset` of (images float32 (B, S, S, 3) (uint8 with `device_input`; a NaFlex run's inputs
        dict, `training.data.naflex`), one-hot labels float32 (B, K), weights float32 (B,)), `ceil(num_heldout / B)`
        batches (one process), every one of static batch size B.
    """
    index, processes = shard
    batch, share, padded, weight = _eval_padding(int(batch_size or config.batch_size), source.num_heldout, shard)
    num_classes = source.num_classes
    heldout = source.heldout.shard(processes, index) if processes > 1 else source.heldout
    pixels, blank = _eval_inputs(source, config, num_classes, device_input)
    ds = heldout.map(
        lambda raw, label: (pixels(raw), tf.one_hot(label, num_classes), tf.constant(weight, tf.float32)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    padding = tf.data.Dataset.from_tensors((blank, tf.zeros([num_classes]), tf.constant(0.0))).repeat(padded - share)
    ds = ds.concatenate(padding).batch(batch, drop_remainder=True)
    return _with_options(ds.prefetch(tf.data.AUTOTUNE))


def _eval_padding(batch, count, shard):
    """(per-process batch, this process's share of the images, its padded count, each real image's weight)."""
    index, processes = shard
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
    return batch, share, padded, padded * processes / count


def _eval_inputs(source, config, num_classes, device_input):
    """(a raw held-out image -> the model's input, the padding input of weight 0)."""
    size = config.image_size
    if config.naflex:  # the whole image, its aspect ratio kept
        patch_size = model_config(config, num_classes).patch_size
        blank = naflex_blank(patch_size, config.max_num_patches)
        return lambda raw: naflex_features(source.decode(raw), patch_size, config.max_num_patches), blank

    def pixels(raw):
        image = eval_pixels(source.decode(raw), size, config.eval_resize_small)
        return tf.cast(quantize(image), tf.uint8) if device_input else scale(image)

    return pixels, tf.zeros([size, size, 3], tf.uint8 if device_input else tf.float32)


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
