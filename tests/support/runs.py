"""The tiny training run the tests share (command-line arguments) and readers of a workdir's losses, weights and
checkpoints."""

import glob
import re

import numpy as np

# 8 steps per epoch, 4 epochs, batch 16 of 16 px synthetic images; deterministic ops, no dropout, no plots: two runs
# of it are bitwise equal. Tests add --strategy and what they vary.
TINY_RUN = [
    "--dataset",
    "synthetic",
    "--epochs",
    "4",
    "--batch-size",
    "16",
    "--set",
    "steps_per_epoch=8",
    "--set",
    "image_size=16",
    "--set",
    "warmup_steps=4",
    "--set",
    "deterministic=True",
    "--set",
    "eval_every=0",
    "--set",
    "num_samples=8",
    "--set",
    "num_calibration=8",
    "--set",
    "learning_rate=3e-3",
    "--set",
    "plots=false",
]

# The same run in-process (`training.TrainConfig(**TINY_CONFIG)`), one epoch of 2 steps of 4-image evaluations.
TINY_CONFIG = dict(
    dataset="synthetic",
    image_size=16,
    batch_size=16,
    epochs=1,
    steps_per_epoch=2,
    eval_every=0,
    jit_compile=False,
    strategy="default",
    num_samples=4,
    num_calibration=4,
    plots=False,
)


def steps_saved(workdir):
    """The steps of the checkpoints in `workdir`/checkpoints, in no particular order."""
    return [int(re.search(r"ckpt-(\d+)", p).group(1)) for p in glob.glob(str(workdir / "checkpoints" / "ckpt-*.npz"))]


def losses(workdir):
    """The per-epoch training losses of `workdir`/log.csv."""
    lines = (workdir / "log.csv").read_text().splitlines()
    column = lines[0].split(",").index("loss")
    return np.array([float(line.split(",")[column]) for line in lines[1:]])


def weights(workdir):
    """The weights of `workdir`/model.keras, loaded under this process's backend (loading keeps every bit)."""
    import keras

    import keras_vit  # noqa: F401  (registers the layers)

    model = keras.saving.load_model(str(workdir / "model.keras"), compile=False)
    return [np.asarray(w) for w in model.get_weights()]
