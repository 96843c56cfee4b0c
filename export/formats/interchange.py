"""The interchange formats, ONNX (`model.onnx` / `embedder.onnx`, onnxruntime) and OpenVINO (`model.xml` + `.bin`,
OpenVINO's CPU plugin): float32 files converted by Keras' own `model.export` from the model as it was built (a
`dynamic_image_size=True` model keeps its open size), each run by its own runtime and checked at two batch sizes
(and a second image size for a dynamic model), with the export's description (export/portable.py: `properties`)
read back from the file.
Every kind's file goes through the same check (export/portable.py: `check`), with the kind's figures and budget."""

import os

from .. import interchange, portable, runtime
from ..entry import record
from ..onnx import OnnxRunner
from ..openvino import OpenVINORunner


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
        (export/portable.py: `check`); its report entry."""
        kind, budget, name = plan.kind, plan.kind.BUDGETS[mode], plan.kind.STEM + self.SUFFIXES[0]
        with runtime.printed(options.converter_output) as output:  # what tf2onnx and OpenVINO's frontend print
            name, written, runner = interchange.write(self.NAME, plan.dynamic_model or plan.model, plan.description,
                                                      staging, options.num_threads, name)  # fmt: skip
        found, failures, fields = portable.check(kind, runner, v.x, v.reference, v.truth, budget, plan.description,
                                                 plan.dynamic_model)  # fmt: skip
        return record(plan, v, options, name, self.NAME, mode, out, written, found, runner, budget, failures,
                      converter_output=output[0].splitlines(), **fields)  # fmt: skip


ONNX = Interchange("onnx", (".onnx",), OnnxRunner)
OPENVINO = Interchange("openvino", (".xml", ".bin"), OpenVINORunner)
