"""The settings a recipe leaves to the run (None in the recipe): the model a checkpoint describes (NaFlex or not), and
the batch, warm-up and steps per execution scaled to the data (`resolve_run`); `model_config` gives the `ViTConfig`."""

import dataclasses

import keras_vit

from .config import steps_per_execution_for

# The fields that fix the checkpoint's tensor shapes: a run that states other values cannot load it.
SHAPE_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "channels", "resnet_layers")
# The fields the run decides (its image size, classes, regularisation and augmentation, precision, memory); every
# other field of the checkpoint's `ViTConfig` (its form: pooling, GELU, LayerScale, registers, RoPE, SwiGLU, norms...)
# is taken from it when the recipe leaves the variant, so the run builds what the checkpoint computes.
RUN_FIELDS = (
    "image_size", "num_classes", "dropout_rate", "attention_dropout_rate", "stochastic_depth_rate", "head_bias_init",
    "dtype", "dynamic_image_size", "dynamic_resize_method", "remat", "rope_rescale",
)  # fmt: skip
NAFLEX_BUDGET = 256  # SigLIP 2's NaFlex default, for a checkpoint that states no max_num_patches
PAPER_FINETUNE_BATCH = 512  # the paper's appendix B.1.1
WARMUP_FRACTION = 0.05  # 500 of the 10k fine-tuning steps (vit_jax's cifar10 preset)
MAX_STEPS_PER_EXECUTION = 50  # the paper recipes' value (cifar10_finetune)


