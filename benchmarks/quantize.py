"""`python -m benchmarks.quantize`: what Keras' `model.quantize(mode)` costs a keras_vit model per mode (int8, int4,
float8): logit difference and top-1 agreement, and with `--workdir RUN` the trained run's held-out top-1."""

import argparse
import json
import os
import shutil
import tempfile
import warnings

import numpy as np

MODES = ("int8", "int4", "float8")


def logit_differences(variant, image_size, images, seed=0):
    """{mode: {rel_max_diff, top1_agreement}} of `model.quantize(mode)` against the float model."""
    import keras

    import keras_vit

    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (images, image_size, image_size, 3)).astype("float32")
    out = {}
    for mode in MODES:
        keras.utils.set_random_seed(seed)
        model = keras_vit.create_model(variant, image_size=image_size, num_classes=1000)
        head = model.get_layer("head")
        head.kernel.assign(rng.normal(0, 0.05, head.kernel.shape).astype("float32"))
        head.bias.assign(rng.normal(0, 0.5, head.bias.shape).astype("float32"))
        reference = keras.ops.convert_to_numpy(model.predict(x, batch_size=8, verbose=0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Keras names each layer it has nothing to quantize in
            model.quantize(mode)
        got = keras.ops.convert_to_numpy(model.predict(x, batch_size=8, verbose=0))
        out[mode] = {
            "rel_max_diff": float(np.abs(got - reference).max() / np.abs(reference).max()),
            "top1_agreement": float((got.argmax(-1) == reference.argmax(-1)).mean()),
        }
        print(
            f"{variant} {mode}: max |logit diff| / max |logit| {out[mode]['rel_max_diff']:.2e}, "
            f"top-1 agreement {out[mode]['top1_agreement']:.1%}",
            flush=True,
        )
    return out


def heldout_accuracy(workdir):
    """{"float32": top1, mode: top1} of the run's model.keras on its held-out split, quantized per mode."""
    import keras

    import keras_vit  # noqa: F401 - registers the layers
    from training.evaluation import evaluate

    out = {"float32": evaluate(workdir)["top1"]}
    print(f"{workdir} float32: held-out top-1 {out['float32']:.2%}", flush=True)
    for mode in MODES:
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "run")
            shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns("export*", "checkpoints*", "*.tflite"))
            model = keras.saving.load_model(os.path.join(copy, "model.keras"), compile=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.quantize(mode)
            model.save(os.path.join(copy, "model.keras"))  # evaluate loads it again: the saved file is judged
            out[mode] = evaluate(copy)["top1"]
        print(f"{workdir} {mode}: held-out top-1 {out[mode]:.2%}", flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", default="B/16")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--workdir", default=None, help="a trained run (runs/digits) to measure held-out top-1 per mode")
    args = p.parse_args(argv)
    report = {"logits": logit_differences(args.variant, args.image_size, args.images)}
    if args.workdir:
        report["heldout_top1"] = heldout_accuracy(args.workdir)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
