"""Feature maps on export: a `keras_vit.feature_model` (chosen blocks' outputs, one or many) to SavedModel and TFLite.

The export job (export/job.py) writes a feature model as `saved_model/` (signatures `serving_default` for raw uint8
images and `model_space`, each returning every output by name) and `feature_maps_<mode>.tflite` with the `.json`
sidecar written here (the outputs' names, what each holds, and where TFLite put it), for the LiteRT interpreter or
CompiledModel: no TFLite metadata, since MediaPipe Tasks have no task that reads feature maps. Every file is
reloaded by the runtime that will run it and each named output compared with the Keras model's output of that name
on the same images (export/kinds/feature_maps.py: `BUDGETS`, `compare`).
A model whose one output is a pooled vector (`num_classes=0`) is an image embedder (export/embedder.py) instead.
"""

from . import feature_maps_artifacts as artifacts
from . import preprocessing, runtime
from .kinds import feature_maps as kind
from .kinds.feature_maps import BUDGETS, MODES, REFUSED, is_feature_maps, tflite_modes

__all__ = ["BUDGETS", "MODES", "REFUSED", "is_feature_maps", "sidecar", "tflite_modes"]


def sidecar(model, runner, mode):
    """The `.json` beside a feature-map `.tflite`: preprocessing, the input, and each output in the model's order
    with what it holds and where TFLite put it (its signature name is the key to read it by)."""
    described, positions = kind.describe_outputs(model), runner.positions()
    outputs = [
        {"name": name, "meaning": described[name], "shape": [int(d) for d in detail["shape_signature"]],
         "tensor": detail["name"], "tensor_index": int(detail["index"]), "subgraph_output": positions[name]}
        for name, detail in ((n, runner.output_details[n]) for n in kind.output_names(model))
    ]  # fmt: skip
    return {
        "format": "tflite",
        "kind": "feature_maps",
        "quantization": mode,
        "dynamic_batch": runner.dynamic_batch,
        "signature": artifacts.SIGNATURE,
        "preprocessing": preprocessing.describe(runtime.image_size(model)),
        "input": {
            "name": artifacts.INPUT,
            "dtype": "float32",
            "shape": [int(d) for d in runner.input["shape_signature"]],
        },
        "outputs": outputs,
    }
