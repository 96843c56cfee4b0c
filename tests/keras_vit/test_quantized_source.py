"""A Keras-quantized `.keras` as a weights source: read as the float kernels its codes and scales stand for (int8,
int4, float8), within the quantization's own error of the quantized model, or refused; never the codes alone."""

import types
import warnings

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import quantized
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.model_io import read_checkpoint


def _quantized_file(tmp_path, mode):
    keras.utils.set_random_seed(7)
    model = keras_vit.create_model("testing", num_classes=10, image_size=32)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.2, head.kernel.shape))
    images = np.random.default_rng(2).uniform(-1, 1, (16, 32, 32, 3)).astype("float32")
    reference = keras.ops.convert_to_numpy(model(images))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras names the layers it has nothing to quantize in
        model.quantize(mode)
    path = tmp_path / f"q_{mode}.keras"
    model.save(path)
    return path, model, images, reference


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["int8", "int4", "float8"])
def test_a_quantized_keras_file_loads_within_the_quantization_error(tmp_path, mode):
    path, model, images, reference = _quantized_file(tmp_path, mode)
    out_quantized = keras.ops.convert_to_numpy(model(images))
    loaded = keras_vit.from_pretrained(str(path))
    assert loaded.get_layer("head").quantization_mode is None
    out = keras.ops.convert_to_numpy(loaded(images))
    # The quantization's own error: how far the quantized model is from the float one it came from. A reading of
    # the codes as kernels (the old reader) lands orders of magnitude beyond it.
    error = np.abs(out_quantized - reference).max()
    assert np.abs(out - out_quantized).max() <= 2 * error + 1e-6 * np.abs(reference).max()


@pytest.mark.slow
def test_an_int8_kernel_is_its_codes_over_their_scales(tmp_path):
    path, model, _, _ = _quantized_file(tmp_path, "int8")
    dense = model.get_layer("encoderblock_0").mlp.dense_0
    codes = keras.ops.convert_to_numpy(dense._kernel).astype(np.float64)
    scale = keras.ops.convert_to_numpy(dense.kernel_scale).astype(np.float64)
    ckpt = read_checkpoint(str(path))
    kernel = ckpt.params["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"]
    np.testing.assert_allclose(kernel, codes / scale, rtol=1e-6, atol=0)
    query = model.get_layer("encoderblock_0").attention.query
    codes = keras.ops.convert_to_numpy(query._kernel).astype(np.float64)  # (D, H, K), scales over D
    scale = keras.ops.convert_to_numpy(query.kernel_scale).astype(np.float64).reshape(1, *codes.shape[1:])
    kernel = ckpt.params["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"]
    np.testing.assert_allclose(kernel, codes / scale, rtol=1e-6, atol=0)


def test_a_mode_the_reader_cannot_undo_is_refused_in_one_line(monkeypatch):
    gptq = types.SimpleNamespace(quantization_mode="gptq", path="head")
    monkeypatch.setattr(quantized, "quantized_layers", lambda model: {"head": gptq})
    with pytest.raises(CheckpointError, match="'gptq'") as err:
        quantized.float_twin(object(), source="q.keras")
    assert "\n" not in str(err.value) and "float model" in str(err.value)
