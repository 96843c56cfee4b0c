"""One accelerator measurement per process, no TensorFlow: `python -m benchmarks.gpu_step KIND` for KIND keras-vit,
timm or matmul; prints one line `RESULT {json}` naming the device and the day."""

import argparse
import contextlib
import datetime
import json
import os
import re
import statistics
import sys
import time

import numpy as np

if os.environ.get("BLOCK_TF"):  # the GPU machine has no TensorFlow: prove this path needs none
    sys.modules["tensorflow"] = None

TIMM = {
    "Ti/16": "vit_tiny_patch16_224",
    "S/16": "vit_small_patch16_224",
    "B/16": "vit_base_patch16_224",
    "L/16": "vit_large_patch16_224",
    "H/14": "vit_huge_patch14_224",
}
REMAT = {"none": False, "elementwise": "elementwise", "block": True}  # --remat: create_model's remat
FMHA = re.compile(r'custom_call_target="(__cudnn\$fmha[A-Za-z]*)"')


def rounds(run_steps, args):
    """[seconds per step] for each round: `run_steps(n)` runs n steps and returns when they are done."""
    run_steps(args.warmup)
    per_step = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        run_steps(args.steps)
        per_step.append((time.perf_counter() - start) / args.steps)
    return per_step


def rate(per_step, batch):
    """{median, min, max} images per second over the rounds."""
    rates = sorted(batch / s for s in per_step)
    return {"median": statistics.median(rates), "min": rates[0], "max": rates[-1]}


def fused_calls(hlo_text):
    """{custom-call target: count} of cuDNN fused-attention calls in an HLO module's text."""
    counts = {}
    for target in FMHA.findall(hlo_text):
        counts[target] = counts.get(target, 0) + 1
    return counts


def _batch(args):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (args.batch, args.image_size, args.image_size, 3)).astype("float32")
    y = rng.integers(0, 1000, args.batch).astype("int32")
    return x, y


def _keras_model(args):
    import keras

    import keras_vit

    keras.utils.set_random_seed(0)
    policy = {"bf16": "mixed_bfloat16", "fp32": "float32"}[args.dtype]
    model = keras_vit.create_model(
        _keras_config(args), image_size=args.image_size, num_classes=1000, dtype=policy, remat=REMAT[args.remat]
    )
    if args.quantize:
        model.quantize(args.quantize)
    optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.05)
    # On the torch backend --compile is Keras' jit_compile=True: its train/predict functions go through
    # torch.compile. JAX always compiles (the step is jitted whatever is asked).
    jit = args.compile if keras.config.backend() == "torch" else "auto"
    model.compile(
        optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit
    )
    return model


def _keras_config(args):
    """--timm-arch's `ViTConfig` (keras_vit's model of that timm architecture), else the --variant name."""
    if not args.timm_arch:
        return args.variant
    from keras_vit.models.configs import ViTConfig
    from keras_vit.weights import timm_eva

    return ViTConfig(**timm_eva.architecture_options(args.timm_arch, args.image_size, 1000))


