"""Which `pip install "keras-vit[EXTRA]"` brings a module that a command or the library is missing, in one line
instead of a traceback. Only the standard library is imported here."""

import os
import sys

# import name -> (distribution, the extra that installs it). TensorFlow is in [train] and [export] both, so it
# takes the extra of the command that needs it. tests/keras_vit/test_extras.py checks the table against pyproject.toml.
MODULES = {
    "tensorflow": ("tensorflow", None),
    "tensorflow_datasets": ("tensorflow-datasets", "train"),
    "sklearn": ("scikit-learn", "train"),
    "ai_edge_litert": ("ai-edge-litert", "export"),
    "ai_edge_quantizer": ("ai-edge-quantizer", "export"),
    "mediapipe": ("mediapipe", "export"),
    "onnx": ("onnx", "export"),
    "onnxruntime": ("onnxruntime", "export"),
    "tf2onnx": ("tf2onnx", "export"),
    "openvino": ("openvino", "export"),
    "jax": ("jax", "jax"),
}
CHECKOUT = "in a checkout: pip install -r requirements.txt"


def _keras_backend():
    """The backend Keras was configured with, when Keras has started importing (None otherwise)."""
    config = sys.modules.get("keras.src.backend.config")
    return config.backend() if config is not None else None


def missing_line(err, command, extra=None):
    """The line for a `ModuleNotFoundError` that `command` ("keras-vit train", "keras_vit") met, or None.

    `extra` is the command's own extra (what a missing TensorFlow means for it); None for the model library, for
    which a missing TensorFlow is Keras' default backend. None is returned for a module no extra installs (a
    damaged install, where the traceback says more).
    """
    top = (err.name or "").partition(".")[0]
    if top not in MODULES:
        return None
    distribution, its_extra = MODULES[top]
    if top == "tensorflow" and extra is None:
        backend = _keras_backend() or os.environ.get("KERAS_BACKEND", "tensorflow")
        return (
            f"{command} runs on Keras, whose backend is {backend!r} (KERAS_BACKEND, else ~/.keras/keras.json, else "
            f"TensorFlow), and TensorFlow is not installed: set KERAS_BACKEND=jax (pip install 'keras-vit[jax]'), "
            f"or install TensorFlow (pip install 'keras-vit[train]')"
        )
    extra = its_extra or extra
    return f"{command} needs {distribution}, which is not installed: pip install 'keras-vit[{extra}]' ({CHECKOUT})"


def run(main, argv, command, extra=None):
    """`main(argv)`, with a missing module an extra installs reported in one line on stderr (exit status 2)."""
    try:
        return main(argv)
    except ModuleNotFoundError as err:
        line = missing_line(err, command, extra)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
