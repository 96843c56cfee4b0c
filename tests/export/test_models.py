"""export/ on untrained models of two sizes, the TFLite options, and the flatbuffer readers."""

import functools
import os

import numpy as np
import pytest

import export
from export.keras_runner import KerasRunner
from export.tflite import gpu as export_gpu
from export.tflite.runner import TFLiteRunner
from tests.support import export_fixtures as fx


def softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def random_images(n, size, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def check_report(report, expected_names):
    assert report["passed"], export.format_table(report)
    assert [a["name"] for a in report["artifacts"]] == expected_names
    for a in report["artifacts"]:
        if a["quantization"] is None:
            assert a["max_abs_logit_diff"] <= 1e-4 and a["top1_agreement"] == 1.0
        if a["quantization"] == "float32":  # a softmax ends the TFLite models
            assert a["max_abs_probability_diff"] <= 1e-4 and a["top1_agreement"] == 1.0
        if a["format"] == "tflite":
            assert a["non_builtin_ops"] == [] and a["ops"]


@pytest.mark.slow  # SavedModel and two TFLite conversions: 20 s measured
def test_testing_variant_float32_and_dynamic_int8(tmp_path, capfd, monkeypatch):
    model = fx.random_classifier("testing", head_scale=4.0)
    images = random_images(64, 32)
    convert = export.tflite.converter.convert_described

    def convert_printing(*args, **kwargs):  # prints from below Python, as the C++ converter does
        os.write(2, b"converter line on fd 2\n")
        os.write(1, b"converter line on fd 1\n")
        return convert(*args, **kwargs)

    monkeypatch.setattr(export.tflite.converter, "convert_described", convert_printing)
    capfd.readouterr()
    report = export.export_model(
        export.ExportSource(model, heldout=(images, None)), tmp_path,
        export.ExportOptions(formats=("saved_model", "tflite"), quantize=("float32", "dynamic_int8"), latency_runs=5),
    )  # fmt: skip
    check_report(report, ["saved_model", "model_float32.tflite", "model_dynamic_int8.tflite"])
    # What the converter prints from C++ (fds 1 and 2) is in the report, not on the terminal.
    out, err = capfd.readouterr()
    printed = [line for a in report["artifacts"] if a["format"] == "tflite" for line in a["converter_output"]]
    assert printed.count("converter line on fd 2") == printed.count("converter line on fd 1") == 2
    assert "converter line" not in out + err
    assert not [line for line in printed if line.strip() and line in out + err]
    # The verification is independent of the report's own code path: rerun the written file.
    tflite = TFLiteRunner(path=tmp_path / "model_float32.tflite")
    x = export.to_model_space(images, (32, 32))
    assert tflite.output_kind == "probabilities"
    np.testing.assert_allclose(tflite.outputs(x)["probabilities"], softmax(model.predict(x, verbose=0)), atol=1e-5)
    assert tflite.labels == [str(i) for i in range(10)]


@pytest.mark.slow
def test_ti16_at_224_float32_and_dynamic_int8(tmp_path, monkeypatch):
    # One image per file on LiteRT's GPU accelerator (SwiftShader takes ~11 s per 224 px image; the default runs
    # images for 30 s): whether every op runs there does not depend on how many images follow the first.
    monkeypatch.setattr(export_gpu, "run_on_gpu", functools.partial(export_gpu.run_on_gpu, run_seconds=1))
    model = fx.random_classifier("Ti/16", image_size=224, num_classes=10, head_scale=4.0)
    report = export.export_model(
        export.ExportSource(model, heldout=(random_images(12, 224), None)), tmp_path,
        export.ExportOptions(formats=("tflite",), quantize=("float32", "dynamic_int8"), latency_runs=3,
                             latency_warmup=1),
    )  # fmt: skip
    check_report(report, ["model_float32.tflite", "model_dynamic_int8.tflite"])
    sizes = {a["quantization"]: a["file_bytes"] for a in report["artifacts"]}
    assert sizes["dynamic_int8"] < 0.3 * sizes["float32"]  # 5.5 M weights: int8 weights dominate the file
    # LiteRT's GPU accelerator (SwiftShader) takes every op of a 224 px ViT too.
    for entry in report["artifacts"]:
        g = entry["gpu"]
        assert g["verdict"] == "fully accelerated" and g["within_budget"], (
            entry["name"],
            g["verdict"],
            g.get("misses"),
        )
        print(entry["name"], "GPU:", g["figures"]["images"], "images,", g["figures"]["max_abs_probability_diff"],
              "max |dp| vs Keras,", g["max_abs_diff_vs_cpu"], "vs CPU,", g["seconds"], "s")  # fmt: skip


@pytest.mark.slow
def test_dynamic_batch_option(tmp_path):
    model = fx.random_classifier("testing", head_scale=4.0)
    flatbuffer = export.convert_tflite(model, "float32", dynamic_batch=True)
    runner = TFLiteRunner(flatbuffer)
    assert runner.dynamic_batch and list(runner.input["shape_signature"]) == [-1, 32, 32, 3]
    x = export.to_model_space(random_images(5, 32), (32, 32))
    np.testing.assert_allclose(runner.outputs(x)["probabilities"], softmax(model.predict(x, verbose=0)), atol=1e-5)
    fixed = TFLiteRunner(export.convert_tflite(model, "float32"))
    assert list(fixed.input["shape_signature"]) == [1, 32, 32, 3]


@pytest.mark.slow
def test_full_int8_with_uint8_io(tmp_path):
    model = fx.random_classifier("testing", head_scale=4.0)
    images = random_images(64, 32)
    flatbuffer = export.convert_tflite(model, "int8", representative_images=images, int8_io="uint8", output="logits")
    runner = TFLiteRunner(flatbuffer)
    assert runner.output_kind == "logits" and export.read_metadata(flatbuffer)["output"]["min"] is None
    assert runner.input["dtype"] == np.uint8 and runner.output_details["logits"]["dtype"] == np.uint8
    assert runner.input["quantization"][0] == pytest.approx(2 / 255, rel=1e-3)  # calibrated on [-1, 1]
    assert export.non_builtin_ops(export.read_ops(flatbuffer)) == []
    # A loose sanity check on noise; the accuracy of uint8 I/O is checked on the digits model.
    x = export.to_model_space(images[:16], (32, 32))
    assert np.corrcoef(runner.outputs(x)["logits"].ravel(), model.predict(x, verbose=0).ravel())[0, 1] > 0.9


@pytest.mark.slow
def test_exact_gelu_converts_to_the_builtin_op():
    model = fx.random_classifier("testing", gelu="exact")
    ops = export.read_ops(export.convert_tflite(model, "float32"))
    assert "GELU" in ops and export.non_builtin_ops(ops) == []


@pytest.mark.slow
def test_keras_runner_and_saved_model_agree_on_raw_images(tmp_path):
    model = fx.random_classifier("testing", head_scale=4.0)
    path = export.write_saved_model(model, tmp_path / "sm", [f"c{i}" for i in range(10)])
    runner = export.load_runner(path)
    images = [random_images(1, 45, seed=1)[0], random_images(1, 20, seed=2)[0]]
    expected = KerasRunner(model).outputs_from_images(images)
    assert list(expected) == ["logits"]
    np.testing.assert_allclose(runner.outputs_from_images(images)["logits"], expected["logits"], atol=1e-4)
    assert runner.labels == [f"c{i}" for i in range(10)]


def test_op_reader_flags_custom_ops():
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec((1, 10), tf.float32)])
    def with_erf(x):
        return tf.math.erf(x) + 1.0

    converter = tf.lite.TFLiteConverter.from_concrete_functions([with_erf.get_concrete_function()])
    converter.allow_custom_ops = True  # what a careless exporter does: Erf becomes a custom op no runtime has
    flatbuffer = converter.convert()
    ops = export.read_ops(flatbuffer)
    assert ops == {"ADD": 1, "CUSTOM:Erf": 1}
    assert export.non_builtin_ops(ops) == ["CUSTOM:Erf"]


