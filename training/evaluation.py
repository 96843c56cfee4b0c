"""`evaluate`: a trained run's model.keras on its held-out split (or another dataset's), inside the run's placement.

Extra held-out splits of a run (`TrainConfig.extra_evals`) are `training.evals`'.
"""

import dataclasses
import json
import logging

import keras

from keras_vit import files

from .config import TrainConfig
from .data import eval_dataset
from .distribution import select_placement
from .optim import make_loss
from .run_plan import source_of

logger = logging.getLogger("training")


def evaluate(
    workdir,
    *,
    dataset=None,
    data_dir=None,
    eval_split=None,
    batch_size=None,
    strategy=None,
    tf_strategy=None,
    verbose=0,
):
    """Evaluates WORKDIR/model.keras on the held-out split of its run (or of `dataset`); returns the metrics.

    The model is loaded and evaluated inside the strategy `train` would select (`strategy`, default: the run's
    `config.strategy`, on the current Keras backend), so on a TPU VM it runs on the TPU; `tf_strategy` passes a
    `tf.distribute.Strategy` in instead (TensorFlow backend).
    """
    model_path = files.join(workdir, "model.keras")
    if not files.exists(model_path):
        raise FileNotFoundError(f"No model at {model_path!r}: train first (python -m training --workdir {workdir}).")
    overrides = {"dataset": dataset, "data_dir": data_dir, "eval_split": eval_split, "batch_size": batch_size}
    overrides["strategy"] = strategy
    config = _run_config(workdir).replace(**{key: value for key, value in overrides.items() if value is not None})
    placement = select_placement(config.strategy, tf_strategy=tf_strategy, join_timeout=config.join_timeout)
    if verbose:
        print(f"[training] {placement.describe()}", flush=True)
    with placement.scope():
        model = keras.saving.load_model(model_path, compile=False)
    if model.input_shape[1] is not None:  # a dynamic_image_size model is evaluated at its run's image_size
        config = config.replace(image_size=int(model.input_shape[1]))
    source = source_of(config, placement.shard)
    if model.output_shape[-1] != source.num_classes:
        raise ValueError(
            f"The model predicts {model.output_shape[-1]} classes, {config.dataset!r} has "
            f"{source.num_classes}; evaluate it on the dataset it was trained for."
        )
    with placement.scope():
        _compile(model, config, source.num_classes)
    results = model.evaluate(eval_dataset(source, config, shard=placement.shard), verbose=verbose, return_dict=True)
    return {
        "top1": float(results["top1"]),
        "top5": float(results["top5"]),
        "loss": float(results["loss"]),
        "num_heldout": source.num_heldout,
        "dataset": config.dataset,
        **placement.metrics(),
    }


def _run_config(workdir):
    """The `TrainConfig` of the run in `workdir` (its config.json; the defaults when it has none)."""
    config_path = files.join(workdir, "config.json")
    if not files.exists(config_path):
        return TrainConfig()
    saved = json.loads(files.read_text(config_path))
    known = {field.name for field in dataclasses.fields(TrainConfig)}
    if set(saved) - known:  # a run written by an older version (e.g. `mixup`, now `mixup_alpha`)
        logger.warning("Ignoring options of an older version in %s: %s", config_path, sorted(set(saved) - known))
    return TrainConfig(**{key: value for key, value in saved.items() if key in known})


def _compile(model, config, num_classes):
    model.compile(
        loss=make_loss(config),
        weighted_metrics=[
            keras.metrics.CategoricalAccuracy(name="top1"),
            keras.metrics.TopKCategoricalAccuracy(k=min(5, num_classes), name="top5"),
        ],
    )
