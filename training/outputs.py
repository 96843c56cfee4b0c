"""What a finished run leaves in its workdir besides checkpoints: model, labels, metrics, samples, plots."""

import csv
import io
import json
import logging

import keras
import numpy as np
import tensorflow as tf

import keras_vit
from keras_vit import files
from keras_vit.files import atomic_write, atomic_write_text
from keras_vit.preprocessing import scale_pixels

from .data import uint8_images

logger = logging.getLogger("training")


def save_model(model, path):
    """Saves an uncompiled copy of `model` to `path` atomically (`keras_vit.files.atomic_save`).

    Uncompiled, so that `keras.saving.load_model(path)` works without importing `training` (whose schedule and
    loss classes a compiled model would reference) and the file holds no optimizer state (checkpoints do). A LoRA
    run's model is saved merged (`keras_vit.merge_lora`): a plain model, which evaluation and export read as any.
    """
    model = keras_vit.merge_lora(model)  # a fresh copy, never compiled; LoRA factors folded into the kernels
    # A temporary `.keras` beside `path`, renamed into place (a URL: one object write), with the mode every other
    # output gets; one left by a killed save is removed by `files.sweep_temporaries` at the next start.
    files.atomic_save(path, model.save, suffix=".keras")


def write_json(path, data):
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_labels(path, class_names):
    atomic_write_text(path, "".join(f"{name}\n" for name in class_names))


EXAMPLE_IMAGE = "example.png"


def write_samples(workdir, source, config):
    """samples/heldout.npz (held-out split) and samples/calibration.npz (training split), uint8 at model size.

    Also samples/example.png, the first held-out image as a file, so that `python -m export predict` and
    `python -m keras_vit.inspect` have an image to show on any run (its class is heldout.npz's labels[0]).
    """
    size = config.image_size
    images, labels = uint8_images(source.heldout, source.decode, size, config.num_samples)
    _savez(files.join(workdir, "samples", "heldout.npz"), images=images, labels=labels)
    if len(images):
        from PIL import Image  # late: only this function needs Pillow

        example = Image.fromarray(np.asarray(images[0], np.uint8))
        atomic_write(files.join(workdir, "samples", EXAMPLE_IMAGE), lambda f: example.save(f, format="PNG"))
    pool = source.train.shuffle(min(source.num_train, 10_000), seed=config.seed, reshuffle_each_iteration=False)
    images, labels = uint8_images(pool, source.decode, size, config.num_calibration)
    _savez(files.join(workdir, "samples", "calibration.npz"), images=images, labels=labels)


def _savez(path, **arrays):
    atomic_write(path, lambda f: np.savez_compressed(f, **arrays))


def read_csv_log(path):
    """Rows of the CSV log as {column: float}, one per epoch (the last row wins if a resume repeated one)."""
    if not files.exists(path):
        return []
    rows = {}
    with io.StringIO(files.read_text(path), newline="") as f:
        for row in csv.DictReader(f):
            values = {}
            for key, value in row.items():
                try:
                    values[key] = float(value)
                except (TypeError, ValueError):  # "NA" on epochs without a held-out evaluation
                    continue
            if "epoch" in values:
                rows[int(values["epoch"])] = values
    return [rows[k] for k in sorted(rows)]


