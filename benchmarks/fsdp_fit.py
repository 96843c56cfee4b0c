"""Per-device memory of fine-tuning ViT-H/14 under `--strategy fsdp`: computed from CPU measurements, not run
(docs/multihost.md). `python -m benchmarks.fsdp_fit --out FILE` measures, `--from FILE` prints the table again."""

import argparse
import json
import os
import re
import subprocess
import sys

from benchmarks import fit

VARIANT = "H/14"
NUM_CLASSES = 10  # cifar10_finetune's head
BATCH = 512  # the fine-tuning recipes' batch (cifar10_finetune, imagenet_finetune_384)
SLOTS = 1  # their SGD with momentum 0.9: one velocity per parameter
SIZES = ((224, 4), (392, 4), (518, 2))  # (image size, measured batch): H/14's 16, 28 and 37 patches a side
DEVICES = (4, 8, 16, 32)  # e.g. a TPU v4-8 (4 chips) or v3-8 (8 cores), 8 GPUs, v4-32 (16 chips), v5e-32
BLOCKS = (1, 3)  # encoder blocks of the measured models
# Without remat: with it, a block keeps only its input (257 x 1280 floats at 224 px, 1.3 MiB) and one block's
# working set dominates, so the 1- and 3-block difference is within the RSS measurement's noise (it came out
# negative at 518 px) and gives no per-block figure.
SETTINGS = tuple(setting for setting in fit.FIT_SETTINGS if not setting[1])  # (column, remat, accum_steps)
XLA_MODEL = {"hidden_size": 512, "mlp_dim": 2048, "num_layers": 4, "num_heads": 4}  # 12.7 M parameters
XLA_DEVICES, XLA_BATCH = 4, 8


def split_counts(image_size, num_layers, devices=DEVICES, num_classes=NUM_CLASSES):
    """{devices: (parameters fsdp splits over them, parameters kept whole)} of H/14 at `image_size` with
    `num_layers` blocks, by `training.placement.sharding`'s rule: counted on models of 1 and 2 blocks (their
    difference is one block), so H/14 itself is never built."""
    one, two = (_split_counts(image_size, n, devices, num_classes) for n in (1, 2))
    return {n: [a + (num_layers - 1) * (b - a) for a, b in zip(one[n], two[n])] for n in devices}


def _split_counts(image_size, num_layers, devices, num_classes):
    import math

    import keras

    import keras_vit
    from training.placement.sharding import LAYOUTS

    model = keras_vit.create_model(VARIANT, image_size=image_size, num_classes=num_classes, num_layers=num_layers)
    counts = {n: [0, 0] for n in devices}
    for weight in model.weights:
        axes = next((a for pattern, a in LAYOUTS.items() if re.fullmatch(pattern, weight.path)), None)
        for n in devices:
            divides = axes is not None and all(size % n == 0 for size, a in zip(weight.shape, axes) if a is not None)
            counts[n][0 if divides else 1] += math.prod(weight.shape)
    del model
    keras.backend.clear_session()
    return counts


def block_activations(records, image_size):
    """(activation MiB per image of one encoder block, of the rest) from the 1- and 3-block records at `image_size`
    (without remat); `records` holds exactly those two at that size."""
    by_blocks = {r["num_layers"]: fit.activation_mib_per_image(r) for r in records if r["image_size"] == image_size}
    low, high = BLOCKS
    block = (by_blocks[high] - by_blocks[low]) / (high - low)
    return block, by_blocks[low] - low * block


def fsdp_fixed_mib(split, whole, devices, slots=SLOTS, accum_steps=1):
    """MiB per device of the weights, one gradient, the slots and the accumulator: split ones divided by `devices`."""
    return fit.fixed_mib(split / devices + whole, slots, accum_steps)


def rows(measured, num_layers=32):
    """One dict per (image size, accum_steps): activations per image, and per device count the GiB per
    device under `--strategy auto` (every weight whole) and under fsdp."""
    out = []
    for image_size, _ in SIZES:
        for column, remat, accum in SETTINGS:
            records = [r for r in measured["activations"] if r["image_size"] == image_size and r["remat"] == remat]
            if len(records) != len(BLOCKS):
                continue
            block, rest = block_activations(records, image_size)
            per_image = rest + num_layers * block
            row = {"image_size": image_size, "setting": column, "per_image_mib": per_image, "devices": {}}
            for devices in DEVICES:
                split, whole = measured["counts"][str(image_size)][str(devices)]
                activations = fit.micro_batch(BATCH, devices, accum) * per_image
                replicated = fit.fixed_mib(split + whole, SLOTS, accum) + activations
                sharded = fsdp_fixed_mib(split, whole, devices, SLOTS, accum) + activations
                row["devices"][devices] = (replicated / 1024, sharded / 1024)
            out.append(row)
    return out


