"""`train`, for the CLI and for notebooks alike (its counterpart `evaluate` is `training.evaluation`'s).

Everything runs through plain `keras.Model.fit` inside `strategy.scope()`. Resuming is the callbacks' and the
data pipeline's business (see `training.checkpointing` and `training.data`): a run restores its newest
checkpoint, reads the step counter, and starts the input stream at that step.
"""

import contextlib
import dataclasses
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import keras_vit
from keras_vit import files
from keras_vit.models import flops
from training import advice, processes, run_identity
from training.checkpointing import CheckpointManager, FaultTolerance, checkpoint_steps
from training.config import get_config, steps_per_execution_for
from training.data import eval_dataset, load_source, train_dataset
from training.distribution import select_placement, set_matmul_precision
from training.evals import evaluate_extra
from training.optim import WarmupDecay, make_loss, make_optimizer, make_schedule
from training.outputs import (
    CsvLogger,
    EventLogger,
    inspection_figures,
    plot_training_curves,
    save_model,
    write_json,
    write_labels,
    write_samples,
)
from training.workarounds import fit_steps_per_execution


@dataclasses.dataclass
class TrainResult:
    """What `train` returns: the trained model, the held-out metrics and the Keras histories of this call."""

    model: keras.Model
    metrics: dict
    workdir: str
    histories: list


def default_workdir(config_name):
    return os.path.join("runs", str(config_name))


def train(config="digits", workdir=None, *, tf_strategy=None, callbacks=(), verbose=None, **overrides):
    """Trains (or resumes) a run and writes its workdir.

    Args:
        config: a recipe name from `training/configs/` ("digits", "cifar10_finetune", ...) or a `TrainConfig`.
        workdir: output directory; a second call with the same one resumes from its last checkpoint.
            Default: runs/<config name>. A local directory or a `tf.io.gfile` URL (`gs://bucket/run`); on
            multi-worker runs every worker must see the chief's checkpoints there.
        tf_strategy: a `tf.distribute.Strategy` to use instead of selecting one by `config.strategy`
            (TensorFlow backend; on JAX, `config.strategy` picks the `keras.distribution` placement).
        callbacks: extra Keras callbacks.
        verbose: Keras verbosity (default: progress bars on a terminal, one line per epoch otherwise).
        **overrides: `TrainConfig` fields, e.g. `epochs=5`, `learning_rate=1e-3`, or `model.dropout_rate=0.1`
            passed as `**{"model.dropout_rate": 0.1}`.

    Returns:
        A `TrainResult` (model, metrics, workdir, histories).

    Raises:
        NonFiniteLossError: the loss became NaN/Inf (the last good checkpoint is kept).
        Preempted: SIGTERM arrived; a checkpoint was saved, run again to resume.
        ValueError / FileNotFoundError: bad configuration or data, with the fix in the message.
    """
    with contextlib.ExitStack() as held:  # the workdir lock, released however the run ends
        return _train(config, workdir, tf_strategy, callbacks, verbose, overrides, held)