@pytest.mark.slow
def test_tflite_signatures_name_their_outputs():
    """The signature an app runs by name (LiteRT's signature runner, CompiledModel.run_by_name) says what comes out:
    `probabilities` / `logits` for a classifier, `embedding` for an embedder, not the frozen graph's output_0."""
    from ai_edge_litert.interpreter import Interpreter

    from export.kinds.embedder import headless_model
    from export.tflite.converter import convert_embedder

    model = fx.random_classifier("testing", head_scale=4.0)
    x = export.to_model_space(random_images(2, 32), (32, 32))
    for output in ("probabilities", "logits"):
        interpreter = Interpreter(model_content=export.convert_tflite(model, "float32", output=output))
        runner = interpreter.get_signature_runner("serving_default")
        assert list(runner.get_output_details()) == [output]
        got = runner(images=x[:1])[output]
        expected = model.predict(x[:1], verbose=0)
        np.testing.assert_allclose(got, softmax(expected) if output == "probabilities" else expected, atol=1e-5)
    features = headless_model(model)
    interpreter = Interpreter(model_content=convert_embedder(features))
    runner = interpreter.get_signature_runner("serving_default")
    assert list(runner.get_output_details()) == ["embedding"]
    np.testing.assert_allclose(runner(images=x[:1])["embedding"], features.predict(x[:1], verbose=0), atol=1e-5)
