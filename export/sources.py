"""Sources for the export job (export/job.py): a `.keras` file or a training workdir resolved into an
`ExportSource`, and the two entry points that export one (`export_path`, `export_workdir`)."""

import dataclasses
import os

from keras_vit import files

from .errors import ExportError
from .io import load_image_set, load_keras_model, model_labels, read_labels
from .job import export_model
from .options import DEFAULT_FORMATS, FORMATS, ExportOptions, ExportSource, check_formats  # noqa: F401  (export.*)


def load_source(path, labels=None, representative_data=None, heldout_data=None):
    """Resolves a `.keras` file or a training workdir into the `ExportSource` that `export_model` exports.

    The labels are `labels` (a file, one name per line, or a list) when given, else the model's own
    `class_names` (a pretrained model's label space, a training run's classes), else None ("0", "1", ...). The
    calibration and held-out images are the given files, else a workdir's `samples/calibration.npz` and
    `samples/heldout.npz`; the TFLite metadata's model name is the workdir's (or the .keras file's) name.
    """
    path = os.fspath(path)
    if files.isdir(path):
        model_file = files.join(path, "model.keras")
        if not files.isfile(model_file):
            raise ExportError(
                f"{str(path)!r} is a directory without model.keras, so it is not a training workdir. Pass a "
                ".keras file or a workdir written by `python -m training`."
            )
        workdir, named, default_out = path, files.basename(path), files.join(path, "export")
    else:
        named = os.path.splitext(files.basename(path))[0]
        model_file, workdir, default_out = path, None, files.join(files.dirname(path), named + "_export")
    model = load_keras_model(model_file)
    if isinstance(labels, (list, tuple)):
        label_list = list(labels)
    elif labels is not None:
        label_list = read_labels(os.fspath(labels))
    else:
        label_list = model_labels(model)
    samples = (lambda name: files.join(workdir, "samples", name)) if workdir is not None else None
    representative = None
    if representative_data is not None:
        representative, _ = load_image_set(representative_data)
    elif samples is not None and files.isfile(samples("calibration.npz")):
        representative, _ = load_image_set(samples("calibration.npz"))
    heldout, set_name = None, None
    heldout_file = os.fspath(heldout_data) if heldout_data is not None else samples and samples("heldout.npz")
    if heldout_file is not None and (heldout_data is not None or files.isfile(heldout_file)):
        heldout, set_name = load_image_set(heldout_file), str(heldout_file)
    return ExportSource(model, label_list, representative, heldout, name=str(model_file), verification_set=set_name,
                        metadata_name=f"keras-vit {named}", default_out=default_out)  # fmt: skip


def export_path(path, out=None, labels=None, representative_data=None, heldout_data=None, options=None, **fields):
    """Exports a `.keras` file or a training workdir (`load_source`) with `options` (an `ExportOptions`), or with
    `ExportOptions(**fields)` (`fields` override the given options' fields).

    Output goes to `out`, by default `WORKDIR/export/` for a workdir and `<name>_export/` beside a file.
    """
    options = ExportOptions(**fields) if options is None else dataclasses.replace(options, **fields)
    source = load_source(path, labels=labels, representative_data=representative_data, heldout_data=heldout_data)
    return export_model(source, out if out is not None else source.default_out, options)


def export_workdir(workdir, out=None, options=None, **fields):
    """Exports a training workdir (model.keras, labels.txt, samples/) to `out` (default `WORKDIR/export`).

    The main job's export stage: SavedModel + TFLite float32/float16/dynamic_int8/int8/int8_matmul, each verified on
    `samples/heldout.npz`, the int8 modes calibrated on `samples/calibration.npz`. Returns the report dict.
    """
    workdir = os.fspath(workdir)
    if not files.isfile(files.join(workdir, "model.keras")):
        raise ExportError(f"{str(workdir)!r} has no model.keras; it is not a training workdir.")
    return export_path(workdir, out=out, options=options, **fields)
