"""Which recipe settings fit which accelerator's memory: computed from the CPU memory benchmark, not run; an upper
estimate for choosing `accum_steps` and `remat` (docs/performance.md)."""

import keras_vit
from keras_vit.labels import LABEL_SPACES
from training.configs import get_config

MIB = 2**20
BYTES_PER_VALUE = 4  # float32 weights, gradients, optimiser slots and accumulators

# (name, devices the global batch is split over, GiB per device). A TPU v2-8 or v3-8 has 8 cores (each its own
# memory); a v4-8 and a v5e-4 have 4 chips. A GPU row is one GPU: n of them split the batch n ways, so 8 GPUs of
# 16 GiB are the v3-8 row.
ACCELERATORS = (
    ("TPU v2-8", 8, 8),
    ("TPU v3-8", 8, 16),
    ("TPU v4-8", 4, 32),
    ("TPU v5e-4", 4, 16),
    ("1 GPU, 16 GiB", 1, 16),
    ("1 GPU, 24 GiB", 1, 24),
    ("1 GPU, 40 GiB", 1, 40),
    ("1 GPU, 80 GiB", 1, 80),
)
RECIPES = ("imagenet21k_b16", "imagenet_finetune_384", "cifar10_finetune")
FIT_ACCUM = 8  # vit_jax's accumulation for batch 512 (8 micro-batches of 64)
FIT_SETTINGS = (  # (column, remat, accum_steps)
    ("whole batch", False, 1),
    ("remat", True, 1),
    (f"accum_steps={FIT_ACCUM}", False, FIT_ACCUM),
    (f"remat + accum_steps={FIT_ACCUM}", True, FIT_ACCUM),
)


def optimizer_slots(optimizer, momentum=0.0):
    """Parameter-sized buffers the optimiser keeps: AdamW its two moments, SGD one velocity when momentum > 0."""
    if optimizer == "adamw":
        return 2
    if optimizer == "sgd":
        return 1 if momentum else 0
    raise ValueError(f"optimizer must be 'adamw' or 'sgd'. Received: optimizer={optimizer!r}")


def fixed_mib(parameters, slots, accum_steps=1):
    """MiB of the weights, one gradient, `slots` optimiser buffers and (accum_steps > 1) the accumulator."""
    copies = 2 + slots + (1 if accum_steps > 1 else 0)
    return copies * parameters * BYTES_PER_VALUE / MIB


def micro_batch(batch, devices, accum_steps=1):
    """Images one forward/backward pass holds on each device; the batch must divide evenly."""
    if batch % (devices * accum_steps):
        raise ValueError(
            f"batch must divide into devices x accum_steps micro-batches. Received: batch={batch}, "
            f"devices={devices}, accum_steps={accum_steps}; use a batch that is a multiple of {devices * accum_steps}."
        )
    return batch // (devices * accum_steps)


def per_device_mib(parameters, activation_mib_per_image, batch, devices, accum_steps=1, slots=2):
    """Memory per device of one training step: the fixed cost plus the micro-batch's activations."""
    micro = micro_batch(batch, devices, accum_steps)
    return fixed_mib(parameters, slots, accum_steps) + micro * activation_mib_per_image


