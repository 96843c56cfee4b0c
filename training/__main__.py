"""Command line: `python -m training [train options]` or `python -m training evaluate --workdir DIR`."""

import argparse
import json
import os
import re
import sys

from keras_vit import _extras, _startup, files
from keras_vit.files import describe_os_error, describe_storage_error

from .checkpoints import CHECKPOINT_NAME, check_init
from .configs import available_configs, check_config_name
from .options import option_choices, parse_overrides

PROG, EVALUATE_PROG = _startup.command_names(__package__, "train", "evaluate")


def _train_parser():
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Train or fine-tune a ViT. Subcommand: `python -m training evaluate --workdir DIR` evaluates a "
        "trained run (see `python -m training evaluate --help`).",
        epilog=f"recipes (--config): {', '.join(available_configs())}",
    )
    parser.add_argument(
        "--config",
        default="digits",
        help="recipe in training/configs/ (default: digits; the list is below)",
    )
    parser.add_argument(
        "--workdir", help="output directory or URL (gs://BUCKET/run); re-running with it resumes (default: runs/CONFIG)"
    )
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int, help="global batch size")
    parser.add_argument("--strategy", choices=option_choices("strategy"))
    parser.add_argument(
        "--init",
        help="checkpoint to fine-tune from: a catalogue name (python -m keras_vit.weights list), hf://ORG/NAME, "
        "an https:// or gs:// URL, or a .npz, .keras or timm/transformers/keras-hub folder",
    )
    parser.add_argument("--data-dir", help="TFDS data directory (a path or a gs:// URL)")
    parser.add_argument("--dataset", help="digits, synthetic, tfds:NAME or folder:PATH")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any TrainConfig field, e.g. learning_rate=1e-3 or model.dropout_rate=0.1",
    )
    _verbose_flag(parser)
    return parser


def _verbose_flag(parser):
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show TensorFlow's own log lines and Python's full warnings (hidden by default)",
    )


def _evaluate_parser():
    parser = argparse.ArgumentParser(prog=EVALUATE_PROG, description="Evaluate a trained run.")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--dataset", help="evaluate on another dataset than the run's")
    parser.add_argument("--data-dir")
    parser.add_argument("--split", help="TFDS split to evaluate on")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument(
        "--strategy",
        choices=option_choices("strategy"),
        help="as for training (default: the run's strategy setting)",
    )
    _verbose_flag(parser)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    _startup.configure(argv)
    # Arguments, recipe names, --set keys and a new run's local --init are checked before Keras and TensorFlow load
    # (seconds), so --help, typos and a broken checkpoint answer at once (keras_vit/_startup.py).
    try:
        run = _parse(argv)
    except (ValueError, KeyError, FileNotFoundError) as err:  # FileNotFoundError: a missing --init
        return _error(err)
    _startup.import_tensorflow()
    training = sys.modules[__package__]  # this package: `training` in a checkout, `keras_vit.training` installed
    try:
        run(training)
        return 0
    except training.Preempted as err:
        print(f"[training] {err}", file=sys.stderr)
        return 143  # 128 + SIGTERM, what a scheduler expects from a preempted job
    except training.NonFiniteLossError as err:
        print(
            f"[training] error: {err.line(f'run the same command again with {rescue_flags(err.rescue)}')}",
            file=sys.stderr,
        )
        return 3
    except (training.StrategyError, ValueError, KeyError) as err:
        return _error(err)
    except OSError as err:  # a missing file, a read-only or full disk (checkpoints are atomic: none is damaged)
        print(f"[training] error: {_os_error_line(err)}", file=sys.stderr)
        return 2
    except Exception as err:  # TensorFlow's file errors: a gs:// URL out of reach, an input file gone mid-run
        line = _storage_error_line(err) or out_of_memory_line(err, getattr(run, "overrides", {}))
        if line is None:
            raise
        print(f"[training] error: {line}", file=sys.stderr)
        return 2


def _storage_error_line(err):
    return describe_storage_error(err)


