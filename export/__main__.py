"""Command line: `python -m export MODEL_OR_WORKDIR [options]`, `python -m export predict ARTIFACT IMAGE...` and
`python -m export similar EMBEDDER A B`; `--help` lists the options."""

import argparse
import os
import sys

from keras_vit import _extras, _startup, files
from keras_vit.files import describe_os_error, describe_storage_error

from .errors import ExportError
from .formats import FORMATS

PROG, PREDICT_PROG = _startup.command_names(__package__, "export", "predict")


def _export_parser():
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Export a .keras model or a training workdir to SavedModel and TFLite, verify every "
        "artifact against the Keras model, and write report.json. "
        "Subcommand: `python -m export predict ARTIFACT IMAGE...` classifies images with any artifact (see "
        "`python -m export predict --help`); `python -m export similar MODEL A B` compares two images under an "
        "image embedder (a num_classes=0 model, exported as embedder_<mode>.tflite, embedder.onnx and embedder.xml).",
    )
    p.add_argument(
        "source",
        help="a .keras file (e.g. a pretrained model saved with model.save) or a training workdir (model.keras, "
        "samples/); paths or gs:// URLs",
    )
    p.add_argument(
        "--out", help="output directory or URL (default: WORKDIR/export, or NAME_export beside a .keras file)"
    )
    p.add_argument(
        "--formats",
        default=",".join(FORMATS),
        help=f"comma-separated: {','.join(FORMATS)} (default: all of them)",
    )
    p.add_argument(
        "--quantize",
        default=None,
        help="comma-separated TFLite modes: float32,float16,dynamic_int8,int8,int8_matmul (the default: all five; "
        "int8 and int8_matmul only when representative data is available), and int8_int16,int4_weights "
        "(ai-edge-quantizer; asked for by name). int8 is full integer, for integer-only accelerators; int8_matmul "
        "quantises the matmuls only, the fast int8 model on CPUs; int8_int16 has int16 activations, for NPUs; "
        "int4_weights the smallest file",
    )
    _tflite_arguments(p)
    p.add_argument("--num-threads", type=int, default=1, help="LiteRT threads for verification and latency")
    p.add_argument("--latency-runs", type=int, default=50, help="timed batch-1 runs per artifact (after warm-up)")
    p.add_argument("--top-k", type=int, default=5, help="classes returned by the SavedModel serving signature")
    p.add_argument(
        "--gpu-check",
        default="auto",
        choices=("auto", "require", "off"),
        help="run every .tflite on LiteRT's GPU accelerator (Vulkan; SwiftShader from Debian's chromium package on "
        "servers): auto reports the verdict where a driver exists, require fails the export without one or on a "
        "fallback or a miss, off skips it",
    )
    _verbose_flag(p, "; the TFLite converter's output goes to the terminal instead of report.json")
    return p


def _tflite_arguments(p):
    """The data, labels and TFLite options of `python -m export`."""
    p.add_argument("--representative-data", help="int8 calibration images: .npz with uint8 'images', or a folder")
    p.add_argument("--heldout-data", help="labelled verification set: .npz with uint8 'images' and 'labels'")
    p.add_argument(
        "--labels",
        help="class names file, one per line (default: the model's own class_names)",
    )
    p.add_argument("--dynamic-batch", action="store_true", help="TFLite batch dimension left open (default 1)")
    p.add_argument("--int8-io", default="float32", choices=("float32", "uint8"), help="full-int8 model's I/O type")
    p.add_argument(
        "--tflite-output",
        default="probabilities",
        choices=("probabilities", "logits"),
        help="what the TFLite models output: probabilities (a softmax ends the model; what MediaPipe and the "
        "TFLite Task Library expect) or logits",
    )
    p.add_argument("--model-name", help="TFLite metadata: model name (default: 'keras-vit ' + the Keras model's name)")
    p.add_argument("--model-description", help="TFLite metadata: description (default: classes, input size, output)")
    p.add_argument("--model-version", default="1", help="TFLite metadata: model version (default 1)")
    p.add_argument("--model-license", help="TFLite metadata: license text, e.g. Apache-2.0 (default: none written)")
    p.add_argument("--model-author", default="keras-vit", help="TFLite metadata: author (default keras-vit)")


def _verbose_flag(parser, more=""):
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help=f"show TensorFlow's own log lines and Python's full warnings (hidden by default){more}",
    )


def _background(text):
    from keras_vit.images import parse_background

    try:
        return parse_background(text)
    except ValueError as err:  # argparse then prints the usage and this line, and exits with 2
        raise argparse.ArgumentTypeError(str(err)) from None


