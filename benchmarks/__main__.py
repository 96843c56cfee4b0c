"""`python -m benchmarks`: keras-vit (on each Keras backend) vs keras-hub vs timm, interleaved in phases, one JSON
report; `--readme docs/performance.md` rewrites its tables, `--advice` the trainer's backend advice."""

import argparse
import json
import os
import shlex
import sys

from benchmarks import coordinator, readme, report
from benchmarks.worker import IMPLS
from keras_vit.files import atomic_write_text
from keras_vit.weights import timm_eva
from training import advice
from training.advice import read_cpuinfo
from training.configs import get_config


def parse_args(argv=None):
    """The options, checked: a bad value or a file without the table markers fails now, not after the run."""
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    for add in (_model_arguments, _timing_arguments, _input_arguments, _output_arguments, _memory_arguments,
                _phase_arguments):  # fmt: skip
        add(p)
    args = p.parse_args(argv)
    _resolve(p, args)
    _check_memory_and_files(p, args)
    return args


def _model_arguments(p):
    """What is measured: the model and its batch."""
    p.add_argument(
        "--variant", default="Ti/16", help="keras_vit variant name (plain ViTs only), e.g. Ti/16, S/16, testing"
    )
    p.add_argument("--timm-arch", default=None,
                   help="instead of --variant: a timm Eva architecture keras_vit builds (DINOv3, EVA-02, PE), e.g. "
                        "vit_small_patch16_dinov3 or eva02_small_patch14_224; keras_vit's model of it against "
                        "timm.create_model(NAME), both randomly initialised (keras-hub: plain ViTs only)")  # fmt: skip
    p.add_argument(
        "--recipe",
        default=None,
        help="measure the model of this training recipe (python -m training --config NAME): its variant, model "
        "overrides, image size and batch size, e.g. --recipe digits --num-classes 10",
    )
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--batch", type=int, default=32, help="training and throughput batch size")


def _timing_arguments(p):
    """How long each measurement runs, on how many threads, for which implementations."""
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds per phase; ratios are taken per round and reported as median (min-max), "
                        "and a target is met only when every round meets it")  # fmt: skip
    p.add_argument(
        "--train-steps",
        type=int,
        default=2,
        help="timed training steps per setting and round (short, so implementations alternate often)",
    )
    p.add_argument("--infer-reps", type=int, default=3, help="timed batches for inference throughput")
    p.add_argument("--latency-reps", type=int, default=20, help="timed batch-1 calls (Keras/timm)")
    p.add_argument("--tflite-reps", type=int, default=20, help="timed TFLite batch-1 invocations")
    p.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="untimed calls before each timed block (the first block of a setting always gets >= 1)",
    )
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="threads for torch and TFLite")
    p.add_argument(
        "--impls",
        default=None,
        help="comma-separated subset of " + ",".join(IMPLS) + " (keras-vit-jax and "
        "keras-vit-torch: keras-vit on those Keras backends; torch ones need torch installed). Default: all "
        "(all but keras-hub with --timm-arch)",
    )


def _input_arguments(p):
    """The input-pipeline and input-wait measurements."""
    p.add_argument(
        "--pipeline-batches",
        type=int,
        default=6,
        help="timed batches of the input-pipeline benchmark per round and side (0 skips it)",
    )
    p.add_argument("--pipeline-images", type=int, default=96, help="synthetic JPEGs the input pipelines read")
    p.add_argument("--input-wait-steps", type=int, default=4,
                   help="timed steps of a training run on the recipe's input stream (a keras-vit worker of its own) "
                        "that measures the share of step time spent waiting for input; 0 skips it")  # fmt: skip


def _output_arguments(p):
    """Where the results go besides report.json."""
    p.add_argument("--readme", default=None,
                   help="rewrite the performance table between the benchmark-table markers of this Markdown file "
                        "(e.g. docs/performance.md) from the run's report")  # fmt: skip
    p.add_argument("--advice", default=None,
                   help="merge this run's training figures per keras-vit form into this advice file (the trainer "
                        "reads training/backend_advice.json to recommend a backend and resolve jit_compile='auto' "
                        "on a CPU of the measured class)")  # fmt: skip
    p.add_argument("--out", default="benchmark_results", help="directory for report.json, .tflite files, worker logs")