def _peak_gib():
    import keras

    if keras.config.backend() == "jax":
        import jax

        return (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use", 0) / 2**30
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0


def compile_train_step(model, x, y):
    """(state, executable): Keras' `train_step` jitted with the state donated, as `Model.fit` does, and compiled."""
    import jax

    if not model.optimizer.built:  # train_on_batch builds it; a step compiled first builds it here
        model._symbolic_build(data_batch=(x[:1], y[:1]))
    state = model._get_jax_state(
        trainable_variables=True,
        non_trainable_variables=True,
        optimizer_variables=True,
        metrics_variables=True,
        purge_model_variables=False,
    )
    return state, jax.jit(model.train_step, donate_argnums=0).lower(state, (x, y)).compile()


def step_memory(compiled):
    """XLA's buffer assignment for a compiled step, in bytes: arguments, outputs, the outputs aliasing donated
    arguments, temporaries (what the step keeps for the backward pass lives here), and their peak sum."""
    stats = compiled.memory_analysis()
    out = {
        name: int(getattr(stats, f"{name}_size_in_bytes", 0) or 0)
        for name in ("argument", "output", "alias", "temp", "generated_code")
    }
    out["total"] = out["argument"] + out["output"] - out["alias"] + out["temp"]
    return out


def keras_vit_jax(args):
    """Keras' train_on_batch, then its compiled train/predict steps: HLO evidence, rates, peak memory."""
    import jax

    model = _keras_model(args)
    x, y = (jax.device_put(a) for a in _batch(args))

    def api_steps(n):
        for _ in range(n):
            model.train_on_batch(x, y)

    result = {"train_on_batch_img_s": rate(rounds(api_steps, args), args.batch)}
    start = time.perf_counter()
    state, train = compile_train_step(model, x, y)
    result.update(compile_s=time.perf_counter() - start, train_fmha=fused_calls(train.as_text()))
    result["memory"] = step_memory(train)
    losses = []

    def bare_steps(n):
        nonlocal state
        for _ in range(n):
            logs, state = train(state, (x, y))
            losses.append(logs["loss"])
        jax.block_until_ready(state)

    result["train_img_s"] = rate(rounds(bare_steps, args), args.batch)
    result["peak_gib"] = _peak_gib()
    result["losses"] = [float(v) for v in losses]
    result.update(_predict(model, (state[0], state[1]), x, args))
    if args.fit:
        result["fit_img_s"] = fit_rate(model, state, args)
        result["fit_vs_step"] = result["fit_img_s"]["median"] / result["train_img_s"]["median"]
    return result


def fit_rate(model, state, args):
    """`Model.fit`'s own img/s, the trainer's `device_input` route less tf.data: uint8 images in host memory,
    copied by Keras' fit loop (one batch ahead on an accelerator) into `training.device_input.DeviceInput`'s compiled
    step, which scales them there; AdamW, `--steps-per-execution` steps per call, progress bar off. Each round is one
    `fit` call of `--steps` steps, epoch start and end included; the first call compiles."""
    import keras

    from training.device_input import DeviceInput  # keras and keras_vit only: no TensorFlow
    from training.options.config import steps_per_execution_for  # pure Python

    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (args.batch * args.steps, args.image_size, args.image_size, 3), dtype=np.uint8)
    labels = rng.integers(0, 1000, len(images)).astype("int32")
    # The bare steps donated the model's buffers to their jitted step (a GPU frees them): the variables take the
    # state those steps left.
    for variables, values in zip((model.trainable_variables, model.non_trainable_variables), state[:2]):
        for variable, value in zip(variables, values):
            variable.assign(value)
    # Whole executions per fit call: the largest divisor of --steps not above --steps-per-execution, as the trainer.
    per_call, _ = steps_per_execution_for(args.steps_per_execution, args.steps)
    wrapped = DeviceInput(model)
    wrapped.compile(
        optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=per_call,
    )

    def fit(n):
        wrapped.fit(images, labels, batch_size=args.batch, epochs=1, steps_per_epoch=n, shuffle=False, verbose=0)

    per_step = []
    fit(args.steps)  # compiles; --warmup steps would not divide into whole executions
    for _ in range(args.rounds):
        start = time.perf_counter()
        fit(args.steps)
        per_step.append((time.perf_counter() - start) / args.steps)
    return {**rate(per_step, args.batch), "steps_per_execution": per_call}


def _predict(model, state, x, args):
    import jax

    predict = jax.jit(model.predict_step).lower(state, (x,)).compile()
    out = [None]

    def run(n):
        for _ in range(n):
            out[0] = predict(state, (x,))
        jax.block_until_ready(out[0])

    return {"infer_fmha": fused_calls(predict.as_text()), "infer_img_s": rate(rounds(run, args), args.batch)}


def keras_vit_torch(args):
    """train_on_batch / predict_on_batch on Keras' torch backend (fused attention: torch's SDPA)."""
    import torch

    model = _keras_model(args)
    x, y = (torch.as_tensor(a, device="cuda" if torch.cuda.is_available() else "cpu") for a in _batch(args))
    losses = []
    result = {
        "train_img_s": rate(
            rounds(lambda n: losses.extend(model.train_on_batch(x, y) for _ in range(n)), args), args.batch
        )
    }
    result["peak_gib"] = _peak_gib()
    result["losses"] = [float(np.asarray(v).ravel()[0]) for v in losses]
    result["infer_img_s"] = rate(rounds(lambda n: [model.predict_on_batch(x) for _ in range(n)], args), args.batch)
    return result


