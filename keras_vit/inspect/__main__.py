"""Command line: write the inspection figures of a model (`python -m keras_vit.inspect model.keras cat.jpg --out
plots/`; see `--help`)."""

import argparse
import sys

from keras_vit import _extras, _startup, files

NUM_HELDOUT_USED = 64  # the attention distance averages over these; the rollout shows --max-images of them


def _background(text):
    from keras_vit.images import parse_background

    try:
        return parse_background(text)
    except ValueError as err:  # argparse prints it with the usage and exits with 2
        raise argparse.ArgumentTypeError(str(err)) from None


def main(argv=None):
    parser = _parser()
    args = parser.parse_intermixed_args(argv)  # images may follow options: MODEL --npz X a.png b.png

    _startup.configure(sys.argv[1:] if argv is None else argv)
    from keras_vit.inspect.inputs import load_model
    from keras_vit.inspect.layout import token_layout
    from keras_vit.inspect.plots import save_figures

    try:
        workdir = args.model if files.isdir(args.model) else None
    except Exception as err:  # noqa: BLE001  (an s3:// or unreachable gs:// MODEL)
        print(f"error: {_file_error_line(err)}", file=sys.stderr)
        return 2
    out = args.out or (files.join(workdir, "plots") if workdir else None)
    if out is None:
        parser.error("--out DIR is required (it defaults to WORKDIR/plots only when MODEL is a training workdir)")
    image_size = None
    if args.image_size:
        if len(args.image_size) > 2:
            parser.error(f"--image-size takes one or two values; received {args.image_size}")
        image_size = tuple(args.image_size) if len(args.image_size) == 2 else args.image_size[0]
    try:
        model = load_model(args.model, variant=args.variant, npz=args.npz, image_size=image_size)
        layout = token_layout(model)
        images, labels = _images(args, layout, workdir)
        paths = save_figures(model, images, out, labels=labels, max_images=args.max_images)
    except (FileNotFoundError, ValueError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001  (_file_error_line re-raises what it cannot name)
        print(f"error: {_file_error_line(err)}", file=sys.stderr)
        return 2
    for path in paths.values():
        print(path)
    return 0


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m keras_vit.inspect",
        description="Write attention-rollout, position-embedding, attention-distance and filter figures (PNG).",
    )
    parser.add_argument(
        "model",
        help="a .keras file, a training workdir, a checkpoint .npz (with --variant), or a variant name (with --npz)",
    )
    parser.add_argument(
        "images",
        nargs="*",
        help="image files (PNG/JPEG) or .npz with a uint8 'images' array; "
        "default: a workdir's held-out samples, else synthetic pictures",
    )
    parser.add_argument("--out", help="output directory (default for a workdir: WORKDIR/plots)")
    parser.add_argument("--variant", help="variant of the .npz checkpoint, e.g. B/16 or testing")
    parser.add_argument("--npz", help="checkpoint to load into the variant named as MODEL")
    parser.add_argument(
        "--image-size",
        type=int,
        nargs="+",
        metavar="PX",
        help="input size of a model built from a checkpoint: one value or H W",
    )
    parser.add_argument("--no-resize", action="store_true", help="require images at the model's size exactly")
    parser.add_argument("--max-images", type=int, default=8, help="images shown in the rollout figure")
    parser.add_argument(
        "--background",
        default="white",
        type=_background,
        help="colour transparent pixels are composited onto: white (default), black or R,G,B",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show TensorFlow's own log lines and Python's full warnings (hidden by default)",
    )
    return parser


def _images(args, layout, workdir):
    """The images to show (and their labels): those given, else a workdir's held-out samples, else synthetic."""
    from keras_vit.inspect.inputs import heldout_labels, load_images, synthetic_images

    heldout = files.join(workdir, "samples", "heldout.npz") if workdir else None
    labels = None
    if args.images:
        images = load_images(args.images, layout, resize=not args.no_resize, background=args.background)
    elif heldout and files.exists(heldout):
        images = load_images([heldout], layout, resize=not args.no_resize)[:NUM_HELDOUT_USED]
        labels = heldout_labels(heldout, len(images))
        print(
            f"Using the first {len(images)} held-out images of {heldout} (the rollout shows {args.max_images}).",
            file=sys.stderr,
        )
    else:
        images = synthetic_images(layout)
        print(
            f"No images given: using {len(images)} synthetic pictures (gradient, checkerboard, disc, blobs); "
            f"the attention figures show more on real images.",
            file=sys.stderr,
        )
    return images, labels


def _file_error_line(err):
    """One line for a file error (a read-only, full or misplaced --out; a URL TensorFlow cannot reach);
    anything else is re-raised."""
    if isinstance(err, OSError):
        return files.describe_os_error(err, "Pass a writable --out directory (or make this one writable).")
    line = files.describe_storage_error(err)
    if line is None:
        raise err
    return line


if __name__ == "__main__":  # a module only an extra installs is named in one line (keras_vit/_extras.py)
    sys.exit(_extras.run(main, None, "python -m keras_vit.inspect"))
