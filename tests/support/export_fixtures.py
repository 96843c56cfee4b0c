"""Helpers for the export tests: randomly initialised classifiers (the digits model comes from the main job's
training run, see tests/conftest.py)."""

import numpy as np


def random_classifier(variant="testing", seed=0, head_scale=1.0, **overrides):
    """A randomly initialised classifier whose head is random too (a fresh ViT head is zero, so every
    logit would be 0 and top-1 agreement trivially perfect)."""
    import keras

    import keras_vit

    keras.utils.set_random_seed(seed)
    model = keras_vit.create_model(variant, **overrides)
    head = model.get_layer("head")
    rng = np.random.default_rng(seed)
    kernel = rng.normal(0.0, head_scale / np.sqrt(head.kernel.shape[0]), head.kernel.shape).astype("float32")
    head.kernel.assign(kernel)
    head.bias.assign(rng.normal(0.0, 0.1, head.bias.shape).astype("float32"))
    return model