def _train(config, workdir, tf_strategy, callbacks, verbose, overrides, held):
    started = time.time()
    name = config if isinstance(config, str) else "custom"
    config = get_config(config).replace(**overrides)
    workdir = files.absolute(workdir or default_workdir(name))
    if verbose is None:
        verbose = 1 if sys.stdout.isatty() else 2
    _set_op_determinism(config.deterministic)
    keras.utils.set_random_seed(config.seed)
    set_matmul_precision(config.matmul_precision)

    strategy = select_placement(config.strategy, tf_strategy=tf_strategy, join_timeout=config.join_timeout)
    source = source_of(config, strategy.shard)
    measured = advice.lookup(
        strategy.device_kind, config.precision, flops.config_forward_flops(model_config(config, source.num_classes))
    )
    jit_compile, jit_reason = strategy.resolve_jit_compile(config.jit_compile, measured)
    print(f"[training] {strategy.describe()}; {jit_reason}", flush=True)
    if measured is not None:
        print(f"[training] advice: {measured.line(strategy.form(jit_compile))}", flush=True)
    chief = strategy.is_chief
    if chief:  # only the chief writes; the other workers of a multi-worker run share its workdir
        held.enter_context(run_identity.workdir_lock(workdir))

    if config.batch_size > source.num_train:
        raise ValueError(
            f"batch_size={config.batch_size} is larger than the training split ({source.num_train} images of "
            f"{config.dataset!r}). Use --batch-size {min(64, source.num_train)} or a larger dataset."
        )
    micro_batch = config.batch_size // config.accum_steps
    if micro_batch % strategy.num_replicas_in_sync:
        raise ValueError(
            f"The global batch_size={config.batch_size} must be divisible by the {strategy.num_replicas_in_sync} "
            f"replicas of {strategy.name}"
            + (
                f" times accum_steps={config.accum_steps} (micro-batches of {micro_batch})."
                if config.accum_steps > 1
                else "."
            )
        )
    steps_per_epoch = config.steps_per_epoch or source.num_train // config.batch_size
    total_steps = steps_per_epoch * config.epochs
    steps_per_execution, note = steps_per_execution_for(
        config.steps_per_execution, steps_per_epoch, checkpoint_steps(files.join(workdir, "checkpoints"))
    )
    if note:
        print(f"[training] note: {note}", flush=True)

    manager = CheckpointManager(files.join(workdir, "checkpoints"), None, None, write=chief)
    loaded = manager.load_latest()  # before the optimizer is built: the checkpoint carries its schedule
    if strategy.num_processes > 1:  # every process restores the same file, or none does
        processes.check_same(
            "the checkpoint step to resume from (-1: none)",
            loaded[1]["step"] if loaded else -1,
            f"Every process must see the same workdir: put it on storage all hosts share (gs://BUCKET/run, a "
            f"network file system), not on each host's own disk ({workdir}).",
        )
    # Refuses another run's checkpoint or a changed config; a folder enters by the files its scan kept.
    identity = run_identity.resolve(workdir, config, loaded, source.files)
    schedule = _resume_schedule(config, total_steps, loaded)
    same_weights = "Run the same keras-vit version, config and --init on every process."
    # Under several JAX processes every weight is built, initialised and restored as one global array.
    with strategy.scope(), processes.refuse_different_values("the model's starting weights", same_weights):
        # A resume takes every weight from its checkpoint: --init (maybe a multi-GB download) is not read again.
        initial = config.replace(init=None) if loaded else config
        model = build_model(initial, source.num_classes, class_names=source.class_names)
        optimizer = strategy.prepare_optimizer(make_optimizer(config, total_steps, schedule))
        optimizer.build(model.trainable_variables)
        k = min(5, source.num_classes)
        model.compile(
            optimizer=optimizer,
            loss=make_loss(config),
            # Weighted: evaluation batches are padded with zero-weight samples (training.data.eval_dataset).
            weighted_metrics=[
                keras.metrics.CategoricalAccuracy(name="top1"),
                keras.metrics.TopKCategoricalAccuracy(k=k, name="top5"),
            ],
            jit_compile=jit_compile,
            # Fit steps are micro-batches (gradient accumulation); see the workaround for the count.
            steps_per_execution=fit_steps_per_execution(strategy.tf_strategy, steps_per_execution, config.accum_steps),
        )
        strategy.prepare_model(model)
        manager.model, manager.optimizer = model, optimizer
        header = manager.restore(loaded) if loaded else None
    if strategy.num_processes > 1:  # same seed, same file: a difference here would silently split the replicas
        processes.check_same("the model's starting weights", _weights_checksum(model), same_weights)
    start = manager.step()
    if header:
        print(f"[training] resuming from step {start} of {total_steps} ({manager.restored_path})", flush=True)
    if chief:
        files.check_writable(workdir)  # a read-only or full workdir fails here, before any step is trained
        files.sweep_temporaries(workdir)  # what writes killed before their rename left (see keras_vit.files)
        write_json(files.join(workdir, "config.json"), config.to_dict())
        identity.write(workdir)

    fault_tolerance = FaultTolerance(
        manager,
        every=config.checkpoint_every,
        header={"schedule": schedule.get_config(), **identity.header()},
        agree=strategy.stop_agreement(),
        accum_steps=config.accum_steps,
    )
    # The loggers first: an epoch's row is written before its checkpoint (see FaultTolerance.on_train_batch_end).
    loggers = [CsvLogger(files.join(workdir, "log.csv")), EventLogger(files.join(workdir, "logs"))] if chief else []
    all_callbacks = [*loggers, fault_tolerance, *callbacks]
    eval_ds = eval_dataset(source, config, shard=strategy.shard)
    histories = []
    fit_seconds = 0.0
    # A mid-epoch resume first finishes the interrupted epoch, so later epochs keep their boundaries.
    epoch, offset = divmod(start, steps_per_epoch)
    segments = []
    if start < total_steps and offset:
        segments.append((epoch, steps_per_epoch - offset, start))
        fault_tolerance.resume_metrics_from = loaded  # the epoch's row then counts its steps before the resume too
        epoch, start = epoch + 1, (epoch + 1) * steps_per_epoch
    if start < total_steps:
        segments.append((epoch, steps_per_epoch, start))
    for first_epoch, steps, first_step in segments:
        epochs = first_epoch + (1 if steps != steps_per_epoch else (total_steps - first_step) // steps_per_epoch)
        data = train_dataset(
            source, config, start_step=first_step, num_steps=(epochs - first_epoch) * steps, shard=strategy.shard
        )
        fit_started = time.time()
        history = model.fit(
            data,
            epochs=epochs,
            initial_epoch=first_epoch,
            steps_per_epoch=steps * config.accum_steps,
            validation_data=eval_ds if config.eval_every else None,
            validation_freq=config.eval_every or 1,
            callbacks=all_callbacks,
            shuffle=False,  # the stream is shuffled by training.data
            verbose=verbose if chief else 0,  # one progress bar per run
        )
        fit_seconds += time.time() - fit_started
        histories.append(history.history)
        fault_tolerance.raise_if_stopped()
        if model.stop_training:  # a user callback stopped the run
            break
    trained_steps = manager.step() - (header or {}).get("step", 0)

    results = model.evaluate(eval_ds, verbose=0, return_dict=True)
    extra_evals = evaluate_extra(model, config, shard=strategy.shard) if config.extra_evals else None
    metrics = {
        "top1": float(results["top1"]),
        "top5": float(results["top5"]),
        "loss": float(results["loss"]),
        "epochs": config.epochs,
        "steps": manager.step(),
        "steps_per_epoch": steps_per_epoch,
        "batch_size": config.batch_size,
        "accum_steps": config.accum_steps,
        "images_per_second": trained_steps * config.batch_size / fit_seconds if fit_seconds else None,
        "wall_seconds": time.time() - started,
        "train_seconds": fit_seconds,
        "resumed_from_step": (header or {}).get("step", 0),
        "num_heldout": source.num_heldout,
        "num_train": source.num_train,
        "dataset": config.dataset,
        **strategy.metrics(),  # backend, strategy, replicas, devices, device_kind, processes, local_devices
        "jit_compile": bool(model.jit_compile),  # Keras' resolved value (TPUStrategy compiles with XLA regardless)
        "fastest_measured_form": measured.fastest if measured is not None else None,
        "parameters": int(model.count_params()),
    }
    if extra_evals:
        metrics["evals"] = extra_evals
    if chief:
        metrics["plots"] = _write_outputs(workdir, model, source, config, total_steps, schedule, strategy)
        metrics["wall_seconds"] = time.time() - started
        write_json(files.join(workdir, "metrics.json"), metrics)
    print(
        f"[training] held-out top-1 {metrics['top1']:.4f}, top-5 {metrics['top5']:.4f}, loss {metrics['loss']:.4f} "
        f"after {metrics['steps']} steps; {metrics['wall_seconds']:.1f} s; "
        + (f"outputs in {workdir}" if chief else f"process 0 writes the outputs in {workdir}"),
        flush=True,
    )
    if chief and metrics.get("plots"):
        print(f"[training] plots ({', '.join(sorted(metrics['plots']))}) in {files.join(workdir, 'plots')}", flush=True)
    return TrainResult(model=model, metrics=metrics, workdir=workdir, histories=histories)


def _set_op_determinism(enabled):
    """TensorFlow's op determinism as the run's config says, either way: it is process-wide, so a deterministic run
    earlier in the same process (a notebook, a test session) would otherwise leave it on, and Keras then refuses XLA
    for every later model. The tf.data pipeline runs TensorFlow ops on both Keras backends."""
    if enabled:
        tf.config.experimental.enable_op_determinism()
    else:
        from tensorflow.python.framework import config as tf_config  # no public switch back off

        tf_config.disable_op_determinism()


def _weights_checksum(model):
    """One number from every weight: what the processes of a run compare before their first step."""
    return float(sum(np.sum(np.asarray(v.value, np.float64)) for v in model.weights))


def _write_outputs(workdir, model, source, config, total_steps, schedule, placement):
    with processes.alone() if placement.num_processes > 1 else contextlib.nullcontext():
        save_model(model, files.join(workdir, "model.keras"))  # it reloads the file to check it: a local model
        if placement.num_processes > 1:  # the run's arrays span every process: draw with this process's own copy
            model = keras.saving.load_model(files.join(workdir, "model.keras"), compile=False)
        # A plain-text copy of model.class_names for tools outside Python; export reads the model's own names.
        write_labels(files.join(workdir, "labels.txt"), source.class_names)
        write_samples(workdir, source, config)
        plots_dir = files.join(workdir, "plots")
        plots = plot_training_curves(files.join(workdir, "log.csv"), plots_dir, schedule, total_steps)
        with files.load_numpy(files.join(workdir, "samples", "heldout.npz")) as samples:
            images, labels = samples["images"], samples["labels"]
            plots.update(inspection_figures(model, images, plots_dir, labels, source.class_names))
    return {key: files.relpath(path, workdir) for key, path in plots.items()}


def _resume_schedule(config, total_steps, loaded):
    """The learning-rate schedule of this run: the restored checkpoint's, stretched if the run's length changed.

    A checkpoint carries the schedule that wrote it (with any earlier stretches). A file written before
    checkpoints carried it gets this run's configured schedule (not stretched: extend such a run from a newer file).
    """
    saved = loaded[1].get("schedule") if loaded else None
    if saved is None:  # a fresh run, or an older checkpoint (run_identity.resolve compared its config)
        return make_schedule(config, total_steps)
    header = loaded[1]
    schedule = WarmupDecay(**saved)
    if schedule.total_steps != total_steps:
        if not config.extend_epochs:
            raise ValueError(
                f"The checkpoint's learning-rate schedule ends at step {schedule.total_steps}, this run at "
                f"{total_steps}: use the original epochs, a new --workdir, or --set extend_epochs=True to stretch "
                f"the rest of the schedule on purpose."
            )
        schedule = schedule.extend(int(header["step"]), total_steps)
    if config.rescue and schedule.peak != config.learning_rate:
        # The same shape from the same step, at the new peak: the rescued steps' rates scale by new / old.
        schedule = WarmupDecay.from_config({**schedule.get_config(), "peak": config.learning_rate})
    return schedule


def source_of(config, shard=(0, 1)):
    """The run's `training.data.Source`: its dataset, splits, held-out fraction and image-reading options.

    `shard`: (process index, number of processes) of a multi-process run (`training.data.load_source`).
    """
    return load_source(
        config.dataset,
        data_dir=config.data_dir,
        train_split=config.train_split,
        eval_split=config.eval_split,
        holdout_fraction=config.holdout_fraction,
        seed=config.seed,
        image_background=config.image_background,
        skip_unreadable_images=config.skip_unreadable_images,
        follow_symlinks=config.follow_symlinks,
        max_image_bytes=config.max_image_bytes,
        shard=shard,
    )


def model_config(config, num_classes):
    """The run's `ViTConfig`: the variant with the run's image size, classes, precision and model overrides."""
    overrides = dict(config.model)
    if config.head_bias_init is not None:
        overrides["head_bias_init"] = config.head_bias_init
    if config.precision != "float32":
        overrides["dtype"] = config.precision
    return keras_vit.get_variant(config.variant).replace(
        image_size=config.image_size, num_classes=num_classes, **overrides
    )


def build_model(config, num_classes, class_names=None):
    """The run's `VisionTransformer`, optionally initialised from `config.init` (.npz or .keras).

    `class_names` (the dataset's, in label order) are kept on the model (`model.class_names`, in model.keras),
    so the saved model carries its own label space and an export reads its labels from the model itself. A
    model fine-tuned from a pretrained one gets the run's names, never the checkpoint's.
    """
    model = keras_vit.create_model(model_config(config, num_classes), class_names=class_names)
    if config.init:
        initialise_from(model, config.init)
        if not config.init_head and "head" in {layer.name for layer in model.layers}:
            # The references always fine-tune from a fresh zero head, even when the class counts match.
            head = model.get_layer("head")
            head.kernel.assign(np.zeros(head.kernel.shape, "float32"))
            head.bias.assign(np.full(head.bias.shape, model.config.head_bias_init, "float32"))
    return model


def initialise_from(model, source):
    """Loads the `--init` checkpoint into `model` for fine-tuning: the one place `--init` is read.

    Any source `keras_vit.load_weights` takes: a catalogue name, `hf://` repo, URL, `.npz`, `.keras` model or a
    folder of timm / transformers / keras-hub layout. Position embeddings are interpolated to the model's patch
    grid and a head with another class count is left at its fresh zero initialisation (`keras_vit.load_npz`'s
    rules). Downloads are cached, so a resumed run does not fetch the checkpoint again.
    """
    try:
        return keras_vit.load_weights(model, source)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"--init checkpoint not found: {err}") from None
