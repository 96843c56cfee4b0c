"""Peak training memory per image, with and without rematerialisation, gradient accumulation or LoRA, one fresh
process per setting (`python -m benchmarks.memory`; docs/performance.md)."""

import argparse
import json
import os
import resource
import subprocess
import sys

import keras_vit

SETTINGS = ((False, 1), (True, 1), (False, 4), (True, 4))  # (remat, accum_steps)


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(variant, image_size, batch, remat, accum, lora_rank=None, num_layers=None):
    """One setting, in this process: {"before_mib", "after_mib", "step_mib", "per_image_mib", ...}.

    With `lora_rank`, LoRA factors on every attention's q/k/v/out and only they and the head train
    (`keras_vit.enable_lora`): the record adds "lora_rank" and "trainable_parameters". `num_layers`: fewer encoder
    blocks than the variant's (None keeps them), to measure a large variant's activations per block
    (`benchmarks.fsdp_fit`) where the whole model would not fit this machine.
    """
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    layers = {} if num_layers is None else {"num_layers": num_layers}
    model = keras_vit.create_model(variant, image_size=image_size, num_classes=1000, remat=remat, **layers)
    if lora_rank:
        keras_vit.enable_lora(model, lora_rank)
    optimizer = keras.optimizers.AdamW(1e-3, gradient_accumulation_steps=accum if accum > 1 else None)
    optimizer.build(model.trainable_variables)
    model.compile(optimizer=optimizer, loss="categorical_crossentropy", jit_compile=False)
    images = np.zeros((batch, image_size, image_size, 3), "float32")
    labels = np.eye(1000, dtype="float32")[np.zeros(batch, int)]
    before = _peak_mib()
    model.fit(images, labels, batch_size=batch // accum, epochs=1, shuffle=False, verbose=0)
    after = _peak_mib()
    micro = batch // accum
    record = {
        "variant": variant, "image_size": image_size, "batch": batch, "remat": remat, "accum_steps": accum,
        "micro_batch": micro, "before_mib": round(before), "after_mib": round(after),
        "step_mib": round(after) - round(before), "per_image_mib": round((after - before) / micro, 1),
        "parameters": model.count_params(), "backend": keras.backend.backend(), "num_layers": model.config.num_layers,
    }  # fmt: skip
    if lora_rank:
        trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
        record.update(lora_rank=lora_rank, trainable_parameters=trainable)
    return record


def run_settings(variant, image_size, batch, settings=SETTINGS, progress=None):
    """Measures each (remat, accum_steps[, lora_rank]) setting in a fresh process; returns one record per setting.

    A setting whose process fails (killed for memory, say) gets {"remat", "accum_steps", "error"} instead, and the
    others still run. The processes use Keras' TensorFlow backend whatever KERAS_BACKEND says (no torch needed).
    """
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    records = []
    for setting in settings:
        remat, accum = setting[:2]
        one = ",".join(map(str, setting))  # (remat, accum) or (remat, accum, lora_rank)
        sizes = ["--variant", variant, "--image-size", str(image_size), "--batch", str(batch)]
        command = [sys.executable, "-m", "benchmarks.memory", *sizes, "--one", one]
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root)
        if done.returncode or "RESULT" not in done.stdout:
            error = (done.stderr or done.stdout)[-500:] or f"exit code {done.returncode}"
            record = {"variant": variant, "image_size": image_size, "batch": batch, "remat": remat,
                      "accum_steps": accum, "error": f"exit code {done.returncode}: {error}"}  # fmt: skip
        else:
            record = json.loads(done.stdout.split("RESULT", 1)[1].strip())
        records.append(record)
        if progress:
            progress(record)
    return records


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", default="B/16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lora-rank", type=int, default=None, help="measure full training against LoRA of this rank")
    p.add_argument("--num-layers", type=int, default=None, help="encoder blocks (default: the variant's)")
    # "remat,accum[,lora]": measure in this process; remat is True, False or "elementwise"
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        remat, accum, lora = [*args.one.split(","), "0"][:3]
        record = measure(
            args.variant,
            args.image_size,
            args.batch,
            {"True": True, "False": False}.get(remat, remat),
            int(accum),
            int(lora) or None,
            args.num_layers,
        )
        print("RESULT" + json.dumps(record))
        return
    if args.lora_rank:
        settings = ((False, 1), (False, 1, args.lora_rank))
        run_settings(args.variant, args.image_size, args.batch, settings, lambda r: print(json.dumps(r), flush=True))
        return
    run_settings(args.variant, args.image_size, args.batch, progress=lambda r: print(json.dumps(r), flush=True))


if __name__ == "__main__":
    main()
