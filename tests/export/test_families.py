"""The rotary families (DINOv3, EVA-02, Perception Encoder) and AIMv2 export to TFLite, ONNX and OpenVINO, and each
runtime gives timm's own logits for the fixture images (fixtures/interop_families2/): the exported graphs compute
RoPE, SwiGLU, RMSNorm, the exact (erf) GELU and the 8-head pool as timm does."""

import os

import numpy as np
import pytest

import export
import keras_vit
from tests import support
from tests.support.numerics import scaled_diff

FAMILIES = os.path.join(str(support.FIXTURES), "interop_families2")
# The exporter's own float budget (relative logits, export/kinds/classifier.py) also holds against timm: keras-vit
# matches timm within 1e-5 (tests/keras_vit/test_interop_families2.py) and each runtime matches keras-vit within it.
TOL = 1e-4
NAMES = ["timm_dinov3_small_plus", "timm_eva02_base_clip", "timm_pe_core_tiny", "timm_aimv2"]
FILES = {"model_float32.tflite": "logits", "model.onnx": "logits", "model.xml": "logits"}


@pytest.mark.slow  # one SavedModel, TFLite, ONNX and OpenVINO conversion per family: ~25 s each on 2 busy cores
@pytest.mark.parametrize("name", NAMES)
def test_the_exported_files_give_timms_logits(name, tmp_path):
    arrays = dict(np.load(os.path.join(FAMILIES, name, "io.npz")))
    model = keras_vit.from_pretrained(os.path.join(FAMILIES, name))
    report = export.export_model(
        export.ExportSource(model, heldout=(arrays["pixels"], None)), tmp_path,
        export.ExportOptions(quantize=("float32",), tflite_output="logits", latency_runs=1, gpu_check="off"),
    )  # fmt: skip
    assert report["passed"], export.format_table(report)
    for file, output in FILES.items():
        runner = export.load_runner(tmp_path / file)
        got = runner.outputs(arrays["images"])[output]
        assert scaled_diff(got, arrays["logits"]) < TOL, (file, scaled_diff(got, arrays["logits"]))


@pytest.mark.slow
def test_dinov3_exports_with_an_open_image_size(tmp_path):
    """DINOv3 (no position table; RoPE from the input's grid): ONNX and OpenVINO keep the height and width open and
    give timm's logits for a non-square image; TFLite is fixed at the model's image_size."""
    name = "timm_dinov3_small"
    arrays = dict(np.load(os.path.join(FAMILIES, name, "io.npz")))
    model = keras_vit.from_pretrained(os.path.join(FAMILIES, name))
    assert model.config.dynamic_image_size
    options = export.ExportOptions(formats=("onnx", "openvino"), latency_runs=1, gpu_check="off")
    report = export.export_model(export.ExportSource(model, heldout=(arrays["pixels"], None)), tmp_path, options)
    assert report["passed"], export.format_table(report)
    for file in ("model.onnx", "model.xml"):
        runner = export.load_runner(tmp_path / file)
        for prefix in ("", "wide_"):
            got = runner.run(arrays[f"{prefix}images"].astype(np.float32))  # any size: not checked against image_size
            assert scaled_diff(got, arrays[f"{prefix}logits"]) < TOL, (file, prefix)


@pytest.mark.slow
def test_a_dinov3_backbone_exports_as_an_embedder_with_transformers_features(tmp_path):
    """transformers' DINOv3 without a head (num_classes=0): the MediaPipe-style embedder files give its
    `pooler_output` (the normed class token)."""
    name = "hf_dinov3_vit"
    arrays = dict(np.load(os.path.join(FAMILIES, name, "io.npz")))
    model = keras_vit.from_pretrained(os.path.join(FAMILIES, name))
    assert model.config.num_classes == 0
    options = export.ExportOptions(quantize=("float32",), latency_runs=1, gpu_check="off")
    report = export.export_model(export.ExportSource(model, heldout=(arrays["pixels"], None)), tmp_path, options)
    assert report["passed"], export.format_table(report)
    for file in ("embedder_float32.tflite", "embedder.onnx", "embedder.xml"):
        got = export.load_runner(tmp_path / file).outputs(arrays["images"])["embedding"]
        assert scaled_diff(got, arrays["pooler_output"]) < TOL, file
