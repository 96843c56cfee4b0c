"""The `keras-vit` console command: `keras-vit train|evaluate|export|predict|weights|inspect ...`, each the
`python -m` module of the same job (`keras_vit.training` in the wheel, `training` in a checkout), imported alone."""

import importlib
import sys

from keras_vit import _extras

# subcommand -> (module whose main() runs it, arguments put before the user's, what it does)
COMMANDS = {
    "train": ("training", (), "train or fine-tune (python -m training)"),
    "evaluate": ("training", ("evaluate",), "evaluate a trained workdir (python -m training evaluate)"),
    "export": ("export", (), "export and verify a model or workdir (python -m export)"),
    "predict": ("export", ("predict",), "classify images with an exported artifact (python -m export predict)"),
    "weights": ("weights", (), "the pretrained-weights catalogue (python -m keras_vit.weights)"),
    "inspect": ("inspect", (), "attention and embedding figures (python -m keras_vit.inspect)"),
}
# module -> the extra of `pip install "keras-vit[EXTRA]"` that installs what it needs beyond the model library
EXTRAS = {"training": "train", "export": "export"}


def _usage():
    lines = ["usage: keras-vit COMMAND [ARGS ...]   (keras-vit COMMAND --help for a command's options)", ""]
    lines += [f"  {name:<9} {help_text}" for name, (_, _, help_text) in COMMANDS.items()]
    return "\n".join(lines)


def _main_module(name):
    """`keras_vit.NAME.__main__`, or in a checkout the top-level `training` / `export` package's."""
    try:
        return importlib.import_module(f"keras_vit.{name}.__main__")
    except ModuleNotFoundError as err:
        if err.name not in (f"keras_vit.{name}", f"keras_vit.{name}.__main__"):
            raise
        return importlib.import_module(f"{name}.__main__")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"keras-vit: unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    name, prefix, _ = COMMANDS[argv[0]]

    def run(args):
        return _main_module(name).main([*prefix, *args])

    return _extras.run(run, argv[1:], f"keras-vit {argv[0]}", EXTRAS.get(name))


if __name__ == "__main__":
    sys.exit(main())
