"""`train`, for the CLI and notebooks alike: resolve the run (`run_plan`), build it (`model_setup`), fit it in
epoch-aligned segments, finish it (evaluate, write metrics and outputs)."""

import contextlib
import dataclasses
import math
import time

import keras

from keras_vit import files

from . import ema
from .checkpoints import FaultTolerance
from .data import eval_dataset, train_dataset
from .evaluation import evaluate_extra
from .model_setup import build_run
from .outputs import (
    CsvLogger,
    EventLogger,
    inspection_figures,
    plot_training_curves,
    save_model,
    write_json,
    write_labels,
    write_samples,
)
from .placement import processes
from .run_plan import plan_run

__all__ = ["TrainResult", "train"]


@dataclasses.dataclass
class TrainResult:
    """What `train` returns: the trained model, the held-out metrics and the Keras histories of this call."""

    model: keras.Model
    metrics: dict
    workdir: str
    histories: list


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
        name = config if isinstance(config, str) else "custom"
        plan = plan_run(
            config, workdir, tf_strategy=tf_strategy, overrides=overrides, verbose=verbose, held=held, name=name
        )
        model, fitted, manager = build_run(plan)  # `fitted`: the model itself, or one taking uint8 images
        _start(plan, manager)
        eval_ds = eval_dataset(plan.source, plan.config, shard=plan.placement.shard, device_input=plan.device_input)
        histories, fit_seconds = _fit(plan, fitted, manager, callbacks, eval_ds)
        return _finish(plan, model, fitted, manager, eval_ds, histories, fit_seconds)


def _start(plan, manager):
    """Says where the run starts and, on the chief, checks the workdir and records the run's config and identity."""
    if plan.resume:
        print(f"[training] resuming from step {manager.step()} of {plan.total_steps} ({plan.resume.path})", flush=True)
    if plan.chief:
        files.check_writable(plan.workdir)  # a read-only or full workdir fails here, before any step is trained
        files.sweep_temporaries(plan.workdir)  # what writes killed before their rename left (see keras_vit.files)
        write_json(files.join(plan.workdir, "config.json"), plan.config.to_dict())
        plan.identity.write(plan.workdir)


def _segments(start, steps_per_epoch, total_steps):
    """(first epoch, steps per epoch, first step) of each `fit` call: a mid-epoch resume first finishes the
    interrupted epoch, so that later epochs keep their boundaries."""
    epoch, offset = divmod(start, steps_per_epoch)
    segments = []
    if start < total_steps and offset:
        segments.append((epoch, steps_per_epoch - offset, start))
        epoch, start = epoch + 1, (epoch + 1) * steps_per_epoch
    if start < total_steps:
        segments.append((epoch, steps_per_epoch, start))
    return segments


def _fit(plan, model, manager, callbacks, eval_ds):
    """Stage 3: `model.fit` over the plan's remaining steps; returns (histories, seconds spent in fit). `model`: the
    one `fit` runs (`build_run`'s `fitted`)."""
    config, workdir, shard = plan.config, plan.workdir, plan.placement.shard
    start = manager.step()
    mid_epoch = plan.resume if start % plan.steps_per_epoch else None
    fault_tolerance = FaultTolerance(
        manager,
        every=config.checkpoint_every,
        header={"schedule": plan.schedule.get_config(), **plan.identity.header()},
        agree=plan.placement.stop_agreement(),
        accum_steps=config.accum_steps,
        resume_metrics_from=mid_epoch,  # the interrupted epoch's row then counts its steps before the resume too
    )
    # The loggers first: an epoch's row is written before its checkpoint (see FaultTolerance.on_train_batch_end).
    loggers = (
        [CsvLogger(files.join(workdir, "log.csv")), EventLogger(files.join(workdir, "logs"))] if plan.chief else []
    )
    histories, fit_seconds = [], 0.0
    for first_epoch, steps, first_step in _segments(start, plan.steps_per_epoch, plan.total_steps):
        whole = (plan.total_steps - first_step) // plan.steps_per_epoch
        epochs = first_epoch + (1 if steps != plan.steps_per_epoch else whole)
        data = train_dataset(
            plan.source,
            config,
            start_step=first_step,
            num_steps=(epochs - first_epoch) * steps,
            shard=shard,
            device_input=plan.device_input,
        )
        fit_started = time.time()
        history = model.fit(
            data,
            epochs=epochs,
            initial_epoch=first_epoch,
            steps_per_epoch=steps * config.accum_steps,
            validation_data=eval_ds if config.eval_every else None,
            validation_freq=config.eval_every or 1,
            callbacks=[*loggers, fault_tolerance, *callbacks],
            shuffle=False,  # the stream is shuffled by training.data
            verbose=plan.verbose if plan.chief else 0,  # one progress bar per run
        )
        fit_seconds += time.time() - fit_started
        histories.append(history.history)
        fault_tolerance.raise_if_stopped()
        if model.stop_training:  # a user callback stopped the run
            break
    return histories, fit_seconds