def timm_run(args):
    """timm's ViT, AdamW (fused on CUDA), torch.autocast bfloat16; train and inference rates, peak memory."""
    import timm
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    name = args.timm_arch or TIMM[args.variant]
    model = timm.create_model(name, pretrained=False, num_classes=1000, img_size=args.image_size).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=dev == "cuda")
    step_model = torch.compile(model) if args.compile else model
    x = torch.rand(args.batch, 3, args.image_size, args.image_size, device=dev) * 2 - 1
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    amp = torch.autocast(dev, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def train(n):
        for _ in range(n):
            optimizer.zero_grad(set_to_none=True)
            with amp:
                loss = F.cross_entropy(step_model(x), y)
            loss.backward()
            optimizer.step()
        sync()

    result = {"train_img_s": rate(rounds(train, args), args.batch)}
    result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if dev == "cuda" else 0.0
    model.eval()

    def infer(n):
        with torch.no_grad(), amp:
            for _ in range(n):
                step_model(x)
        sync()

    result["infer_img_s"] = rate(rounds(infer, args), args.batch)
    return result


def matmul(args):
    """Best bfloat16 TFLOP/s of 8192^3 products through JAX (MFU's ceiling, measured in the same run)."""
    import jax
    import jax.numpy as jnp

    n = 8192 if jax.devices()[0].platform == "gpu" else 512
    key = jax.random.PRNGKey(0)
    a = jax.random.normal(key, (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.fold_in(key, 1), (n, n), jnp.bfloat16)
    product = jax.jit(lambda a, b: a @ b)
    product(a, b).block_until_ready()
    best = float("inf")
    for _ in range(10):
        start = time.perf_counter()
        product(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return {"tflops": 2 * n**3 / best / 1e12, "size": n}


def device_name(kind, backend):
    """The device the measurement ran on as its driver names it ("NVIDIA H200"; "cpu" without an accelerator);
    None when the framework that would say is missing (the measurement failed for the same reason)."""
    try:
        if kind == "timm" or backend == "torch":
            import torch

            return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        import jax

        return jax.devices()[0].device_kind
    except ImportError:
        return None


def versions():
    out = {}
    for name in ("jax", "torch", "timm", "keras"):
        with contextlib.suppress(ImportError):
            out[name] = __import__(name).__version__
    return out


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=["keras-vit", "timm", "matmul"])
    p.add_argument("--variant", default="B/16")
    p.add_argument("--timm-arch", default=None,
                   help="instead of --variant: a timm Eva architecture keras_vit builds (vit_base_patch16_dinov3, "
                        "eva02_base_patch14_224): keras_vit's model of it, or timm.create_model(NAME)")  # fmt: skip
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--compile", action="store_true", help="timm: torch.compile; keras-vit on torch: compile(jit_compile=True)"
    )
    p.add_argument("--remat", choices=sorted(REMAT), default="none", help="keras-vit: create_model's remat")
    p.add_argument("--quantize", default=None, help="keras-vit: model.quantize(MODE) before compiling (float8)")
    p.add_argument("--fit", action="store_true", help="keras-vit on JAX: also Model.fit's img/s over uint8 host arrays")
    p.add_argument("--steps-per-execution", type=int, default=1, help="with --fit: steps per compiled call")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    start = time.perf_counter()
    try:
        if args.kind == "timm":
            result = timm_run(args)
        elif args.kind == "matmul":
            result = matmul(args)
        else:
            import keras

            result = (keras_vit_jax if keras.config.backend() == "jax" else keras_vit_torch)(args)
    except Exception as e:  # noqa: BLE001 - one failed measurement is reported, the run goes on
        import traceback

        traceback.print_exc()
        result = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
    result.update(
        wall_s=time.perf_counter() - start,
        versions=versions(),
        argv=sys.argv[1:],
        backend=os.environ.get("KERAS_BACKEND"),
        fused=os.environ.get("KERAS_VIT_FUSED_ATTENTION", "auto"),
        pad=os.environ.get("KERAS_VIT_ATTENTION_PAD", "2"),
        remat=args.remat,
        device=device_name(args.kind, os.environ.get("KERAS_BACKEND")),
        date=datetime.date.today().isoformat(),
    )
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
