"""What ships beside a NaFlex model's files so an app turns any image into its inputs: `naflex_preprocessing.py`
(numpy only: keras_vit's resize and patchify, the exact reference) and `naflex_preprocessing.json` (its settings)."""

import ast
import importlib.util
import inspect
import json

import numpy as np

from keras_vit import naflex_inputs, resample

MODULE = "naflex_preprocessing.py"
SETTINGS = "naflex_preprocessing.json"
OWNED = (r"naflex_preprocessing\.(py|json|tflite)",)
# Every verification image is cut to one of these (height, width) fractions of itself: wide, tall, square.
ASPECTS = {"wide": (0.5, 1.0), "tall": (1.0, 0.5), "square": (1.0, 1.0)}

_HEADER = '''"""NaFlex preprocessing for {name}: `inputs(image)` turns one uint8 RGB (H, W, 3) image of any size into
the model's "patches" (1, {n}, {width}) float32, "mask" (1, {n}) int32 and "grid" (1, 2) int32. Written by keras-vit's
export from keras_vit/resample.py and keras_vit/naflex_inputs.py (numpy only); settings: naflex_preprocessing.json."""

import math

import numpy as np

SETTINGS = {settings!r}


def inputs(image):
    """The model's three inputs for one image, batch 1 (what the .tflite, .onnx, .xml and SavedModel files take)."""
    patches, mask, grid = naflex_image(image, SETTINGS["patch_size"], SETTINGS["max_num_patches"], SETTINGS["style"],
                                       SETTINGS["mean"], SETTINGS["std"])
    return {{"patches": patches[None], "mask": mask[None], "grid": grid[None]}}

'''


def settings(model):
    """The preprocessing's settings for a `NaFlexViT`: patch size, budget, resize style and normalisation."""
    options = model.options
    return {
        "patch_size": options["patch_size"],
        "max_num_patches": options["max_num_patches"],
        "style": "transformers",  # bilinear, antialiased (Siglip2ImageProcessor's), what keras-vit trains with
        "mean": 0.5,
        "std": 0.5,
        "inputs": {
            "patches": [1, options["max_num_patches"], options["patch_size"] ** 2 * options["channels"]],
            "mask": [1, options["max_num_patches"]],
            "grid": [1, 2],
        },
    }


def module_source(model):
    """The text of naflex_preprocessing.py: keras_vit's two numpy modules joined, with a batch-1 `inputs(image)`."""
    spec = settings(model)
    head = _HEADER.format(name=model.name, n=spec["max_num_patches"], width=spec["inputs"]["patches"][2],
                          settings={k: v for k, v in spec.items() if k != "inputs"})  # fmt: skip
    bodies = [_body(resample), _body(naflex_inputs)]
    return head + "\n\n".join(bodies)


def _body(module):
    """A module's text after its docstring, without its imports."""
    text = inspect.getsource(module)
    docstring = ast.parse(text).body[0].end_lineno
    lines = text.splitlines(keepends=True)[docstring:]
    return "".join(line for line in lines if not line.startswith(("import ", "from "))).strip() + "\n"


def load(path):
    """The shipped naflex_preprocessing.py, imported from `path` (what an app's Python would do)."""
    spec = importlib.util.spec_from_file_location("naflex_preprocessing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def files_of(model):
    """{file name: bytes} of the preprocessing shipped beside the model's files."""
    return {MODULE: module_source(model).encode(), SETTINGS: settings_json(model).encode()}


def settings_json(model):
    """naflex_preprocessing.json's text (also written into the ONNX file's metadata)."""
    return json.dumps(settings(model), indent=2) + "\n"


def verification_images(images):
    """The verification images cut to three aspect ratios in turn (`ASPECTS`: wide, tall, square): a list of uint8
    arrays of different sizes, and the aspect name of each."""
    cut, names = [], []
    for i, image in enumerate(images):
        name = list(ASPECTS)[i % len(ASPECTS)]
        fh, fw = ASPECTS[name]
        h, w = image.shape[:2]
        cut.append(np.ascontiguousarray(image[: max(1, round(h * fh)), : max(1, round(w * fw))]))
        names.append(name)
    return cut, names
