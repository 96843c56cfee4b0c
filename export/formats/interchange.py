"""The interchange formats, ONNX (`model.onnx` / `embedder.onnx`, onnxruntime) and OpenVINO (`model.xml` + `.bin`,
OpenVINO's CPU plugin): float32 files converted by Keras' own `model.export` from the model as it was built (a
`dynamic_image_size=True` model keeps its open size), each run by its own runtime and checked at two batch sizes
(and a second image size for a dynamic model), with the export's description (export/portable.py: `properties`)
read back from the file.
A classifier's checks are export/portable.py's, an embedder's export/embedder_portable.py's."""

import os

from keras_vit import files

from .. import embedder_portable, interchange, portable, runtime
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
        """Converts, stages, reopens with the format's runtime and judges one file; its report entry."""
        if plan.labels is None:  # an image embedder
            return self._embedder(plan, v, staging, out, options)
        kind = plan.kind
        with runtime.printed(options.converter_output) as output:
            name, written, runner = interchange.write(self.NAME, plan.dynamic_model or plan.model, plan.description,
                                                      staging, options.num_threads)  # fmt: skip
        found = kind.figures(runner.outputs(v.x), v.reference, v.truth)
        budget = kind.BUDGETS[mode]
        fields, failures = portable.check(runner, v.x, v.reference, budget, plan.dynamic_model)
        return record(plan, v, options, name, self.NAME, mode, out, written, found, runner, budget,
                      kind.check_budget(found, budget) + failures, converter_output=output[0].splitlines(),
                      **fields)  # fmt: skip

    def _embedder(self, plan, v, staging, out, options):
        with runtime.printed(options.converter_output) as output:  # what tf2onnx and OpenVINO's frontend print
            entry = embedder_portable.artifact(
                self.NAME, plan.dynamic_model or plan.model, plan.description, staging, v.x, v.reference,
                options.num_threads, options.latency_runs, options.latency_warmup, plan.dynamic_model,
            )  # fmt: skip
        return {**entry, "path": files.join(out, entry["name"]), "converter_output": output[0].splitlines()}


ONNX = Interchange("onnx", (".onnx",), OnnxRunner)
OPENVINO = Interchange("openvino", (".xml", ".bin"), OpenVINORunner)
