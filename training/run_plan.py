"""Stage 1 of `train`: the run resolved before anything is built, as one frozen `RunPlan`."""

import dataclasses
import json
import os
import sys
import time

import keras
import tensorflow as tf

from keras_vit import files
from keras_vit.models import flops

from . import advice, run_identity
from .checkpoints import Resume, find_resume, read_init
from .configs import get_config
from .data import load_source
from .device_input import resolve_device_input
from .optim import WarmupDecay, make_schedule
from .options import from_record, model_config, resolve_run, steps_per_execution_for
from .placement import Placement, processes, select_placement, set_matmul_precision


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What a run is, decided once: every later stage reads it.

    Attributes:
        config: the complete `TrainConfig` (recipe + overrides + resolved settings), as config.json records it.
        workdir: the run's directory or URL.
        placement: the backend's placement (`training.placement.placements.Placement`).
        source: the data (`training.data.Source`).
        resume: the checkpoint the run continues from (`training.checkpoints.checkpointing.Resume`), or None.
        init: the `--init` checkpoint already read (a new run only), or None.
        steps_per_epoch, total_steps, steps_per_execution: optimiser-step counts.
        schedule: the learning-rate schedule (the checkpoint's on a resume, stretched if asked).
        identity: the run's identity (`training.run_identity.RunIdentity`).
        jit_compile: the resolved XLA setting; `measured`: the backend advice that informed it, or None.
        device_input: whether uint8 images go to the device, scaled (and mixed) there (`training.device_input`);
            `device_input_reason`: why, in the words metrics.json records.
        started: time.time() at the start; `verbose`: Keras' verbosity.
    """

    config: object
    workdir: str
    placement: Placement
    source: object
    resume: Resume | None
    init: object
    steps_per_epoch: int
    total_steps: int
    steps_per_execution: int
    schedule: WarmupDecay
    identity: object
    jit_compile: object
    measured: object
    device_input: bool
    device_input_reason: str
    started: float
    verbose: int

    @property
    def chief(self):
        """Whether this process writes the workdir (the other workers of a multi-worker run share the chief's)."""
        return self.placement.is_chief


def plan_run(config, workdir, *, tf_strategy, overrides, verbose, held, name="custom"):
    """Resolves the run (stage 1); `held` (an ExitStack) keeps the chief's workdir lock until the run ends."""
    started = time.time()
    config = get_config(config).replace(**overrides)
    workdir = files.absolute(workdir or os.path.join("runs", name))
    _set_op_determinism(config.deterministic)
    keras.utils.set_random_seed(config.seed)
    set_matmul_precision(config.matmul_precision)
    placement = select_placement(config.strategy, tf_strategy=tf_strategy, join_timeout=config.join_timeout)
    if placement.is_chief:  # only the chief writes; the other workers of a multi-worker run share its workdir
        held.enter_context(run_identity.workdir_lock(workdir))
    source = source_of(config, placement.shard)
    resume = find_resume(files.join(workdir, "checkpoints"))  # before the optimizer: it carries its schedule
    config, init = _settings(config, source, placement, workdir, resume)
    jit_compile, measured = _jit_compile(config, placement, source)
    device_input, device_input_reason = resolve_device_input(config, placement)
    print(f"[training] {device_input_reason}", flush=True)
    steps_per_epoch, total_steps, steps_per_execution = _step_counts(config, source, placement, resume)
    if placement.num_processes > 1:  # every process restores the same file, or none does
        processes.check_same(
            "the checkpoint step to resume from (-1: none)",
            resume.step if resume else -1,
            f"Every process must see the same workdir: put it on storage all hosts share (gs://BUCKET/run, a "
            f"network file system), not on each host's own disk ({workdir}).",
        )
    # Refuses another run's checkpoint or a changed config; a folder enters by the files its scan kept.
    identity = run_identity.resolve(workdir, config, resume, source.files)
    return RunPlan(
        config=config,
        workdir=workdir,
        placement=placement,
        source=source,
        resume=resume,
        init=init,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        steps_per_execution=steps_per_execution,
        schedule=resume_schedule(config, total_steps, resume),
        identity=identity,
        jit_compile=jit_compile,
        measured=measured,
        device_input=device_input,
        device_input_reason=device_input_reason,
        started=started,
        verbose=(1 if sys.stdout.isatty() else 2) if verbose is None else verbose,
    )


def _settings(config, source, placement, workdir, resume):
    """(the run's complete config, the `--init` checkpoint or None): the settings a recipe leaves to the run.

    1. A resume takes what the run resolved when it started (its config.json), so the checkpoint is not read.
    2. A new run with `--init` reads the checkpoint once: its model options here, its weights in `build_model`.
    3. A new run without `--init` resolves from the data alone (a LoRA run needs an `--init`: refused).
    """
    init = None
    if resume:
        recorded = files.join(workdir, "config.json")
        if files.exists(recorded):
            config = from_record(config, json.loads(files.read_text(recorded)))
    elif config.init:
        init = read_init(config.init)
    elif config.lora_rank:  # LoRA adapts trained weights: on fresh random ones it would train a frozen random net
        raise ValueError(
            f"lora_rank={config.lora_rank} fine-tunes a trained model, but the run has no --init. Pass --init SOURCE "
            f"(e.g. runs/digits/model.keras), or --set lora_rank=None to train every weight."
        )
    return resolve_run(config, init, source.num_train, placement.num_replicas_in_sync), init


def _jit_compile(config, placement, source):
    """(jit_compile, measured advice): XLA on or off for this device, printed with the reason."""
    forward = flops.config_forward_flops(model_config(config, source.num_classes))
    measured = advice.lookup(placement.device_kind, config.precision, forward, device_name=placement.device_name)
    jit_compile, reason = placement.resolve_jit_compile(config.jit_compile, measured)
    print(f"[training] {placement.describe()}; {reason}", flush=True)
    if measured is not None:
        print(f"[training] advice: {measured.line(placement.form(jit_compile))}", flush=True)
    return jit_compile, measured


def _step_counts(config, source, placement, resume):
    """(steps_per_epoch, total_steps, steps_per_execution), after checking the batch fits the data and replicas."""
    if config.batch_size > source.num_train:
        raise ValueError(
            f"batch_size={config.batch_size} is larger than the training split ({source.num_train} images of "
            f"{config.dataset!r}). Use --batch-size {min(64, source.num_train)} or a larger dataset."
        )
    micro_batch = config.batch_size // config.accum_steps
    replicas = placement.num_replicas_in_sync
    if micro_batch % replicas:
        accumulation = f" times accum_steps={config.accum_steps} (micro-batches of {micro_batch})"
        raise ValueError(
            f"The global batch_size={config.batch_size} must be divisible by the {replicas} replicas of "
            f"{placement.name}"
            + (accumulation if config.accum_steps > 1 else "")
            + f". {_divisible_fix(config, replicas)}"
        )
    steps_per_epoch = config.steps_per_epoch or source.num_train // config.batch_size
    steps_per_execution, note = steps_per_execution_for(
        config.steps_per_execution, steps_per_epoch, resume.steps if resume else ()
    )
    if note:
        print(f"[training] note: {note}", flush=True)
    ema = ema_note(config, steps_per_epoch * config.epochs)
    if ema:
        print(f"[training] note: {ema}", flush=True)
    return steps_per_epoch, steps_per_epoch * config.epochs, steps_per_execution


def _divisible_fix(config, replicas):
    """What would work for a batch the replicas do not divide: the nearest batch sizes, or a device count."""
    multiple = replicas * config.accum_steps
    lower = config.batch_size // multiple * multiple
    sizes = " or ".join(f"--batch-size {b}" for b in (lower, lower + multiple) if b > 0)
    micro_batch = config.batch_size // config.accum_steps
    devices = max(d for d in range(1, replicas + 1) if micro_batch % d == 0)
    return f"Use {sizes}, or run on {devices} device{'s' if devices > 1 else ''} (a divisor of {micro_batch})."


def ema_note(config, total_steps):
    """A start-up note when `ema_decay`'s horizon (about 1 / (1 - decay) steps) exceeds the run, or None."""
    if not config.ema_decay or total_steps <= 0:
        return None
    horizon = 1.0 / (1.0 - config.ema_decay)
    if horizon <= total_steps:
        return None
    kept = config.ema_decay**total_steps
    return (
        f"ema_decay={config.ema_decay:g} averages over about {horizon:,.0f} steps (1 / (1 - decay)), more than this "
        f"run's {total_steps:,}: the exported average keeps {kept:.0%} of the initial weights. "
        + (
            f"For this length, --set ema_decay={1 - 10 / total_steps:.4g} or less (horizon a tenth of the run)."
            if total_steps >= 100
            else "A run this short gains nothing from an average: leave ema_decay out."
        )
    )


def resume_schedule(config, total_steps, resume):
    """The learning-rate schedule of this run: the restored checkpoint's, stretched if the run's length changed.

    A checkpoint carries the schedule that wrote it (with any earlier stretches).
    """
    if resume is None:
        return make_schedule(config, total_steps)
    schedule = WarmupDecay(**resume.schedule)
    if schedule.total_steps != total_steps:
        if not config.extend_epochs:
            raise ValueError(
                f"The checkpoint's learning-rate schedule ends at step {schedule.total_steps}, this run at "
                f"{total_steps}: use the original epochs, a new --workdir, or --set extend_epochs=True to stretch "
                f"the rest of the schedule on purpose."
            )
        schedule = schedule.extend(resume.step, total_steps)
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


def _set_op_determinism(enabled):
    """TensorFlow's op determinism as the run's config says, either way: it is process-wide, so a deterministic run
    earlier in the same process (a notebook, a test session) would otherwise leave it on, and Keras then refuses XLA
    for every later model. The tf.data pipeline runs TensorFlow ops on both Keras backends."""
    if enabled:
        tf.config.experimental.enable_op_determinism()
    else:
        from tensorflow.python.framework import config as tf_config  # no public switch back off

        tf_config.disable_op_determinism()