def plot_training_curves(csv_path, plots_dir, schedule=None, total_steps=0):
    """plots/training_curves.png (loss, top-1 per epoch) and plots/learning_rate.png; returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_csv_log(csv_path)
    files.makedirs(plots_dir)
    paths = {}
    if rows:
        epochs = [r["epoch"] + 1 for r in rows]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, title in ((axes[0], "loss", "loss"), (axes[1], "top1", "top-1 accuracy")):
            for prefix, label in (("", "train"), ("val_", "held-out")):
                points = [(e, r[prefix + key]) for e, r in zip(epochs, rows) if prefix + key in r]
                if points:
                    ax.plot(*zip(*points), marker=".", label=label)
            ax.set_xlabel("epoch")
            ax.set_title(title)
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        paths["training_curves"] = _save_figure(fig, files.join(plots_dir, "training_curves.png"))
        plt.close(fig)
    if schedule is not None and total_steps:
        steps = np.linspace(0, total_steps - 1, min(total_steps, 500)).astype(np.int64)
        values = [float(schedule(int(s))) for s in steps]
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(steps, values)
        ax.set_xlabel("step")
        ax.set_title("learning rate")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths["learning_rate"] = _save_figure(fig, files.join(plots_dir, "learning_rate.png"))
        plt.close(fig)
    return paths


def _save_figure(fig, path):
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100))
    return path


def inspection_figures(model, images_uint8, plots_dir, labels=None, class_names=None, shown=8, count=64):
    """keras_vit.inspect's figures for held-out images, when that module exists: the rollout of the first `shown`
    (titled with their true and predicted classes), the attention distance averaged over the first `count`."""
    try:
        from keras_vit.inspect import save_figures
    except ImportError:
        return {}
    images = scale_pixels(images_uint8[:count])
    labels = None if labels is None else np.asarray(labels)[:count]
    try:
        return dict(save_figures(model, images, plots_dir, labels=labels, class_names=class_names, max_images=shown))
    except Exception as err:  # noqa: BLE001  (figures are a bonus: never lose a finished run to a plotting problem)
        logger.warning(
            "keras_vit.inspect.save_figures failed (%s: %s); skipped the inspection figures.", type(err).__name__, err
        )
        return {}


class CsvLogger(keras.callbacks.Callback):
    """Keras' `CSVLogger` format (an `epoch` column, then the sorted metric names, "NA" where absent), with the
    whole file rewritten atomically after every epoch (`keras_vit.files.atomic_write_text`).

    Keras' own logger appends to the open file in place, which leaves a half-written row after a crash, cannot
    be written to an object store in one piece, and in Keras 3.15 fails on a `gs://` path at the end of training
    (it asks the `tf.io.gfile.GFile` for `.closed`, which GFile lacks). A resumed run appends its rows.
    """

    def __init__(self, path):
        super().__init__()
        self.path = path
        self._text, self._keys = "", None

    def on_train_begin(self, logs=None):
        self._text = files.read_text(self.path) if files.exists(self.path) else ""
        self._keys = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self._keys is None:
            self._keys = sorted(logs)
            if not any(key.startswith("val_") for key in self._keys):  # epochs without evaluation: NA columns
                self._keys += [f"val_{key}" for key in self._keys]
        # A run killed after writing this epoch's row but before its checkpoint repeats the epoch: replace the row.
        lines = self._text.splitlines(keepends=True)
        self._text = "".join(line for line in lines[1:] if line.split(",", 1)[0] != str(epoch))
        self._text = (lines[0] + self._text) if lines else ""
        rows = io.StringIO()
        writer = csv.writer(rows)
        if not self._text:
            writer.writerow(["epoch", *self._keys])
        writer.writerow([epoch, *(logs.get(key, "NA") for key in self._keys)])
        self._text += rows.getvalue()
        atomic_write_text(self.path, self._text)


class EventLogger(keras.callbacks.Callback):
    """Writes each epoch's metrics and learning rate as TensorBoard scalars under `log_dir/{train,validation}`.

    Keras' `TensorBoard` callback needs the `tensorboard` package for `tf.summary.scalar`; the event-file
    writer and the scalar-summary op are part of TensorFlow itself, so this works with TensorFlow alone and
    TensorBoard (wherever it is installed) reads the files.
    """

    def __init__(self, log_dir):
        super().__init__()
        self.log_dir = log_dir
        self._writers = {}

    def _writer(self, name):
        if name not in self._writers:
            self._writers[name] = tf.summary.create_file_writer(files.join(self.log_dir, name))
        return self._writers[name]

    def _scalar(self, writer, tag, value, step):
        tf.raw_ops.WriteScalarSummary(
            writer=writer._resource,
            step=tf.constant(step, tf.int64),
            tag=tag,
            value=tf.constant(float(value), tf.float32),
        )

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            split, tag = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            self._scalar(self._writer(split), f"epoch_{tag}", value, epoch)
        optimizer = self.model.optimizer
        learning_rate = optimizer.learning_rate
        self._scalar(self._writer("train"), "learning_rate", float(np.asarray(learning_rate)), epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
