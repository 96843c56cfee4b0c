"""`evaluate`: a trained run's model.keras on its held-out split (or another dataset's), inside the run's placement;
`evaluate_extra`: the extra held-out splits a run reports under "evals" (`TrainConfig.extra_evals`)."""

import json
import logging

import keras

from keras_vit import files

from .data import eval_dataset, load_source
from .optim import make_loss
from .options import TrainConfig
from .placement import select_placement
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
    # A dynamic_image_size model is evaluated at its run's image_size; a NaFlex one (config.naflex) takes patches.
    if not config.naflex and model.input_shape[1] is not None:
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
    return TrainConfig(**json.loads(files.read_text(config_path)))


def _compile(model, config, num_classes):
    model.compile(
        loss=make_loss(config),
        weighted_metrics=[
            keras.metrics.CategoricalAccuracy(name="top1"),
            keras.metrics.TopKCategoricalAccuracy(k=min(5, num_classes), name="top5"),
        ],
    )


def parse_eval_split(dataset, value):
    """(dataset, split) of an `extra_evals` value: "SPLIT" of the run's dataset or "tfds:NAME:SPLIT"."""
    value = str(value)
    if value.startswith("tfds:"):
        name, sep, split = value[len("tfds:") :].rpartition(":")
        if not sep or not name or not split:
            raise ValueError(
                f"An extra_evals value names a split of the run's dataset ('train[99%:]') or of another "
                f"TFDS dataset ('tfds:imagenet_v2:test'). Received: {value!r}"
            )
        return f"tfds:{name}", split
    return dataset, value


def evaluate_extra(model, config, *, verbose=0, shard=(0, 1)):
    """{name: {"top1", "top5", "loss", "num_heldout", "dataset", "split"}} for every entry of `config.extra_evals`.

    The model must be compiled with the trainer's weighted top1/top5 metrics; every split goes through
    `eval_dataset` (the run's evaluation pre-processing, `eval_resize_small` included); `shard` is this process's
    (index, number of processes) in a multi-process run.
    """
    results = {}
    for name, value in config.extra_evals.items():
        dataset, split = parse_eval_split(config.dataset, value)
        source = load_source(dataset, data_dir=config.data_dir, train_split=split, eval_split=split, seed=config.seed)
        if source.num_classes != model.output_shape[-1]:
            raise ValueError(
                f"extra_evals[{name!r}] ({dataset} {split}) has {source.num_classes} classes, the model "
                f"predicts {model.output_shape[-1]}; evaluate splits with the run's label set."
            )
        metrics = model.evaluate(eval_dataset(source, config, shard=shard), verbose=verbose, return_dict=True)
        results[name] = {
            "top1": float(metrics["top1"]),
            "top5": float(metrics["top5"]),
            "loss": float(metrics["loss"]),
            "num_heldout": source.num_heldout,
            "dataset": dataset,
            "split": split,
        }
    return results