def render(measured):
    """The Markdown paragraph and table of docs/multihost.md's memory section."""
    dp, fsdp = measured["xla"]["dp"], measured["xla"]["fsdp"]
    parameters = sum(measured["counts"]["224"]["8"])
    blocks = {size: block_activations(measured["activations"], size)[0] for size, _ in SIZES}
    lines = [
        f"XLA's buffers per device for one train step of a {dp['parameters'] / 1e6:.1f} M-parameter ViT (hidden "
        f"{XLA_MODEL['hidden_size']}, MLP {XLA_MODEL['mlp_dim']}, {XLA_MODEL['num_layers']} blocks; AdamW; batch "
        f"{XLA_BATCH}) on {XLA_DEVICES} host devices, from `compiled.memory_analysis()`: weights and optimizer "
        f"slots (the step's arguments) {dp['argument_mib']:.1f} MiB under `--strategy auto`, "
        f"{fsdp['argument_mib']:.1f} MiB under fsdp; temporaries (gradients, activations, gathered kernels) "
        f"{dp['temp_mib']:.1f} MiB and {fsdp['temp_mib']:.1f} MiB.",
        "",
        f"H/14 fine-tuning ({parameters / 1e6:.1f} M parameters with a {NUM_CLASSES}-class head at 224 px; batch "
        f"{BATCH}, SGD with momentum as `cifar10_finetune`; float32 weights): GiB per device, `--strategy auto` / "
        f"fsdp. The fixed cost (weights, one gradient, one slot) per device: "
        f"{fit.fixed_mib(parameters, SLOTS) / 1024:.2f} GiB under `--strategy auto`; under fsdp "
        + ", ".join(f"{fsdp_fixed_mib(*measured['counts']['224'][str(n)], n) / 1024:.2f} GiB on {n}" for n in DEVICES)
        + " devices (the accumulator of `accum_steps` adds one more copy of it). One block's activations per image, "
        "measured: " + ", ".join(f"{blocks[size]:.1f} MiB at {size} px" for size, _ in SIZES) + ".",
        "",
        "| image size | setting | activation MiB per image | "
        + " | ".join(f"{n} devices, GiB" for n in DEVICES)
        + " |",
        "|---|---|---|" + "---|" * len(DEVICES),
    ]
    for row in rows(measured):
        cells = [f"{auto:.1f} / {sharded:.1f}" for auto, sharded in row["devices"].values()]
        lines.append(
            f"| {row['image_size']} px | {row['setting']} | {row['per_image_mib']:,.0f} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def xla_step_memory(kind):
    """{"parameters", "argument_mib", "temp_mib", ...}: XLA's per-device buffers of Keras' train step under
    `DataParallel` ("dp") or fsdp ("fsdp") over this process's devices (run with XLA_DEVICES host devices)."""
    import jax
    import keras
    import numpy as np

    import keras_vit
    from training.placement import sharding

    devices = jax.devices()
    distribution = keras.distribution.DataParallel(devices=devices) if kind == "dp" else sharding.FullySharded(devices)
    keras.distribution.set_distribution(distribution)
    keras.utils.set_random_seed(0)
    model = keras_vit.create_model("testing", image_size=16, num_classes=8, **XLA_MODEL)
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(model.trainable_variables)
    model.compile(optimizer=optimizer, loss="categorical_crossentropy", jit_compile=True)
    state = tuple(
        [v.value for v in variables]
        for variables in (model.trainable_variables, model.non_trainable_variables, optimizer.variables,
                          model.metrics_variables)
    )  # fmt: skip
    images = np.zeros((XLA_BATCH, 16, 16, 3), "float32")
    labels = np.eye(8, dtype="float32")[np.zeros(XLA_BATCH, int)]
    data = tuple(jax.device_put(a, distribution.get_data_layout(a.shape).backend_layout) for a in (images, labels))
    # As Keras' JAX trainer compiles it (`make_train_function`): the state donated, its layouts kept.
    step = jax.jit(model.train_step, donate_argnums=0, out_shardings=(None, model._get_state_sharding_spec()))
    analysis = step.lower(state, data).compile().memory_analysis()
    return {
        "kind": kind,
        "devices": len(devices),
        "parameters": model.count_params(),
        "argument_mib": analysis.argument_size_in_bytes / fit.MIB,
        "temp_mib": analysis.temp_size_in_bytes / fit.MIB,
        "output_mib": analysis.output_size_in_bytes / fit.MIB,
    }


def _in_process(module_args, backend, devices=None):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": backend}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    done = subprocess.run([sys.executable, "-m", *module_args], capture_output=True, text=True, env=env, cwd=root)
    if done.returncode or "RESULT" not in done.stdout:
        raise RuntimeError(f"{' '.join(module_args)} failed: {(done.stderr or done.stdout)[-1500:]}")
    return json.loads(done.stdout.split("RESULT", 1)[1].strip())


def measure_all(progress=print):
    """Every measurement, each in a fresh process: {"activations", "xla", "counts"}."""
    activations = []
    for image_size, batch in SIZES:
        for blocks in BLOCKS:
            sizes = ["--image-size", str(image_size), "--batch", str(batch), "--num-layers", str(blocks)]
            args = ["benchmarks.memory", "--variant", VARIANT, *sizes, "--one", "False,1"]
            activations.append(_in_process(args, "tensorflow"))
            progress(json.dumps(activations[-1]))
    xla = {kind: _in_process(["benchmarks.fsdp_fit", "--xla-one", kind], "jax", XLA_DEVICES) for kind in ("dp", "fsdp")}
    progress(json.dumps(xla))
    counts = {str(size): {str(n): c for n, c in split_counts(size, 32).items()} for size, _ in SIZES}
    return {"activations": activations, "xla": xla, "counts": counts}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="write the measurements to this JSON file")
    p.add_argument("--from", dest="source", help="render the table from this JSON file instead of measuring")
    p.add_argument("--xla-one", choices=("dp", "fsdp"), help=argparse.SUPPRESS)  # one XLA analysis, in this process
    args = p.parse_args(argv)
    if args.xla_one:
        print("RESULT" + json.dumps(xla_step_memory(args.xla_one)))
        return
    if args.source:
        with open(args.source, encoding="utf-8") as f:
            measured = json.load(f)
    else:
        measured = measure_all()
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump(measured, f, indent=1)
    print(render(measured))


if __name__ == "__main__":
    main()