def _parse(argv):
    """The command line checked (without Keras), as a function of the imported `training` package."""
    if argv[:1] == ["evaluate"]:
        args = _evaluate_parser().parse_args(argv[1:])
        _check_workdir(args.workdir)

        def run_evaluate(training):
            metrics = training.evaluate(
                args.workdir,
                dataset=args.dataset,
                data_dir=args.data_dir,
                eval_split=args.split,
                batch_size=args.batch_size,
                strategy=args.strategy,
            )
            print(json.dumps(metrics, indent=2))

        return run_evaluate
    args = _train_parser().parse_args(argv)
    check_config_name(args.config)
    overrides = parse_overrides(args.set)
    for flag, key in (
        ("epochs", "epochs"),
        ("batch_size", "batch_size"),
        ("strategy", "strategy"),
        ("init", "init"),
        ("data_dir", "data_dir"),
        ("dataset", "dataset"),
    ):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    _check_workdir(args.workdir)
    if overrides.get("init") is not None and _starts_fresh(args.workdir or os.path.join("runs", args.config)):
        check_init(overrides["init"])
    run = lambda training: training.train(args.config, args.workdir, **overrides)  # noqa: E731
    run.overrides = overrides  # for the out-of-memory line
    return run


def out_of_memory_line(err, overrides):
    """One line for the framework's out-of-memory error (TensorFlow's ResourceExhaustedError, XLA's
    RESOURCE_EXHAUSTED) naming the option most likely responsible, or None for any other error."""
    text = str(err)
    if type(err).__name__ != "ResourceExhaustedError" and not any(
        word in text for word in ("RESOURCE_EXHAUSTED", "OOM when allocating", "Out of memory")
    ):
        return None
    shape = re.search(r"tensor with shape\s*\[([\d,]+)\]", text)
    where = f" (a tensor of shape [{shape.group(1)}])" if shape else ""
    rank = overrides.get("lora_rank")
    if isinstance(rank, int) and rank > 64:
        fix = f"lora_rank={rank} is the likely cause: use --set lora_rank=16 (8 and 16 are common)"
    elif overrides.get("batch_size"):
        fix = (
            f"batch_size={overrides['batch_size']} is the likely cause: halve it (--batch-size "
            f"{max(1, overrides['batch_size'] // 2)}), or keep it with --set accum_steps=2 or --set model.remat=True"
        )
    else:
        fix = (
            "the batch is the likely cause: pass a smaller --batch-size, or keep it with --set accum_steps=2 or "
            "--set model.remat=True"
        )
    return f"out of memory{where}: {fix}; then run the same command again (a checkpoint already written resumes)."


def _starts_fresh(workdir):
    """Whether a run in `workdir` starts from `--init`: a local folder without checkpoints (a resume never reads
    `--init`; a remote workdir is listed by TensorFlow, so its run checks `--init` itself)."""
    if files.is_remote(workdir):
        return False
    folder = os.path.join(workdir, "checkpoints")
    return not (os.path.isdir(folder) and any(CHECKPOINT_NAME.search(name) for name in os.listdir(folder)))


def rescue_flags(settings):
    """A `NonFiniteLossError`'s rescue settings as `--set` options: "--set rescue=True --set learning_rate=0.001"."""
    return " ".join(f"--set {key}={'...' if value is None else value}" for key, value in settings.items())


def _error(err):
    message = err.args[0] if isinstance(err, KeyError) and err.args else err  # str(KeyError) adds quotes
    print(f"[training] error: {message}", file=sys.stderr)
    return 2


def _check_workdir(workdir):
    if workdir and os.path.isfile(workdir):
        raise ValueError(f"--workdir {workdir} is a file, not a directory: pass a directory path (new or existing).")


def _os_error_line(err):
    return describe_os_error(
        err,
        "Use a writable --workdir (or make this one writable) and run the same command again.",
        full_disk_fix="Free some space (or use a --workdir on another disk) and run the same command again: the "
        "checkpoints already written are intact and it resumes from the newest.",
    )


if __name__ == "__main__":  # a module only an extra installs is named in one line (keras_vit/_extras.py)
    sys.exit(_extras.run(main, None, PROG, "train"))
