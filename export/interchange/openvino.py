"""OpenVINO: Keras' own `model.export(format="openvino")` pruned to its one output, the description in rt_info, run on
the CPU plugin with a float32 precision hint (its bfloat16 default is reported beside it)."""

import collections
import os
import tempfile

import numpy as np

from keras_vit import files

from .. import commit
from ..errors import ExportError
from . import portable

NAME = "model.xml"
WEIGHTS = "model.bin"
RT_INFO = "keras_vit"
DEVICE = "CPU"
PRECISION = "f32"
# What the graph holds besides operations.
_NOT_OPS = {"Parameter", "Result", "Constant"}


def convert(model, description):
    """(xml bytes, bin bytes) of `model`: float32 images in [-1, 1] -> its one output, named as `description`
    (export/description.py) names it (`logits`, `embedding`), which is written into rt_info (`portable.properties`)."""
    import openvino as ov

    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "keras.xml")
        model.export(path, format="openvino", verbose=False, input_signature=[portable.input_spec(model)])
        ov_model = ov.Core().read_model(path)
        # The TensorFlow frontend also returns some shape scalars of a dynamic-size graph as results
        # (OpenVINO 2026.4, Keras 3.15): keep the model's output only.
        for result in list(ov_model.get_results())[1:]:
            ov_model.remove_result(result)
        ov_model.outputs[0].get_tensor().set_names({description.outputs[0].name})
        for key, text in portable.properties(description).items():
            ov_model.set_rt_info(text, [RT_INFO, key])
        out = os.path.join(scratch, NAME)
        ov.save_model(ov_model, out, compress_to_fp16=False)
        with open(out, "rb") as xml, open(os.path.join(scratch, WEIGHTS), "rb") as weights:
            return xml.read(), weights.read()


def write(model, description, staging, num_threads=1, name=NAME):
    """Converts `model` (`convert`), writes `name` and the .bin beside it into the staging directory and opens them
    with OpenVINO; returns (name, bytes written, runner)."""
    xml, weights = convert(model, description)
    # The weights first: an .xml is never there without them.
    commit.write_staged(staging / (os.path.splitext(name)[0] + ".bin"), weights)
    commit.write_staged(staging / name, xml)
    return name, len(xml) + len(weights), OpenVINORunner(xml, weights, num_threads=num_threads)


def _read(core, xml, weights, where):
    import openvino as ov

    try:
        return core.read_model(model=bytes(xml), weights=ov.Tensor(np.frombuffer(bytes(weights), np.uint8)))
    except Exception as exc:  # OpenVINO raises RuntimeError or its own types, with a C++ trace
        raise ExportError(
            f"OpenVINO could not read {where}: {portable.first_line(exc)} (is it an OpenVINO IR .xml with its .bin "
            "beside it? Re-export it with `python -m export`)."
        ) from exc


class OpenVINORunner(portable.InterchangeRunner):
    """Runs an OpenVINO IR (.xml + .bin) on the CPU plugin: `num_threads` inference threads, latency mode, the
    inference precision hint `precision` ("f32" by default; None leaves the plugin's default)."""

    kind = "openvino"
    what = "The OpenVINO model"

    def __init__(self, xml=None, weights=None, path=None, num_threads=1, precision=PRECISION):
        import openvino as ov

        where = repr(str(path)) if path is not None else "the OpenVINO model"
        if xml is None:
            path = os.fspath(path)
            bin_path = os.path.splitext(path)[0] + ".bin"
            for needed in (path, bin_path):
                if not files.isfile(needed):
                    raise ExportError(
                        f"No file at {needed!r}: an OpenVINO model is a .xml file and its .bin beside it."
                    )
            xml, weights = files.read_bytes(path), files.read_bytes(bin_path)
        self.core = ov.Core()
        self.model = _read(self.core, xml, weights, where)
        if len(self.model.inputs) != 1 or len(self.model.outputs) != 1:
            raise ExportError(
                f"Expected one input and one output in {where}; found {len(self.model.inputs)} and "
                f"{len(self.model.outputs)}."
            )
        shape = self.model.inputs[0].get_partial_shape()
        self.input_shape = [None if d.is_dynamic else d.get_length() for d in shape]
        found = {}
        for key in portable.CONTRACT_KEYS:
            if self.model.has_rt_info([RT_INFO, key]):
                found[key] = self.model.get_rt_info([RT_INFO, key]).astype(str)
        self.contract = portable.read_contract(found, where)
        self.num_threads = int(num_threads)
        self.runtime_version = ov.get_version().split("-")[0]
        self.device = self.core.get_property(DEVICE, "FULL_DEVICE_NAME")
        config = {"INFERENCE_NUM_THREADS": self.num_threads, "PERFORMANCE_HINT": "LATENCY"}
        if precision is not None:
            config["INFERENCE_PRECISION_HINT"] = precision
        try:
            self.compiled = self.core.compile_model(self.model, DEVICE, config)
        except Exception as exc:  # the plugin's own error, in one line
            raise ExportError(f"OpenVINO could not compile {where} for its CPU: {portable.first_line(exc)}") from exc
        self.inference_precision = self.compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        self.request = self.compiled.create_infer_request()
        self._files = (xml, weights)
        self._setup(where)

    def details(self, x, reference, kind):
        """What the report states beside the figures: runtime, device, precision, op counts, and `kind`'s figures
        (export/kinds/) against `reference` with the plugin's default precision (one more compile; not budgeted)."""
        default = self.at_default_precision()
        figures = kind.figures(default.outputs(x), reference)
        return {
            "runtime_version": self.runtime_version,
            "device": self.device,
            "inference_precision": self.inference_precision,
            "default_precision": {
                "inference_precision": default.inference_precision,
                **{k: figures[k] for k in kind.CHECKS["precision_figures"]},
            },
            "ops": self.ops(),
        }

    def at_default_precision(self):
        """The same files compiled again with the plugin's default inference precision (bfloat16 on CPUs with
        AVX512-BF16 or AMX)."""
        return OpenVINORunner(*self._files, num_threads=self.num_threads, precision=None)

    def run(self, x):
        return np.array(self.request.infer([x])[self.compiled.outputs[0]])

    def ops(self):
        """{"Type (opsetN)": count} of the operations in the graph (parameters, results and constants left out)."""
        counted = collections.Counter(
            f"{op.get_type_name()} ({op.get_type_info().version_id})"
            for op in self.model.get_ordered_ops()
            if op.get_type_name() not in _NOT_OPS
        )
        return dict(sorted(counted.items()))
