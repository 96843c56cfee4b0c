"""Keras' dtype-policy conventions on `VisionTransformer`: a `DTypePolicyMap` gives each layer its entry (so a
quantized model can be built, then loaded), and the model reports the policy it was given. keras-hub's own model
battery (keras_hub/src/tests/test_case.py) runs when keras-hub imports; the checks below it need no keras-hub."""

import importlib

import keras
import numpy as np
import pytest

from keras_vit.models import VisionTransformer

KWARGS = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, num_classes=0)
PROJECTIONS = (keras.layers.Dense, keras.layers.EinsumDense)


def _images():
    return np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")


@pytest.mark.parametrize("name", ["mixed_float16", "mixed_bfloat16", "bfloat16"])
def test_the_model_reports_the_policy_it_was_given(name):
    policy = keras.DTypePolicy(name)
    model = VisionTransformer(**KWARGS, dtype=policy)
    assert (model.compute_dtype, model.variable_dtype) == (policy.compute_dtype, policy.variable_dtype)
    assert model.dtype_policy.name == name
    assert keras.ops.convert_to_numpy(model(_images())).shape == (2, 32)
    for layer in model._flatten_layers():
        if not isinstance(layer, keras.layers.InputLayer):
            assert layer.compute_dtype == policy.compute_dtype, layer.path


def _policy_map(model, mode):
    policy_map = keras.dtype_policies.DTypePolicyMap("float32")
    for layer in model._flatten_layers():
        if type(layer) in PROJECTIONS:
            policy_map[layer.path] = keras.dtype_policies.get(f"{mode}_from_float32")
    return policy_map


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_a_policy_map_quantizes_each_layer_it_names_and_the_weights_load(mode):
    float_model = VisionTransformer(**KWARGS)
    model = VisionTransformer(**KWARGS, dtype=_policy_map(float_model, mode))
    projections = [layer for layer in model._flatten_layers() if type(layer) in PROJECTIONS]
    assert projections and all(layer.quantization_mode == mode for layer in projections)
    assert all(layer.quantization_mode is None for layer in model._flatten_layers() if layer.name.startswith("Layer"))
    model(_images())
    config = model.get_config()
    revived = VisionTransformer.from_config(config)
    assert revived.get_config() == config
    revived.set_weights(model.get_weights())
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(revived(_images())), keras.ops.convert_to_numpy(model(_images()))
    )


try:  # keras-hub's battery needs keras-hub and its test helpers' imports (grain, portpicker): not required here
    test_case = importlib.import_module("keras_hub.src.tests.test_case")
except ImportError:  # pragma: no cover - depends on the environment
    test_case = None


@pytest.mark.slow
@pytest.mark.skipif(test_case is None, reason="keras-hub's test battery does not import here")
def test_keras_hubs_model_battery_passes():
    class Battery(test_case.TestCase):
        def runTest(self):
            model = VisionTransformer(**KWARGS)
            self.run_serialization_test(model)
            self.run_precision_test(VisionTransformer, dict(KWARGS), _images())
            self.run_quantization_test(model, VisionTransformer, dict(KWARGS), _images())
            self.run_model_saving_test(VisionTransformer, dict(KWARGS), _images())

    result = Battery().run()
    assert result.wasSuccessful(), [text for _, text in result.failures + result.errors]
