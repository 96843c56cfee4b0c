"""The interchange formats, ONNX (`<stem>.onnx`, onnxruntime) and OpenVINO (`<stem>.xml` + `.bin`, its CPU plugin):
float32 files converted by Keras' own `model.export` from the model as built, checked alike (`portable.check`)."""

import os

from .. import runtime
from ..runtime import record
from . import onnx, openvino, portable
from .onnx import OnnxRunner
from .openvino import OpenVINORunner


class Interchange:
    """One interchange format (`NAME` "onnx" or "openvino") as a value: its file names, runner, modes and entry."""

    def __init__(self, name, suffixes, runner):
        self.NAME, self.SUFFIXES, self._runner = name, suffixes, runner
        self.KINDS = ("classifier", "embedder")  # the kinds of model it writes (one output each)
        # The names it writes at the top of `out`, `{stem}` the kind's (regular expressions).
        self.OWNED = (r"{stem}\.(" + "|".join(s.lstrip(".") for s in suffixes) + ")",)

    def open(self, path, num_threads=1):
        """The runner of a written file (`load_runner`), from its .xml for OpenVINO's .xml + .bin."""
        return self._runner(path=os.path.splitext(path)[0] + self.SUFFIXES[0], num_threads=num_threads)

    def modes(self, plan):
        return ("float32",)

    def entry(self, plan, mode, v, staging, out, options):
        """Converts, stages, reopens with the format's runtime and judges one file as its kind judges its files
        (export/interchange/portable.py: `check`); its report entry."""
        kind, budget, name = plan.kind, plan.kind.BUDGETS[mode], plan.kind.STEM + self.SUFFIXES[0]
        with runtime.printed(options.converter_output) as output:  # what tf2onnx and OpenVINO's frontend print
            name, written, runner = write(self.NAME, plan.dynamic_model or plan.model, plan.description,
                                                      staging, options.num_threads, name)  # fmt: skip
        found, failures, fields = portable.check(kind, runner, v.x, v.reference, v.truth, budget, plan.description,
                                                 plan.dynamic_model)  # fmt: skip
        return record(plan, v, options, name, self.NAME, mode, out, written, found, runner, budget, failures,
                      converter_output=output[0].splitlines(), **fields)  # fmt: skip

    def lines(self, a, kind):
        """An entry's lines in the export table, below its budget line (`kind` words its figures)."""
        batch, size = a.get("dynamic_batch"), a.get("dynamic_image_size")
        said = a.get("output_contract")  # a vector's output document, as the file states it
        norm = said and ("L2-normalised" if said["l2_normalized"] else "not L2-normalised")
        output = f"output `{said['name']}`: {said['dimensions']} float32 values, {norm}; " if said else ""
        out = [f"  input {a['input_shape']} float32 NHWC in [-1, 1]; {output}dynamic batch: "
               + (f"batches {batch['batches']} {kind.words(batch)}" if batch else "no")]  # fmt: skip
        if size:
            out.append(f"  dynamic image size: {size['size'][0]}x{size['size'][1]} on {size['images']} images, "
                       f"{kind.words(size)}")  # fmt: skip
        if a["format"] == "onnx":
            out.append(f"  runtime onnxruntime {a['runtime_version']}, opset {a['opset']}")
        else:
            default = a["default_precision"]
            out.append(f"  runtime OpenVINO {a['runtime_version']} on {a['device']}, inference precision "
                       f"{a['inference_precision']}; its default here ({default['inference_precision']}): "
                       f"{kind.words(default)} (not budgeted)")  # fmt: skip
        out.append(f"  ops ({sum(a['ops'].values())}): {', '.join(f'{k} x{n}' for k, n in a['ops'].items())}")
        out.append(f"  {kind.CHECKS['contract']} in the file: {'yes' if a['contract_in_file'] else 'NO'}")
        return out


def write(fmt, model, description, staging, num_threads=1, name=None):
    """Converts `model` to `fmt` ("onnx" or "openvino") with `description` (export/description.py) in the file,
    writes its file(s) into the staging directory and opens them with the format's runtime; returns (name, bytes
    written, runner). A description that says `l2_normalized` gets a file whose vectors are."""
    module = {"onnx": onnx, "openvino": openvino}[fmt]
    source = portable.l2_normalized_model(model) if description.l2_normalized else model
    return module.write(source, description, staging, num_threads, name or module.NAME)


ONNX = Interchange("onnx", (".onnx",), OnnxRunner)
OPENVINO = Interchange("openvino", (".xml", ".bin"), OpenVINORunner)