def resolve_run(config, checkpoint, num_train, replicas):
    """`config` with every None setting above filled in, for `num_train` training images over `replicas`.

    Args:
        config: the run's `TrainConfig` (a recipe with `--set` overrides applied).
        checkpoint: the `--init` checkpoint (`keras_vit.weights.model_io.read_checkpoint`), or None.
        num_train: images in the training split.
        replicas: data-parallel replicas the global batch is split over.
    """
    config = resolve_naflex(resolve_model(config, checkpoint), checkpoint)
    batch_size = config.batch_size or _batch_for(num_train, replicas * config.accum_steps)
    steps_per_epoch = config.steps_per_epoch or max(1, num_train // batch_size)
    total_steps = steps_per_epoch * config.epochs
    warmup = config.warmup_steps
    if warmup is None:
        warmup = round(WARMUP_FRACTION * total_steps) if total_steps > 1 else 0
    execution = config.steps_per_execution
    if execution is None:
        execution, _ = steps_per_execution_for(MAX_STEPS_PER_EXECUTION, steps_per_epoch)
    return config.replace(batch_size=batch_size, warmup_steps=warmup, steps_per_execution=execution)


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


def from_record(config, recorded):
    """`config` with its None settings taken from the config.json the run recorded when it started (a resume)."""
    filled = {}
    for field in ("variant", "image_size", "batch_size", "warmup_steps", "steps_per_execution", "naflex",
                  "max_num_patches"):  # fmt: skip
        if getattr(config, field) is None and recorded.get(field) is not None:
            filled[field] = recorded[field]
    if config.variant is None and "variant" in filled:  # the checkpoint's model options, as resolved then
        filled["model"] = {**recorded.get("model", {}), **config.model}
    return config.replace(**filled)


def _batch_for(num_train, multiple):
    """The paper's batch, or the largest power of two within the training split; a multiple of `multiple`."""
    batch = PAPER_FINETUNE_BATCH
    while batch > num_train and batch > 1:
        batch //= 2
    return max(multiple, batch - batch % multiple)


def resolve_model(config, checkpoint):
    """`config` with `variant` / `image_size` from the checkpoint where they are None; checks stated ones fit it."""
    if checkpoint is None:
        if config.variant is None or config.image_size is None:
            left = "variant" if config.variant is None else "image_size"
            raise ValueError(
                f"{left}=None means the --init checkpoint's, but the run has no --init. Pass --init SOURCE (a "
                f"catalogue name, hf://ORG/NAME, a .npz or folder), or --set variant=Ti/16 --set image_size=224."
            )
        return config
    options = keras_vit.ViTConfig(**checkpoint.options).to_dict()  # every field, the ones a format leaves unsaid too
    model = dict(config.model)
    if config.variant is None:
        variant, derived = _variant_of(options)
        form = {f: v for f, v in options.items() if f not in SHAPE_FIELDS + RUN_FIELDS}
        model = {**derived, **form, **model}
    else:
        variant = config.variant
    image_size = config.image_size or _square_side(options["image_size"], checkpoint.source)
    resolved = config.replace(variant=variant, image_size=image_size, model=model)
    _check_shapes(resolved, options, checkpoint.source)
    return resolved


def _variant_of(options):
    """(variant name, model overrides) that build the checkpoint's shapes: a table variant where one matches."""
    shapes = {f: options[f] for f in SHAPE_FIELDS}
    for name, variant in keras_vit.VARIANTS.items():
        if name != "testing" and all(getattr(variant, f) == v for f, v in shapes.items()):
            return name, {}
    # Not a table variant (a distilled or tiny model): the "testing" variant with the checkpoint's shapes.
    return "testing", shapes


def _square_side(image_size, source):
    height, width = image_size
    if height != width:
        raise ValueError(
            f"{source!r} was trained at {height}x{width} px; the trainer takes square images: add "
            f"--set image_size={max(height, width)}."
        )
    return int(height)


def _check_shapes(config, options, source):
    """One line naming the run's variant, the checkpoint's and the `--set` that fixes it, when the shapes differ."""
    built = keras_vit.get_variant(config.variant).replace(
        **{k: v for k, v in config.model.items() if k in {f.name for f in dataclasses.fields(keras_vit.ViTConfig)}}
    )
    differ = [f for f in SHAPE_FIELDS if getattr(built, f) != options[f]]
    if not differ:
        return
    name, derived = _variant_of(options)
    stated = ", ".join(f"{f}={getattr(built, f)}" for f in differ)
    wanted = ", ".join(f"{f}={options[f]}" for f in differ)
    fix = f"--set variant={name}" if not derived else "--set variant=None (the checkpoint's model)"
    raise ValueError(
        f"--init {source!r} has {wanted}, but the run's variant={config.variant!r} has {stated}: use {fix}, or "
        f"--config finetune, which builds the model the checkpoint describes."
    )


def resolve_naflex(config, checkpoint):
    """`config` with `naflex` decided (None: whether the checkpoint is a NaFlex folder) and, for a NaFlex run, its
    `max_num_patches` (None: the checkpoint's); raises for a model that has no NaFlex form."""
    naflex = config.naflex if config.naflex is not None else getattr(checkpoint, "naflex", None) is not None
    if not naflex:
        if config.max_num_patches is not None:
            raise ValueError(
                f"max_num_patches={config.max_num_patches} is the patch budget of a NaFlex run, and this run is not "
                f"one: add --set naflex=true (with a SigLIP-style --init), or leave max_num_patches out."
            )
        return config.replace(naflex=False)
    budget = config.max_num_patches or (getattr(checkpoint, "naflex", None) or {}).get("max_num_patches")
    resolved = config.replace(naflex=True, max_num_patches=int(budget or NAFLEX_BUDGET))
    naflex_arguments(resolved, 1)  # refuses a model with no NaFlex form before anything is built
    return resolved


def naflex_arguments(config, num_classes):
    """`keras_vit.NaFlexViT` arguments of a NaFlex run: `model_config`'s shapes, its position table at the
    image_size's patch grid, the run's patch budget."""
    from keras_vit.weights.checkpoint import Checkpoint
    from keras_vit.weights.errors import CheckpointError
    from keras_vit.weights.naflex import naflex_options

    vit = model_config(config, num_classes)
    try:
        options = naflex_options(Checkpoint(params={}, options=vit.to_dict(), source="the run's model"))
    except CheckpointError:
        raise ValueError(
            f"naflex=True needs a SigLIP-style model (no class token, pooling 'map' or 'gap', no registers or ResNet "
            f"stem); the run's has class_token={vit.class_token}, pooling={vit.pooling!r}. Pass a SigLIP or SigLIP 2 "
            f"--init (e.g. a transformers siglip2 folder), or --set naflex=false."
        ) from None
    return dict(
        options,
        max_num_patches=config.max_num_patches,
        num_classes=num_classes,
        dropout_rate=vit.dropout_rate,
        attention_dropout_rate=vit.attention_dropout_rate,
        stochastic_depth_rate=vit.stochastic_depth_rate,
        dtype=vit.dtype,
    )
