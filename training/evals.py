"""Held-out evaluations beyond the run's own split (`TrainConfig.extra_evals`), reported under "evals" in
metrics.json: big_vision's recipes report several (minival beside validation, ...) with one pre-processing."""

from .data import eval_dataset, load_source


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
