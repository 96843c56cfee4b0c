"""Feature maps on export: a `keras_vit.feature_model` (chosen blocks' outputs, one or many) to SavedModel and TFLite.

The export job (export/job.py) writes a feature model as `saved_model/` (signatures `serving_default` for raw uint8
images and `model_space`, each returning every output by name) and `feature_maps_<mode>.tflite` with its `.json`
sidecar (export/formats/tflite.py: the outputs' names, what each holds, and where TFLite put it), for the LiteRT
interpreter or CompiledModel: no TFLite metadata, since MediaPipe Tasks have no task that reads feature maps. Every
file is reloaded by the runtime that will run it and each named output compared with the Keras model's output of
that name on the same images (export/kinds/feature_maps.py: `BUDGETS`, `compare`).
A model whose one output is a pooled vector (`num_classes=0`) is an image embedder (export/embedder.py) instead.
"""

from .kinds.feature_maps import BUDGETS, MODES, REFUSED, is_feature_maps, tflite_modes

__all__ = ["BUDGETS", "MODES", "REFUSED", "is_feature_maps", "tflite_modes"]
