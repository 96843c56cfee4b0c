"""The training configuration: one frozen dataclass, recipes in `training/configs/`, `key=value` overrides."""

import dataclasses
import math
import typing
from typing import Literal

from .fields import check_fields, choices
from .ranges import check_range

# The `strategy` names of `training.placement`, on either backend: the one list of them.
Strategy = Literal["auto", "tpu", "multi_worker", "mirrored", "default", "fsdp"]


class StrategyError(RuntimeError):
    """The requested strategy cannot run on this machine."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs. Recipes return one of these; CLI flags and `--set` override its fields.

    Attributes:
        dataset: "digits" (embedded), "synthetic", "tfds:NAME" or "folder:PATH" (one sub-folder per class).
        data_dir: TFDS data directory (datasets are never downloaded at run time).
        train_split, eval_split: split strings for TFDS ("train", "train[:90%]", ...). For digits and folders the
            held-out split is a fixed stratified `holdout_fraction` of the images.
        extra_evals: more held-out splits evaluated at the end of training, {name: split}, reported in
            metrics.json under "evals" (e.g. {"minival": "train[99%:]"}); a split of another TFDS dataset is
            written "tfds:NAME:SPLIT". TFDS datasets only.
        holdout_fraction: fraction held out for evaluation when the dataset has no eval split of its own.
        shuffle_buffer: shuffle buffer of the training stream; None shuffles the whole (in-memory) dataset.
        image_background: what transparent pixels of `folder:` images are composited onto: "white", "black" or
            an (R, G, B) triple (see `keras_vit.images`; predict and inspect take the same option).
        skip_unreadable_images: a `folder:` dataset is decoded in full before training; False stops with the
            list of unreadable files, True leaves them out with a warning that counts and names them.
        follow_symlinks: follow symbolic links of a `folder:` dataset that point outside its folder (links
            inside it are always followed; without this, one pointing outside stops the run before training).
        max_image_bytes: the largest image file of a `folder:` dataset read, in bytes; a larger one (or a FIFO or
            device, whatever its size) is unreadable, so a link to /dev/zero cannot fill the memory.
        variant: a `keras_vit` variant name ("testing", "Ti/16", "B/16", ...); None builds the model the `init`
            checkpoint describes (its size, patch, pooling, class token, representation layer, GELU and
            LayerNorm epsilon; `training.options.resolve`), with `model` overrides on top.
        image_size: model input size in pixels (images are resized to it); None for the `init` checkpoint's.
        model: other `keras_vit.create_model` overrides, e.g. {"hidden_size": 64, "dropout_rate": 0.1}.
        init: the checkpoint to fine-tune from, any source `keras_vit.load_weights` takes (a catalogue name,
            `hf://ORG/NAME`, a URL, a `.npz`, `.keras` or timm / transformers / keras-hub folder); position
            embeddings are interpolated and the head starts fresh (zero kernel, `head_bias_init` bias), as in the
            references' fine-tuning, unless `init_head` is set.
        naflex: train a SigLIP 2 NaFlex model (`keras_vit.NaFlexViT`): every image at its own aspect ratio as up to
            `max_num_patches` patches, never squashed (training.data.naflex). None: the `init` checkpoint's form (a
            transformers `siglip2` or timm `naflexvit_*` folder is NaFlex, anything else not); True also builds a
            NaFlex model from a fixed-resolution SigLIP checkpoint (no class token, a MAP or mean head).
        max_num_patches: a NaFlex run's patch budget per image; None for the checkpoint's (256 where it states none).
        init_head: also load the checkpoint's head when its class count fits (to continue a run on new data).
        lora_rank: LoRA fine-tuning (`keras_vit.enable_lora`) of rank `lora_rank`: only the LoRA factors of every
            attention's query, key, value and out projections and the head train, all else stays as `init` set
            it; checkpoints hold the factors, model.keras the merged model. None for full fine-tuning.
        lora_targets: with `lora_rank`, the projections that get factors (`keras_vit.lora.TARGET_GROUPS`):
            "attention" (query, key, value, out), "qkv" (query, key, value: PEFT's usual choice) or "all" (the
            attention's and the MLP's).
        batch_size: the GLOBAL batch of one optimiser step (per-replica batch x replicas x accum_steps); None for
            the paper's fine-tuning batch of 512, or the largest power of two the training split holds.
        accum_steps: gradient accumulation: each optimiser step is `accum_steps` forward/backward passes over
            `batch_size // accum_steps` images, averaged (the same update as one batch of `batch_size`, in less
            memory; vit_jax's `accum_steps`). Every other count (steps_per_epoch, warmup_steps,
            checkpoint_every, steps_per_execution, the step of a checkpoint) is in optimiser steps.
        epochs: passes over `steps_per_epoch` steps.
        steps_per_epoch: None for dataset size // batch_size; set it to express step-based recipes.
        optimizer: "adamw" or "sgd" (momentum).
        learning_rate: peak learning rate (after warm-up).
        weight_decay: Keras AdamW convention (multiplied by the learning rate); see `training.optim`.
        beta_1, beta_2, momentum: optimizer moments.
        schedule: "cosine", "linear" or "constant" decay after the linear warm-up.
        warmup_steps: linear warm-up from 0 to `learning_rate`; None for 5% of the run's steps.
        global_clipnorm: clip the global gradient norm (1.0 in the paper); None for none.
        ema_decay: keep an exponential moving average of the trained weights with this decay per optimiser step
            (Keras' `use_ema`; timm's `--model-ema-decay`, 0.9998 in the DeiT recipes); None for none. The average
            is kept in optimizer variables, so checkpoints carry it and a resume continues it exactly. It spans
            about 1 / (1 - ema_decay) steps: a run much shorter than that averages mostly its first weights. Both
            the raw and the averaged weights are evaluated at the end (`training.ema`).
        ema_export: with `ema_decay`, the weights model.keras (and so every export) holds: True for the average,
            False for the raw weights. The default is the average, not the better of the two on the held-out split,
            whose accuracy would then be a selected (optimistic) figure; metrics.json reports both.
        loss: "softmax" or "sigmoid" cross-entropy.
        label_smoothing: label smoothing of the targets.
        head_bias_init: initial bias of the head (big_vision's ImageNet-21k configs use -10 with sigmoid
            cross-entropy); None keeps the variant's.
        augment: train pre-processing: "inception" (inception crop + flip), "translate" (small random shifts,
            for digits), "resize" (none).
        flip: random left-right flips (with "inception").
        translate: maximum shift, in pixels of the original image, for "translate".
        crop_area: (min, max) area fraction of the inception crop.
        randaugment: (num_layers, magnitude) of big_vision's `randaug(n, m)`, per image (`training.augment`), or
            None. The magnitude is on big_vision's level scale, where 10 is its `_MAX_LEVEL` (full strength:
            rotations up to 30 degrees, shear 0.3, translation 100 px); AugReg's 15 and 20 go beyond it.
        randaugment_scale_pixels: scale RandAugment's Translate and Cutout (100 px and 40 px at level 10, set by
            big_vision for 224 px crops) by image_size / 224, for small images (not the reference; default off).
        mixup_alpha: Mixup concentration (big_vision's `mixup(p=...)`): every batch is mixed with weights drawn
            from a symmetric Dirichlet (Beta for two images) with this concentration, sorted so the image itself
            keeps the largest weight; 0 for no Mixup.
        mixup_images: how many images are mixed into each one (big_vision's `n`, 2 for standard Mixup).
        eval_resize_small: None resizes held-out images to `image_size` (squash, the paper's fine-tuning
            evaluation); an int resizes the shorter side to it (aspect kept) and takes the central
            `image_size` crop (big_vision's `resize_small(256)|central_crop(224)`).
        jit_compile: "auto" (TPUStrategy and other tf.distribute strategies: Keras' choice, TPUStrategy compiling
            with XLA itself; the default strategy: XLA when this TensorFlow build can compile on the device),
            True or False to force it. See `training.placement.strategy.resolve_jit_compile`.
        device_input: where images are scaled to [-1, 1] (and Mixup's images mixed): True sends uint8 images
            (and Mixup's weights) to the device and does that arithmetic inside the compiled step
            (`training.device_input`), False does it in tf.data; "auto" is True on a GPU or TPU and False on a CPU.
            The stream is the same either way (without RandAugment each image is rounded to whole 0..255 levels
            first). With Mixup it needs accum_steps=1 and a step that sees the whole batch the host mixed (one
            process; on TensorFlow one replica): "auto" falls back to False otherwise, True is refused.
        steps_per_execution: steps run per call into the compiled function; lowered to the largest divisor of
            the steps per epoch not above it (with a printed note), so epochs and checkpoints stay on schedule;
            None for the largest divisor up to 50 (no note).
        precision: "float32" or "mixed_bfloat16".
        seed: seeds the model init, the data order and the augmentation.
        deterministic: enable TF op determinism (bitwise-reproducible CPU runs; slower).
        checkpoint_every: steps between checkpoints (also written at each epoch end); 0 for epoch ends only.
        extend_epochs: on resume, accept a changed `epochs` on purpose: the rest of the learning-rate decay is
            stretched from the restored step to the new end (continuous there; `training.optim.WarmupDecay.extend`).
            Without it a resume with other epochs, learning rate, warm-up, optimizer, ... is refused.
        rescue: on resume, accept a changed `learning_rate` (the peak of the restored schedule, which keeps its
            shape) and `global_clipnorm` on purpose, to continue a diverged run from its last good checkpoint;
            the change is recorded in run.json and the checkpoints' history (`training.run_identity`).
        eval_every: epochs between held-out evaluations during training (0 for the final one only).
        num_samples: held-out images saved to samples/heldout.npz.
        num_calibration: training images saved to samples/calibration.npz (<= 512).
        plots: whether the run ends by drawing its figures into plots/ (training curves, attention distance and
            rollout, embedding filters, position-embedding similarity); False skips them.
        strategy: "auto", "tpu", "multi_worker", "mirrored" or "default", on either Keras backend (see
            `training.placement.distribution`); "fsdp" on JAX also splits the large kernels and their optimizer state
            over the devices (`training.placement.sharding`).
        matmul_precision: float32 matmul precision: None for the backend's default, "highest" for full float32
            on GPUs/TPUs (JAX's default rounds float32 inputs there; TensorFlow uses TF32 on recent GPUs), or
            JAX's "high" / "default".
        join_timeout: seconds each process of a multi-process JAX run waits for all the others to connect
            before it fails (`training.placement.processes`).
    """

    dataset: str = "digits"
    data_dir: str | None = None
    train_split: str = "train"
    eval_split: str | None = "test"
    extra_evals: dict = dataclasses.field(default_factory=dict)
    holdout_fraction: float = 0.2
    shuffle_buffer: int | None = None
    image_background: object = "white"  # "white", "black" or (R, G, B)
    skip_unreadable_images: bool = False
    follow_symlinks: bool = False
    max_image_bytes: int = 64 * 2**20  # keras_vit.images.MAX_IMAGE_BYTES
    variant: str | None = "testing"
    image_size: int | None = 32
    model: dict = dataclasses.field(default_factory=dict)
    init: str | None = None
    naflex: bool | None = None
    max_num_patches: int | None = None
    init_head: bool = False
    lora_rank: int | None = None
    lora_targets: Literal["attention", "qkv", "all"] = "attention"
    batch_size: int | None = 64
    accum_steps: int = 1
    epochs: int = 10
    steps_per_epoch: int | None = None
    optimizer: Literal["adamw", "sgd"] = "adamw"
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    beta_1: float = 0.9
    beta_2: float = 0.999
    momentum: float = 0.9
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_steps: int | None = 0
    global_clipnorm: float | None = 1.0
    ema_decay: float | None = None
    ema_export: bool = True
    loss: Literal["softmax", "sigmoid"] = "softmax"
    label_smoothing: float = 0.0
    head_bias_init: float | None = None
    augment: Literal["inception", "translate", "resize"] = "inception"
    flip: bool = True
    translate: float = 0.0
    crop_area: tuple = (0.05, 1.0)
    randaugment: tuple | None = None
    randaugment_scale_pixels: bool = False
    mixup_alpha: float = 0.0
    mixup_images: int = 2
    eval_resize_small: int | None = None
    jit_compile: bool | Literal["auto"] = "auto"
    device_input: bool | Literal["auto"] = "auto"
    steps_per_execution: int | None = 1
    precision: Literal["float32", "mixed_bfloat16"] = "float32"
    seed: int = 0
    deterministic: bool = False
    checkpoint_every: int = 100
    extend_epochs: bool = False
    rescue: bool = False
    eval_every: int = 1
    num_samples: int = 64
    num_calibration: int = 256
    plots: bool = True
    strategy: Strategy = "auto"
    matmul_precision: Literal["default", "high", "highest"] | None = None
    join_timeout: int = 300

    def __post_init__(self):
        # Types and choices, from the annotations (`training.options.fields`); before the range checks below, which
        # would fail on a string with a TypeError.
        check_fields(self)
        for field in dataclasses.fields(self):
            check_range(field.name, getattr(self, field.name))
        for key, value in self.model.items():
            check_range(f"model.{key}", value)
        from keras_vit.images import resolve_background  # here: the config module imports nothing heavy

        resolve_background(self.image_background)
        if self.eval_resize_small is not None and (
            not isinstance(self.eval_resize_small, int) or self.eval_resize_small < (self.image_size or 0)
        ):
            raise ValueError(
                f"eval_resize_small must be None or an integer >= image_size={self.image_size} (e.g. "
                f"256 for 224 px). Received: eval_resize_small={self.eval_resize_small!r}"
            )
        sizes = (self.batch_size, self.accum_steps)
        if self.batch_size is not None and self.batch_size % self.accum_steps:
            raise ValueError(
                f"batch_size must be divisible by accum_steps (each optimiser step is accum_steps micro-batches of "
                f"batch_size // accum_steps images). Received: batch_size={self.batch_size}, "
                f"accum_steps={self.accum_steps}; use a divisor, e.g. accum_steps={_divisor_below(*sizes)}."
            )
        if not self.ema_export and self.ema_decay is None:
            raise ValueError(
                "ema_export=False picks the raw weights over their moving average, which only a run with ema_decay "
                "keeps. Received: ema_decay=None; set ema_decay (e.g. 0.9998) or leave ema_export out."
            )
        if self.lora_targets != "attention" and self.lora_rank is None:
            raise ValueError(
                f"lora_targets picks the projections LoRA adapts, but the run has no LoRA. Received: "
                f"lora_targets={self.lora_targets!r}, lora_rank=None; set lora_rank (e.g. 8) or leave lora_targets out."
            )
        if self.extra_evals and not str(self.dataset).startswith("tfds:"):
            raise ValueError(
                f"extra_evals needs a TFDS dataset (named splits); {self.dataset!r} has one held-out "
                f"split. Received: extra_evals={self.extra_evals!r}; use extra_evals={{}}."
            )
        object.__setattr__(self, "model", dict(self.model))
        object.__setattr__(self, "extra_evals", dict(self.extra_evals))
        object.__setattr__(self, "crop_area", tuple(self.crop_area))
        if self.randaugment is not None:
            object.__setattr__(self, "randaugment", tuple(self.randaugment))

    def replace(self, **overrides):
        """A copy with fields changed; `model.NAME` keys go into the `model` overrides dict."""
        fields = {f.name for f in dataclasses.fields(self)}
        model = dict(self.model)
        plain = {}
        for key, value in overrides.items():
            if key.startswith("model."):
                model[key[len("model.") :]] = value
            elif key in fields:
                plain[key] = value
            else:
                from keras_vit._names import did_you_mean

                raise KeyError(
                    f"Unknown training option {key!r}.{did_you_mean(key, fields)} Known options: "
                    f"{', '.join(sorted(fields))}, "
                    f"or model.NAME for a keras_vit.create_model override."
                )
        if "model" not in plain:
            plain["model"] = model
        return dataclasses.replace(self, **plain)

    def to_dict(self):
        return dataclasses.asdict(self)