def _predict_parser():
    p = argparse.ArgumentParser(prog=PREDICT_PROG, description="Top-k labels for image files.")
    p.add_argument("artifact", help="a .keras file, a SavedModel directory, or a .tflite, .onnx or OpenVINO .xml file")
    p.add_argument("images", nargs="+", help="image files")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--labels", help="class names file (default: the labels shipped with the artifact)")
    p.add_argument("--num-threads", type=int, default=1)
    p.add_argument(
        "--background",
        default="white",
        type=_background,
        help="colour transparent pixels are composited onto: white (default), black or R,G,B; use the "
        "training run's image_background",
    )
    _verbose_flag(p)
    return p


def _similar_parser():
    p = argparse.ArgumentParser(
        prog="python -m export similar",
        description="Cosine similarity of two images under an image embedder (a num_classes=0 .keras model or an "
        "embedder_<mode>.tflite, embedder.onnx or OpenVINO embedder.xml file).",
    )
    p.add_argument("artifact", help="a num_classes=0 .keras file, or an embedder_<mode>.tflite, .onnx or .xml file")
    p.add_argument("first", help="an image file")
    p.add_argument("second", help="another image file")
    p.add_argument("--num-threads", type=int, default=1)
    p.add_argument("--background", default="white", type=_background, help="as for predict")
    _verbose_flag(p)
    return p


def _tensorflow_backend():
    """Export converts with TensorFlow, so its command line runs Keras' TensorFlow backend whatever KERAS_BACKEND
    says: a shell that trained with `KERAS_BACKEND=jax` can export right away (the `.keras` file is backend-neutral).
    Keras reads the variable when first imported, which a command line has not done yet; `import export` in a JAX
    session changes nothing, and `export.export_model` then says that it needs the TensorFlow backend."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if "keras" not in sys.modules and backend != "tensorflow":
        print(f"[export] KERAS_BACKEND={backend} -> tensorflow: export converts with TensorFlow", file=sys.stderr)
        os.environ["KERAS_BACKEND"] = "tensorflow"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    _startup.configure(argv)
    _tensorflow_backend()
    # Arguments are checked before Keras and TensorFlow load (seconds), so --help and typos answer at once.
    command = argv[0] if argv[:1] in (["predict"], ["similar"]) else "export"
    try:
        args = _parse(command, argv)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _startup.import_tensorflow()
    export = sys.modules[__package__]  # this package: `export` in a checkout, `keras_vit.export` installed
    try:
        return _RUN[command](export, args)
    except ExportError as exc:  # VerificationError included: its message holds the table
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a read-only or full disk: artifacts are staged, so the previous export is intact
        print(f"error: {_os_error_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # TensorFlow's file errors: a gs:// URL out of reach or unreadable
        line = describe_storage_error(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2


def _parse(command, argv):
    if command == "predict":
        return _predict_parser().parse_args(argv[1:])
    if command == "similar":
        return _similar_parser().parse_args(argv[1:])
    args = _export_parser().parse_args(argv)
    # An ExportOptions needs the exporters (Keras, TensorFlow); the one check that runs before they load.
    if args.quantize is not None:
        from .tflite.converter import check_quantization

        check_quantization(args.quantize)
    return args


def _similar(export, args):
    value = export.similar(args.artifact, args.first, args.second, args.num_threads, args.background)
    print(f"cosine similarity {value:.6f}  {args.first}  {args.second}")
    return 0


def _predict(export, args):
    results = export.predict(args.artifact, args.images, args.top_k, args.labels, args.num_threads, args.background)
    print(export.format_predictions(results))
    return 0


def _export(export, args):
    metadata = {"name": args.model_name, "description": args.model_description, "version": args.model_version,
                "license": args.model_license, "author": args.model_author}  # fmt: skip
    options = export.ExportOptions(
        formats=args.formats,
        quantize=args.quantize,
        dynamic_batch=args.dynamic_batch,
        int8_io=args.int8_io,
        num_threads=args.num_threads,
        latency_runs=args.latency_runs,
        top_k=args.top_k,
        tflite_output=args.tflite_output,
        metadata={key: value for key, value in metadata.items() if value is not None},
        converter_output="terminal" if args.verbose else "report",
        gpu_check=args.gpu_check,
    )
    data = {"representative_data": args.representative_data, "heldout_data": args.heldout_data}
    report = export.export_path(args.source, out=args.out, labels=args.labels, options=options, **data)
    print(export.format_table(report))
    print("\nartifacts:")
    for a in report["artifacts"]:
        print(f"  {a['path']}")
    for name in report.get("preprocessing", ()):  # a NaFlex model's, beside its files
        print(f"  {files.join(report['out'], name)}")
    print(f"  {report['report_path']}")
    return 0


_RUN = {"export": _export, "predict": _predict, "similar": _similar}


def _os_error_line(err):
    return describe_os_error(
        err,
        "Pass a writable --out directory (or make this one writable) and export again.",
        full_disk_fix="Free some space (or pass --out on another disk) and export again; the previous export in the "
        "output directory is unchanged.",
    )


if __name__ == "__main__":  # a module only an extra installs is named in one line (keras_vit/_extras.py)
    sys.exit(_extras.run(main, None, PROG, "export"))