def _finish(plan, model, fitted, manager, eval_ds, histories, fit_seconds):
    """Stage 4: the held-out evaluation (of the raw and the averaged weights, with `ema_decay`), metrics.json and the
    outputs (model, labels, samples, plots). `fitted` evaluates the run's `eval_ds`; `model` is written."""
    config, workdir = plan.config, plan.workdir

    def evaluate():
        return fitted.evaluate(eval_ds, verbose=0, return_dict=True)

    averaged = None
    if config.ema_decay is None:
        results = evaluate()
    else:  # both weight sets; the model keeps the one to write (model.keras, samples, plots)
        averaged = ema.evaluate_both(model, evaluate, config.ema_decay, config.ema_export)
        results = averaged.exported_figures
    metrics = _metrics(plan, model, manager, results, fit_seconds)
    if averaged is not None:
        metrics["ema"] = averaged.to_dict()
        print(f"[training] {averaged.line()}", flush=True)
    if config.extra_evals:
        metrics["evals"] = evaluate_extra(model, config, shard=plan.placement.shard)
    plan.placement.whole_weights(model)  # every process: with fsdp over several, a collective
    if plan.chief:
        metrics["plots"] = _write_outputs(plan, model)
        metrics["wall_seconds"] = time.time() - plan.started
        write_json(files.join(workdir, "metrics.json"), metrics)
    print(
        f"[training] held-out top-1 {metrics['top1']:.4f}, top-5 {metrics['top5']:.4f}, loss {metrics['loss']:.4f} "
        f"after {metrics['steps']} steps; {metrics['wall_seconds']:.1f} s; "
        + (f"outputs in {workdir}" if plan.chief else f"process 0 writes the outputs in {workdir}"),
        flush=True,
    )
    if plan.chief and metrics.get("plots"):
        print(f"[training] plots ({', '.join(sorted(metrics['plots']))}) in {files.join(workdir, 'plots')}", flush=True)
    return TrainResult(model=model, metrics=metrics, workdir=workdir, histories=histories)


def _metrics(plan, model, manager, results, fit_seconds):
    """metrics.json: the held-out figures, the run's counts and speed, and where it ran."""
    config, source = plan.config, plan.source
    resumed_from = plan.resume.step if plan.resume else 0
    trained_steps = manager.step() - resumed_from
    return {
        "top1": float(results["top1"]),
        "top5": float(results["top5"]),
        "loss": float(results["loss"]),
        "epochs": config.epochs,
        "steps": manager.step(),
        "steps_per_epoch": plan.steps_per_epoch,
        "batch_size": config.batch_size,
        "accum_steps": config.accum_steps,
        "images_per_second": trained_steps * config.batch_size / fit_seconds if fit_seconds else None,
        "wall_seconds": time.time() - plan.started,
        "train_seconds": fit_seconds,
        "resumed_from_step": resumed_from,
        "num_heldout": source.num_heldout,
        "num_train": source.num_train,
        "dataset": config.dataset,
        **plan.placement.metrics(),  # backend, strategy, replicas, devices, device_kind, processes, local_devices
        "jit_compile": bool(model.jit_compile),  # Keras' resolved value (TPUStrategy compiles with XLA regardless)
        "device_input": plan.device_input,  # uint8 images scaled (and mixed) in the compiled step
        "device_input_reason": plan.device_input_reason,
        "fastest_measured_form": plan.measured.fastest if plan.measured is not None else None,
        "parameters": int(model.count_params()),
        "trainable_parameters": sum(math.prod(v.shape) for v in model.trainable_weights),  # LoRA: factors + head
    }


def _write_outputs(plan, model):
    workdir, source, config, placement = plan.workdir, plan.source, plan.config, plan.placement
    with processes.alone() if placement.num_processes > 1 else contextlib.nullcontext():
        save_model(model, files.join(workdir, "model.keras"))  # it reloads the file to check it: a local model
        if placement.num_processes > 1:  # the run's arrays span every process: draw with this process's own copy
            model = keras.saving.load_model(files.join(workdir, "model.keras"), compile=False)
        # A plain-text copy of model.class_names for tools outside Python; export reads the model's own names.
        write_labels(files.join(workdir, "labels.txt"), source.class_names)
        write_samples(workdir, source, config)
        if not config.plots:
            return {}
        # (A NaFlex model's attention figures would need its patch inputs: its run draws the curves only.)
        plots_dir = files.join(workdir, "plots")
        plots = plot_training_curves(files.join(workdir, "log.csv"), plots_dir, plan.schedule, plan.total_steps)
        with files.load_numpy(files.join(workdir, "samples", "heldout.npz")) as samples:
            images, labels = samples["images"], samples["labels"]
            if not config.naflex:
                plots.update(inspection_figures(model, images, plots_dir, labels, source.class_names))
    return {key: files.relpath(path, workdir) for key, path in plots.items()}