def largest_micro_batch(parameters, activation_mib_per_image, capacity_gib, slots=2, accum_steps=FIT_ACCUM):
    """The most images per device and pass that fit in `capacity_gib` (0 when not even the fixed cost fits)."""
    room = capacity_gib * 1024 - fixed_mib(parameters, slots, accum_steps)
    return max(0, int(room // activation_mib_per_image))


def activation_mib_per_image(record):
    """Activation MiB per image of a `benchmarks.memory` record: the step's growth less one gradient, per image."""
    gradient = record["parameters"] * BYTES_PER_VALUE / MIB
    return (record["step_mib"] - gradient) / record["micro_batch"]


def recipe_spec(name):
    """What the fit needs of a training recipe: batch, image size, optimiser slots and its model's parameters."""
    import keras

    classes = {"tfds:imagenet2012": LABEL_SPACES["imagenet1k"], "tfds:imagenet21k": LABEL_SPACES["imagenet21k"],
               "tfds:cifar10": 10}  # fmt: skip
    config = get_config(name)
    model = keras_vit.create_model(config.variant, image_size=config.image_size,
                                   num_classes=classes[config.dataset], **dict(config.model))  # fmt: skip
    parameters = model.count_params()
    del model
    keras.backend.clear_session()
    return {"name": name, "variant": config.variant, "image_size": config.image_size, "batch": config.batch_size,
            "optimizer": config.optimizer, "slots": optimizer_slots(config.optimizer, config.momentum),
            "num_classes": classes[config.dataset], "parameters": parameters}  # fmt: skip


def _per_image(settings, image_size, remat):
    """Activation MiB per image at `image_size`, from the measurement without accumulation (see render)."""
    for record in settings:
        if record["image_size"] == image_size and record["remat"] == remat and record["accum_steps"] == 1:
            return None if "error" in record else activation_mib_per_image(record)
    return None


def accumulation_extra_mib(settings):
    """MiB each measured accumulated setting held beyond the fixed-cost model: its step, less one gradient and its
    micro-batch times the per-image activations of the same remat setting without accumulation."""
    extra = []
    for record in settings:
        if record["accum_steps"] == 1 or "error" in record:
            continue
        per_image = _per_image(settings, record["image_size"], record["remat"])
        if per_image is not None:
            gradient = record["parameters"] * BYTES_PER_VALUE / MIB
            extra.append((record["step_mib"] - gradient - record["micro_batch"] * per_image, gradient))
    return extra


def rows(memory):
    """One dict per (recipe, accelerator): per-device batch, GiB and fit per setting, largest micro-batches."""
    out = []
    for recipe in memory["recipes"]:
        per_image = {remat: _per_image(memory["settings"], recipe["image_size"], remat) for remat in (False, True)}
        for name, devices, gib in ACCELERATORS:
            share = micro_batch(recipe["batch"], devices)
            row = {"recipe": recipe["name"], "accelerator": name, "devices": devices, "gib": gib,
                   "per_device_batch": share, "settings": {}, "largest": {}}  # fmt: skip
            for column, remat, accum in FIT_SETTINGS:
                if per_image[remat] is None:
                    continue
                mib = per_device_mib(recipe["parameters"], per_image[remat], recipe["batch"], devices, accum,
                                     recipe["slots"])  # fmt: skip
                row["settings"][column] = {"gib": mib / 1024, "fits": mib <= gib * 1024}
            for remat in (False, True):
                if per_image[remat] is not None:
                    row["largest"][remat] = largest_micro_batch(recipe["parameters"], per_image[remat], gib,
                                                                recipe["slots"])  # fmt: skip
            out.append(row)
    return out


def render(memory):
    """The Markdown fit table, with the assumptions it is computed under."""
    recipes = "; ".join(
        f"`{r['name']}`: batch {r['batch']} at {r['image_size']} px, {r['parameters'] / 1e6:.1f} M parameters, "
        f"{r['optimizer']} ({r['slots']} slot(s)), fixed cost {fixed_mib(r['parameters'], r['slots']) / 1024:.2f} GiB "
        f"(+{fixed_mib(r['parameters'], 0, 2) - fixed_mib(r['parameters'], 0):.0f} MiB accumulator)"
        for r in memory["recipes"]
    )
    extra = accumulation_extra_mib(memory["settings"])
    if extra:
        low, high = min(e for e, _ in extra), max(e for e, _ in extra)
        ratios = [e / g for e, g in extra]
        recipes += (
            f". Keras' accumulation held {low:,.0f}-{high:,.0f} MiB ({min(ratios):.1f}-{max(ratios):.1f} gradients) "
            "more than this count in the measured accumulated settings (it forms the averaged gradient, "
            "`(g + accumulator) / steps`, as new tensors beside the step's gradient; XLA can fuse that into the "
            "update): near a limit, allow that much"
        )
    lines = [
        "**Computed, not run on an accelerator**: per-device memory of one training step, from the CPU figures "
        "above (`benchmarks/fit.py`): the fixed cost (float32 weights, one gradient, the optimiser's slots, the "
        "accumulator with accumulation) plus the per-device micro-batch (batch / devices / accum_steps) times the "
        "activation MiB per image of the setting without accumulation, at the recipe's image size. Those are float32 "
        "activations on a CPU without XLA; the recipes train in mixed_bfloat16 and XLA on an accelerator fuses and "
        'reuses buffers, so a device usually needs less: read a "no" near the limit as "try it". Devices '
        "assumed: 8 cores for a TPU v2-8 or v3-8, 4 chips for a v4-8 or v5e-4, one GPU per GPU row (n GPUs split "
        f"the batch n ways). {recipes}.",
        "",
        "| recipe | accelerator (devices x GiB) | batch per device | "
        + " | ".join(f"{c}, GiB" for c, _, _ in FIT_SETTINGS)
        + " | largest micro-batch per device with accumulation (plain / remat) |",
        "|---|---|---|" + "---|" * len(FIT_SETTINGS) + "---|",
    ]
    for row in rows(memory):
        cells = []
        for column, _, _ in FIT_SETTINGS:
            s = row["settings"].get(column)
            cells.append("-" if s is None else f"{s['gib']:.1f} {'fits' if s['fits'] else 'no'}")
        largest = " / ".join(str(row["largest"].get(remat, "-")) for remat in (False, True))
        lines.append(f"| `{row['recipe']}` | {row['accelerator']} ({row['devices']} x {row['gib']}) | "
                     f"{row['per_device_batch']} | " + " | ".join(cells) + f" | {largest} |")  # fmt: skip
    return "\n".join(lines)