def _memory_arguments(p):
    """The optional memory phase."""
    p.add_argument(
        "--memory",
        action="store_true",
        help="after the other phases, measure peak training memory per image (B/16 at 224 and 384 px, "
        "with and without remat and accumulation, one process per setting; ~10 GB RSS at 384 px, about 20 "
        "minutes on 2 cores): off by default, since the default run must stay under 15 minutes",
    )
    p.add_argument("--memory-only", action="store_true", help="run only the memory phase (--memory without the rest)")
    p.add_argument("--memory-variant", default="B/16", help="the memory phase's model (a keras_vit variant name)")
    p.add_argument("--memory-sizes", default="224,384", help="comma-separated image sizes of the memory phase")
    p.add_argument(
        "--memory-batch",
        type=int,
        default=8,
        help="the memory phase's batch of one optimiser step (divisible by its accum_steps, 4)",
    )


def _phase_arguments(p):
    """Settings and phases that can be left out, and the TFLite and digits checks."""
    p.add_argument("--no-xla", dest="xla", action="store_false", help="skip the jit_compile=True settings")
    bf16 = p.add_mutually_exclusive_group()
    bf16.add_argument("--bf16", dest="bf16", action="store_true", default=None,
                      help="measure mixed_bfloat16 training even where the CPU has no bfloat16 instructions "
                           "(emulated there, several times slower than float32)")  # fmt: skip
    bf16.add_argument("--no-bf16", dest="bf16", action="store_false",
                      help="skip mixed_bfloat16 training. Default: measured where it is native (a CPU with "
                           "AVX512-BF16 or AMX, or an NVIDIA GPU), skipped elsewhere")  # fmt: skip
    p.add_argument("--no-tflite", dest="tflite", action="store_false", help="skip TFLite conversion and latency")
    p.add_argument("--no-onnx", dest="interchange", action="store_false",
                   help="skip the inference phase's ONNX (onnxruntime) and OpenVINO rows: keras-vit's exported files "
                        "against timm's torch.onnx.export, batch 1 and --batch, --threads threads")  # fmt: skip
    p.add_argument("--no-step-split", dest="step_split", action="store_false",
                   help="skip the split of keras-vit's training step into matmul and other time, float32 and "
                        "bfloat16 (benchmarks/step_split.py)")  # fmt: skip
    p.add_argument("--calibration-size", type=int, default=16, help="images calibrating full-int8 conversion")
    p.add_argument("--agreement-size", type=int, default=32, help="images comparing TFLite with Keras top-1")
    p.add_argument("--digits-workdir", default=None,
                   help="a training workdir (python -m training) of a digits model: adds its held-out accuracy as "
                        "Keras float32 and as each TFLite mode (the int8 accuracy-drop target)")  # fmt: skip


def _resolve(p, args):
    """The recipe's model, the implementation list, the ranges and the bfloat16 decision."""
    args.model_overrides = {}
    if args.recipe:
        recipe = get_config(args.recipe)
        args.variant, args.image_size, args.batch = recipe.variant, recipe.image_size, recipe.batch_size
        args.model_overrides = dict(recipe.model)
    default_impls = [i for i in IMPLS if not (args.timm_arch and i == "keras-hub")]
    args.impls = [i.strip() for i in (args.impls or ",".join(default_impls)).split(",") if i.strip()]
    unknown = [i for i in args.impls if i not in IMPLS]
    if unknown or not args.impls:
        p.error(f"--impls takes a subset of {','.join(IMPLS)}; received {unknown or 'nothing'}")
    if min(args.rounds, args.train_steps, args.infer_reps, args.latency_reps, args.tflite_reps, args.threads) < 1:
        p.error("--rounds, --train-steps, --infer-reps, --latency-reps, --tflite-reps and --threads must be >= 1")
    if min(args.pipeline_batches, args.input_wait_steps) < 0:
        p.error("--pipeline-batches and --input-wait-steps must be >= 0 (0 skips that measurement)")
    if args.bf16 is None:
        args.bf16, args.bf16_reason = native_bf16()
    else:
        args.bf16_reason = "--bf16" if args.bf16 else "--no-bf16"
    if args.timm_arch:
        _resolve_timm_arch(p, args)