def steps_per_execution_for(requested, steps_per_epoch, resume_steps=()):
    """(steps_per_execution, note): the largest divisor of `steps_per_epoch` not above `requested`.

    Keras runs whole executions, so a `steps_per_execution` that does not divide the steps per epoch would run
    more steps per epoch than the schedule has (imagenet1k_s16: 1238 and 100), and epoch-end checkpoints and the
    resume arithmetic would drift. `resume_steps` are the steps of checkpoints a resume may start from: the value
    also divides their offsets into their epochs (they differ only when an earlier run used another value).
    The note (None when nothing changed) says what was adjusted and why.
    """
    period = math.gcd(steps_per_epoch, *(int(step) % steps_per_epoch for step in resume_steps))
    value = max(d for d in range(1, min(requested, period) + 1) if period % d == 0)
    if value == requested:
        return value, None
    why = f"the {steps_per_epoch} steps per epoch"
    if period != steps_per_epoch:
        why += f" and the mid-epoch checkpoint steps {sorted(resume_steps)}"
    above = [d for d in range(requested + 1, period + 1) if period % d == 0]
    nxt = f"the next divisor is {above[0]}; " if above else ""
    return value, (
        f"steps_per_execution={requested} does not divide {why}; using {value}, the largest divisor "
        f"not above it ({nxt}set steps_per_execution or steps_per_epoch to choose another)"
    )


def _divisor_below(number, limit):
    return max(d for d in range(1, min(number, limit) + 1) if number % d == 0)


def option_choices(name):
    """The values `TrainConfig` field `name` lists in its annotation (e.g. the command line's `--strategy` choices)."""
    return choices(typing.get_type_hints(TrainConfig)[name])


def check_strategy(name):
    """Raises `StrategyError` unless `name` is one of `TrainConfig.strategy`'s choices (for callers that pass a name
    without a `TrainConfig`, which checks its own)."""
    names = option_choices("strategy")
    if name not in names:
        raise StrategyError(f"Unknown strategy {name!r}. Use one of: {', '.join(names)}.")
