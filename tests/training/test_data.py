"""training.data: sources (digits, synthetic, TFDS, folders), resumable pipelines, augmentation, bad input."""

import numpy as np
import pytest
import tensorflow as tf

from tests.support import images, tfds_fakes
from training import data
from training.options.config import TrainConfig

SMALL = dict(dataset="synthetic", image_size=16, batch_size=8, seed=3)


def _batches(ds, n):
    return [(x.numpy(), y.numpy()) for x, y in ds.take(n)]


def test_digits_source_is_the_contract_conversion_with_a_stratified_split():
    from sklearn.datasets import load_digits

    images, _ = data.digits_uint8()
    raw = load_digits()
    assert images.shape == (1797, 8, 8, 3) and images.dtype == np.uint8
    np.testing.assert_array_equal(images[..., 0], np.round(raw.images * 255 / 16).astype(np.uint8))
    np.testing.assert_array_equal(images[..., 0], images[..., 2])
    source = data.load_source("digits")
    assert (source.num_train, source.num_heldout) == (1437, 360)
    held_labels = np.array([int(y) for _, y in source.heldout])
    counts = np.bincount(held_labels, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified: every class about 20%
    again = np.array([int(y) for _, y in data.load_source("digits").heldout])
    np.testing.assert_array_equal(held_labels, again)  # fixed split


@pytest.mark.slow
def test_stream_resumed_at_a_step_equals_the_uninterrupted_stream():
    config = TrainConfig(**SMALL, augment="inception", mixup_alpha=0.2, randaugment=(2, 10))
    source = data.load_source("synthetic", seed=3)
    full = _batches(
        data.train_dataset(source, config), 40
    )  # 40 steps = 10 passes over 256 images / 8 ... crosses passes
    for start in (0, 7, 31, 32, 33):
        resumed = _batches(data.train_dataset(source, config, start_step=start), 3)
        for (x1, y1), (x2, y2) in zip(full[start : start + 3], resumed):
            np.testing.assert_array_equal(x1, x2)
            np.testing.assert_array_equal(y1, y2)
    # Different passes are shuffled differently, and a different seed gives a different stream.
    assert not np.array_equal(full[0][1], full[32][1])
    other = _batches(data.train_dataset(source, config.replace(seed=4)), 1)
    assert not np.array_equal(other[0][0], full[0][0])


def _counting_source(count):
    """A source read in order like TFDS (no `train_arrays`) whose 4x4 images hold their index as the pixel value,
    and a variable counting the raw elements it produced."""
    reads = tf.Variable(0, dtype=tf.int64)
    images = np.repeat(np.arange(count, dtype=np.uint8), 4 * 4 * 3).reshape(count, 4, 4, 3)
    labels = np.arange(count, dtype=np.int64) % 10

    def element(index):
        with tf.control_dependencies([reads.assign_add(1)]):
            return tf.gather(images, index), tf.gather(labels, index)

    source = data.Source(
        train=tf.data.Dataset.range(count).map(element),
        heldout=tf.data.Dataset.from_tensor_slices((images[:8], labels[:8])),
        num_train=count,
        num_heldout=8,
        class_names=[str(i) for i in range(10)],
        decode=tf.identity,
        original_size=4,
    )
    return source, reads


@pytest.mark.slow
def test_resume_of_a_sequential_source_reads_one_pass_and_continues_the_same_stream():
    count, batch, buffer, step, steps = 60, 8, 16, 301, 12  # step 301 = element 2408: pass 40, 8 elements in
    source, reads = _counting_source(count)
    configs = [
        TrainConfig(
            dataset="synthetic", image_size=4, batch_size=batch, seed=3, shuffle_buffer=buffer, augment="resize"
        ),
        TrainConfig(
            dataset="synthetic",
            image_size=8,
            batch_size=batch,
            seed=3,
            shuffle_buffer=buffer,
            augment="inception",
            mixup_alpha=0.2,
        ),
    ]
    for config in configs:
        full = _batches(data.train_dataset(source, config, num_steps=step + steps), step + steps)
        reads.assign(0)
        resumed = _batches(data.train_dataset(source, config, start_step=step, num_steps=steps), steps)
        # The uninterrupted stream read all 2504 elements; the resumed one its pass and one buffer at most.
        assert int(reads.numpy()) <= count + buffer + steps * batch, int(reads.numpy())
        assert len(resumed) == steps
        for (x1, y1), (x2, y2) in zip(full[step:], resumed):
            np.testing.assert_array_equal(x1, x2)
            np.testing.assert_array_equal(y1, y2)
    # Without augmentation the pixels are the element indices: every pass is a permutation of the split, and
    # passes are shuffled differently.
    full = _batches(data.train_dataset(source, configs[0], num_steps=step + steps), step + steps)
    order = np.concatenate([np.rint(x[:, 0, 0, 0] * 127.5 + 127.5) for x, _ in full]).astype(int)
    passes = order[: len(order) // count * count].reshape(-1, count)
    for p in passes:
        np.testing.assert_array_equal(np.sort(p), np.arange(count))
    assert len({tuple(p) for p in passes}) == len(passes)


def test_train_batches_are_static_scaled_and_one_hot():
    config = TrainConfig(**SMALL, augment="inception")
    source = data.load_source("synthetic", seed=3)
    ds = data.train_dataset(source, config, num_steps=3)
    assert ds.element_spec[0].shape == (8, 16, 16, 3) and ds.element_spec[1].shape == (8, 10)
    batches = _batches(ds, 10)
    assert len(batches) == 3
    for x, y in batches:
        assert x.dtype == np.float32 and x.min() >= -1.0 and x.max() <= 1.0
        np.testing.assert_array_equal(y.sum(-1), 1.0)


def test_eval_preprocessing_is_resize_then_scale():
    source = data.load_source("digits")
    config = TrainConfig(dataset="digits", image_size=16, batch_size=360)
    x, y, _ = next(iter(data.eval_dataset(source, config)))
    raw, label = next(iter(source.heldout))
    expected = (tf.image.resize(tf.cast(raw, tf.float32), (16, 16)).numpy() - 127.5) / 127.5
    np.testing.assert_allclose(x[0].numpy(), expected, atol=1e-6)
    assert int(np.argmax(y[0])) == int(label) and x.shape[0] == 360


def test_eval_resize_small_then_central_crop_equals_pil_box_resize_and_crop():
    """big_vision's resize_small(256)|central_crop(224), checked against PIL's box (area) filter on a 300x400
    image: shorter side 300 -> 256 (400 -> 341), then the crop at offset ((256-224)//2, (341-224)//2)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, (6, 8, 3)).astype(np.uint8)
    photo = np.asarray(Image.fromarray(small).resize((400, 300), Image.BILINEAR))
    out = data.eval_preprocess(tf.constant(photo), 224, resize_small=256).numpy() * 127.5 + 127.5
    resized = np.asarray(Image.fromarray(photo).resize((341, 256), Image.BOX), np.float32)
    assert out.shape == (224, 224, 3)
    errors = {
        (dy, dx): np.abs(out - resized[dy : dy + 224, dx : dx + 224]).mean()
        for dy in (15, 16, 17)
        for dx in (57, 58, 59)
    }
    # Stored as uint8 (truncated) after the resize, as the reference; PIL rounds: about half a level apart.
    assert errors[16, 58] < 1.0 and min(errors, key=errors.get) == (16, 58)
    assert np.abs(out - resized[16:240, 58:282]).max() <= 4.0
    # In the pipeline: eval_resize_small switches every held-out image to this protocol.
    source = data.load_source("synthetic", seed=3)
    config = TrainConfig(dataset="synthetic", image_size=24, batch_size=64, eval_resize_small=28)
    x, _, _ = next(iter(data.eval_dataset(source, config)))
    raw, _ = next(iter(source.heldout))
    np.testing.assert_allclose(x[0].numpy(), data.eval_preprocess(raw, 24, 28).numpy(), atol=1e-6)
    assert not np.allclose(x[0].numpy(), data.eval_preprocess(raw, 24).numpy(), atol=1e-3)
    with pytest.raises(ValueError, match="eval_resize_small must be None or an integer >= image_size=24"):
        TrainConfig(image_size=24, eval_resize_small=16)


def test_eval_batches_are_static_and_padded_with_zero_weight_samples():
    source = data.load_source("synthetic", seed=3)  # 64 held-out images
    config = TrainConfig(dataset="synthetic", image_size=16, batch_size=48)
    ds = data.eval_dataset(source, config)
    assert ds.element_spec[0].shape == (48, 16, 16, 3) and ds.element_spec[2].shape == (48,)
    batches = [tuple(t.numpy() for t in batch) for batch in ds]
    assert len(batches) == 2  # ceil(64 / 48)
    images, labels, weights = (np.concatenate(parts) for parts in zip(*batches))
    # Every real image once, in order, with weight 96 / 64; then 32 padding samples of weight 0.
    raw = np.stack([r.numpy() for r, _ in source.heldout])
    expected = (tf.image.resize(tf.cast(raw, tf.float32), (16, 16)).numpy() - 127.5) / 127.5
    np.testing.assert_allclose(images[:64], expected, atol=1e-6)
    np.testing.assert_array_equal(np.argmax(labels[:64], -1), [int(y) for _, y in source.heldout])
    np.testing.assert_array_equal(weights, [1.5] * 64 + [0.0] * 32)
    # A batch that divides the split needs no padding: weights 1.
    weights = np.concatenate([w.numpy() for _, _, w in data.eval_dataset(source, config, batch_size=16)])
    np.testing.assert_array_equal(weights, np.ones(64))


def test_translate_shifts_digits_without_flipping():
    image = np.zeros((8, 8, 3), np.uint8)
    image[2:6, 3] = 255  # a vertical bar
    config = TrainConfig(dataset="digits", image_size=16, augment="translate", translate=1.0, flip=False)
    augment = data.augment_fn(config, original_size=8)
    base = data.resize(image, 16).numpy()
    outputs = [augment(tf.constant(image), tf.constant([0, i], tf.int64)).numpy() for i in range(20)]
    shifts = set()
    for out in outputs:
        assert out.shape == (16, 16, 3)
        found = [
            (dy, dx)
            for dy in range(-2, 3)
            for dx in range(-2, 3)
            if np.allclose(np.roll(np.pad(base, ((2, 2), (2, 2), (0, 0))), (-dy, -dx), (0, 1))[2:18, 2:18], out)
        ]
        assert found, "output is not a shifted copy of the input"
        shifts.add(found[0])
    assert len(shifts) > 3  # several different shifts, at most 2 px (one original pixel) in each direction


def test_mixup_mixes_images_and_labels_with_the_same_weight():
    images = tf.constant(np.stack([np.full((2, 2, 3), -1.0), np.full((2, 2, 3), 1.0)]), tf.float32)
    labels = tf.constant([[1.0, 0.0], [0.0, 1.0]])
    for i in range(10):
        x, y = data.mixup(images, labels, 0.2, tf.constant([0, i], tf.int64))
        lam = float(y[0, 0])
        assert 0.5 <= lam <= 1.0  # the image keeps the larger weight
        np.testing.assert_allclose(x[0].numpy(), lam * -1.0 + (1 - lam) * 1.0, atol=1e-6)
        np.testing.assert_allclose(y.numpy().sum(-1), 1.0, atol=1e-6)


@pytest.mark.slow
def test_randaugment_option_runs_in_tf_data():
    config = TrainConfig(**SMALL, randaugment=(2, 10))
    x, _ = _batches(data.train_dataset(data.load_source("synthetic", seed=3), config), 1)[0]
    assert x.shape == (8, 16, 16, 3) and np.isfinite(x).all() and x.min() >= -1.0 - 1e-6 and x.max() <= 1.0 + 1e-6


# ---------------------------------------------------------------------------------------------------- TFDS


@pytest.mark.slow
def test_tfds_source_reads_prepared_data_with_split_strings(tmp_path):
    name = tfds_fakes.tiny_shapes(tmp_path)
    source = data.load_source(f"tfds:{name}", data_dir=str(tmp_path), train_split="train[:20]", eval_split="test")
    assert (source.num_train, source.num_heldout, source.class_names) == (20, 9, ["red", "green", "blue"])
    config = TrainConfig(dataset=f"tfds:{name}", image_size=16, batch_size=4)
    x, y = _batches(data.train_dataset(source, config), 1)[0]
    assert x.shape == (4, 16, 16, 3)
    x, y, _ = next(iter(data.eval_dataset(source, config)))
    # The colour channel of the label is the bright one: decoding and label order are right.
    assert (np.argmax(x.numpy().mean((1, 2)), -1) == np.argmax(y.numpy(), -1)).all()


def test_tfds_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*--data-dir"):
        data.load_source("tfds:tiny_shapes", data_dir=str(tmp_path / "missing"))
    name = tfds_fakes.tiny_shapes(tmp_path)
    with pytest.raises(ValueError, match="Unknown split 'validation'.*train"):
        data.load_source(f"tfds:{name}", data_dir=str(tmp_path), eval_split="validation")
    with pytest.raises((FileNotFoundError, ValueError), match="never downloads|Cannot find TFDS"):
        data.load_source("tfds:mnist", data_dir=str(tmp_path))


# -------------------------------------------------------------------------------------------------- folders


def test_folder_source_lists_classes_and_decodes(tmp_path):
    root = images.image_folder(tmp_path / "pets")
    source = data.load_source(f"folder:{root}", holdout_fraction=0.5)
    assert source.class_names == ["cat", "dog"] and (source.num_train, source.num_heldout) == (4, 4)
    x, _ = _batches(data.train_dataset(source, TrainConfig(image_size=16, batch_size=2)), 1)[0]
    assert x.shape == (2, 16, 16, 3)


def test_folder_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*one sub-folder per class"):
        data.load_source(f"folder:{tmp_path / 'nothing'}")
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(ValueError, match="No images found.*sub-folders: \\['a'\\]"):
        data.load_source(f"folder:{tmp_path / 'empty'}")
    root = images.image_folder(tmp_path / "pets")
    (root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(ValueError, match=r"(?s)1 unreadable image.*dog/broken\.jpg: OSError"):
        data.load_source(f"folder:{root}")


def test_unknown_dataset_and_batch_larger_than_dataset():
    with pytest.raises(ValueError, match="Unknown dataset 'cifar10'.*tfds:NAME"):
        data.load_source("cifar10")
    source = data.load_source("synthetic")
    with pytest.raises(ValueError, match="batch_size=300 is larger than the training split \\(256 images\\)"):
        data.train_dataset(source, TrainConfig(batch_size=300))
