"""Stage 2 of `train`: the model, its optimizer and checkpoint writer, built complete and restored (`build_run`)."""

import keras
import numpy as np

import keras_vit
from keras_vit import files
from keras_vit.lora import TARGET_GROUPS

from .checkpoints import CheckpointManager, initialise_from
from .device_input import DeviceInput
from .optim import make_loss, make_optimizer
from .options import model_config
from .options.resolve import naflex_arguments
from .placement import processes


def build_run(plan):
    """(model, fitted, manager): the plan's model compiled inside the placement's scope, its checkpoint restored.

    `fitted` is the model `fit` and the held-out evaluation of the run's stream run: `model` itself, or with
    `plan.device_input` a `DeviceInput` over it (the same variables) that takes uint8 images. `model` is what
    checkpoints, model.keras, the moving average and every export see.
    """
    config, placement, source = plan.config, plan.placement, plan.source
    same_weights = "Run the same keras-vit version, config and --init on every process."
    # Under several JAX processes every weight is built, initialised and restored as one global array.
    with placement.scope(), processes.refuse_different_values("the model's starting weights", same_weights):
        # A resume takes every weight from its checkpoint: --init (maybe a multi-GB download) is not read again.
        initial = config.replace(init=None) if plan.resume else config
        model = build_model(initial, source.num_classes, class_names=source.class_names, checkpoint=plan.init)
        optimizer = placement.prepare_optimizer(make_optimizer(config, plan.total_steps, plan.schedule))
        optimizer.build(model.trainable_variables)
        fitted = DeviceInput(model) if plan.device_input else model
        for compiled in {id(model): model, id(fitted): fitted}.values():
            _compile(compiled, optimizer, plan)
        manager = CheckpointManager(
            files.join(plan.workdir, "checkpoints"),
            model,
            optimizer,
            write=plan.chief,
            skipped=plan.resume.skipped if plan.resume else (),
            fitted=fitted,
        )
        if plan.resume:
            manager.restore(plan.resume)
    if placement.num_processes > 1:  # same seed, same file: a difference here would silently split the replicas
        processes.check_same("the model's starting weights", weights_checksum(model), same_weights)
    return model, fitted, manager


def _compile(model, optimizer, plan):
    """`model.compile` with the run's loss, metrics and XLA setting, and the placement's fixes."""
    config, placement = plan.config, plan.placement
    model.compile(
        optimizer=optimizer,
        loss=make_loss(config),
        # Weighted: evaluation batches are padded with zero-weight samples (training.data.eval_dataset).
        weighted_metrics=[
            keras.metrics.CategoricalAccuracy(name="top1"),
            keras.metrics.TopKCategoricalAccuracy(k=min(5, plan.source.num_classes), name="top5"),
        ],
        jit_compile=plan.jit_compile,
        # Fit steps are micro-batches (gradient accumulation); see the workaround for the count.
        steps_per_execution=placement.fit_steps_per_execution(plan.steps_per_execution, config.accum_steps),
    )
    placement.prepare_model(model)


def weights_checksum(model):
    """One number from every weight: what the processes of a run compare before their first step."""
    # A weight split over the processes' devices (fsdp) is gathered, by every process: they all call this.
    values = (processes.gather(v.value) if processes.spans_processes(v.value) else v.value for v in model.weights)
    return float(sum(np.sum(np.asarray(value, np.float64)) for value in values))


def build_model(config, num_classes, class_names=None, checkpoint=None):
    """The run's `VisionTransformer` (a `NaFlexViT` with `config.naflex`), optionally initialised from `config.init`.

    `class_names` (the dataset's, in label order) are kept on the model (`model.class_names`, in model.keras),
    so the saved model carries its own label space and an export reads its labels from the model itself. A
    model fine-tuned from a pretrained one gets the run's names, never the checkpoint's. `checkpoint`: the
    `init` checkpoint already read (`read_init`), so that it is read once.
    """
    if config.naflex:  # patches of any aspect ratio (training.data.naflex feeds it)
        model = keras_vit.NaFlexViT(**naflex_arguments(config, num_classes), class_names=class_names)
    else:
        model = keras_vit.create_model(model_config(config, num_classes), class_names=class_names)
    if config.init:
        # The references always fine-tune from a fresh zero head, even when the class counts match.
        new_head = not config.init_head and "head" in {layer.name for layer in model.layers}
        report = initialise_from(model, checkpoint or config.init, new_head=new_head)
        if new_head:
            head = model.get_layer("head")
            head.kernel.assign(np.zeros(head.kernel.shape, "float32"))
            bias = model_config(config, num_classes).head_bias_init  # a NaFlexViT has no `config`
            head.bias.assign(np.full(head.bias.shape, bias, "float32"))
        print(f"[training] --init {config.init}: {init_summary(report, new_head, num_classes)}", flush=True)
    if config.lora_rank:  # after `init`, whose kernels the factors adapt; a resume restores both from its checkpoint
        keras_vit.enable_lora(model, config.lora_rank, targets=config.lora_targets)
        trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
        print(
            f"[training] LoRA rank {config.lora_rank} on {_lora_words(config.lora_targets)}: {trainable:,} "
            f"of {model.count_params():,} parameters train (the factors and the head)",
            flush=True,
        )
    return model


def _lora_words(targets):
    """ "every attention's query, key and value" (and "every MLP") for a `lora_targets` set."""
    members = TARGET_GROUPS[targets]
    names = [name for name in members if name != "mlp"]
    words = f"every attention's {', '.join(names[:-1])} and {names[-1]}"
    return words + (", and every MLP" if "mlp" in members else "")


def init_summary(report, new_head, num_classes):
    """What `--init` gave the model, in a few words: "152 tensors loaded; new 2-class head"."""
    parts = [f"{len(report.loaded)} tensors loaded"]
    parts += [f"{key.rsplit('/', 1)[-1]} resized: {how}" for key, how in report.resized.items()]
    if new_head:
        parts.append(f"new {num_classes}-class head")
    return "; ".join(parts)