def _resolve_timm_arch(p, args):
    """--timm-arch: the name checked against the architectures keras_vit builds; it labels the run as --variant."""
    try:
        timm_eva.architecture_options(args.timm_arch, args.image_size, args.num_classes)
    except ValueError as error:
        p.error(str(error))
    if args.recipe:
        p.error(f"--timm-arch and --recipe both name the model; received {args.timm_arch!r} and {args.recipe!r}")
    if "keras-hub" in args.impls:
        p.error("--timm-arch: keras-hub builds plain ViTs only; leave keras-hub out of --impls")
    if args.bf16 and args.step_split:
        p.error("--timm-arch: the step split counts a plain ViT's matmuls; add --no-step-split (or --no-bf16)")
    args.variant = args.timm_arch


def _check_memory_and_files(p, args):
    """The memory phase's sizes and batch, and the Markdown file's markers."""
    args.memory = args.memory or args.memory_only
    try:
        args.memory_sizes = [int(size) for size in args.memory_sizes.split(",") if size.strip()]
    except ValueError:
        p.error(f"--memory-sizes takes comma-separated integers, e.g. 224,384; received {args.memory_sizes!r}")
    if args.memory and (not args.memory_sizes or args.memory_batch < 4 or args.memory_batch % 4):
        p.error(
            f"--memory-sizes needs at least one size and --memory-batch a multiple of 4 (the accumulated "
            f"settings take 4 micro-batches); received {args.memory_sizes} and {args.memory_batch}"
        )
    if args.memory_only and args.advice:
        p.error("--advice records training figures, which --memory-only does not measure; drop one of them")
    if args.readme:  # a file without markers fails now, not after a 15-minute run
        if not args.memory_only:
            readme.check_markers(args.readme)
        if args.memory:
            readme.check_markers(args.readme, readme.MEMORY_START, readme.MEMORY_END)


def native_bf16(cpuinfo="/proc/cpuinfo", nvidia="/proc/driver/nvidia/gpus"):
    """(measure mixed_bfloat16?, why): yes where bfloat16 matmuls are native, a CPU with AVX512-BF16 or AMX or an
    NVIDIA GPU; no elsewhere, where TensorFlow emulates them and the bfloat16 phase would time the emulation
    (several times slower than float32) and double the run's length."""
    _, flags = read_cpuinfo(cpuinfo)
    native = sorted(flags & {"avx512_bf16", "amx_bf16"})
    if native:
        return True, "the CPU has " + ", ".join(native)
    if os.path.isdir(nvidia) and os.listdir(nvidia):
        return True, "an NVIDIA GPU"
    return False, "no bfloat16 instructions on this CPU (no avx512_bf16 or amx_bf16): --bf16 measures it anyway"


def record_advice(path, result):
    """Merges the run's keras-vit training medians per form into the trainer's advice file (training/advice.py)."""
    prefix = "keras-vit on "
    medians = {
        dtype: {
            form[len(prefix) :]: v
            for form, v in result["fastest_keras_vit"].get(f"train/{dtype}", {}).get("all", {}).items()
        }
        for dtype in ("float32", "bfloat16")
    }
    if not any(medians.values()):
        return None
    return advice.record(path, advice.cpu_class(), result["machine"], result["spec"],
                         result["flops"]["forward_per_image"], medians)  # fmt: skip


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    progress = lambda line: print(line, flush=True)  # noqa: E731
    if args.memory_only:
        result = {"settings": dict(vars(args)), "memory": coordinator.run_memory(args, progress)}
    else:
        result = coordinator.run(args, progress=progress)
    result["command"] = shlex.join(["python", "-m", "benchmarks", *argv])  # what the table says it came from
    if not args.memory_only:
        print("\n" + report.table(result))
    if "memory" in result:
        print("\n" + readme.render_memory(result))
    path = os.path.join(args.out, "report.json")
    atomic_write_text(path, json.dumps(result, indent=1))
    print(f"\nwrote {path}")
    if args.readme:
        readme.update(args.readme, result)
        print(f"rewrote the {'memory' if args.memory_only else 'performance'} table(s) in {args.readme}")
    if args.advice:
        entry = record_advice(args.advice, result)
        print(f"merged the training figures into {args.advice}" if entry else "no keras-vit training figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
