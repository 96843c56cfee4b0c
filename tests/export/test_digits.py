"""Acceptance tests of export/ on the digits model: parity, int8 accuracy and size, builtin ops, serving.

The model is the one README's main job trains (`python -m training`) and exports (`python -m export
runs/digits`), run once per session by tests/conftest.py; the tests re-check its artifacts with code
independent of export/ (LiteRT's interpreter, TFLite's flatbuffer schema, hand-written preprocessing).
"""

import contextlib
import io
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

import export
from export.__main__ import main as cli
from tests.support.numerics import UINT8_ROUNDING_RTOL, assert_top1_matches

pytestmark = pytest.mark.slow  # uses the main job's training run (~2 min on 2 cores)


@pytest.fixture(scope="module")
def digits(digits_main_job):
    import keras

    import keras_vit  # noqa: F401  (registers the layers for load_model)

    workdir = digits_main_job.workdir
    report = json.loads((workdir / "export" / "report.json").read_text())
    metrics = json.loads((workdir / "metrics.json").read_text())
    with np.load(workdir / "samples" / "heldout.npz") as held:
        images, labels = held["images"], held["labels"]
    model = keras.saving.load_model(workdir / "model.keras")
    x = (images.astype(np.float32) - 127.5) / 127.5  # held-out images are stored at the model's size
    return SimpleNamespace(
        workdir=workdir, out=workdir / "export", report=report, metrics=metrics, model=model,
        cwd=digits_main_job.cwd,
        images=images, labels=labels, x=x, keras_logits=model.predict(x, verbose=0),
    )  # fmt: skip


def softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# docs/export.md's budgets, written out here (not read from export/): top-1 agreement with Keras at least 99% for
# float16 and 97% for the int8 modes, one flipped image always allowed (so at most 1 - 1/N is required); at most
# 0.5 (float16) and 1 (int8 modes) point of accuracy lost.
MIN_AGREEMENT = {"float16": 0.99, "dynamic_int8": 0.97, "int8": 0.97, "int8_matmul": 0.97}
MAX_DROP = {"float16": 0.5, "dynamic_int8": 1.0, "int8": 1.0, "int8_matmul": 1.0}


def assert_within_budget(mode, top1, keras_top1, labels=None):
    """The docs' agreement (and, with labels, accuracy) budget of `mode` for these top-1 predictions."""
    n = len(top1)
    agreement = np.mean(top1 == keras_top1)
    assert agreement >= min(MIN_AGREEMENT[mode], 1 - 1 / n) - 1e-12, (mode, agreement, n)
    if labels is not None:
        drop = 100 * (np.mean(keras_top1 == labels) - np.mean(top1 == labels))
        assert drop <= MAX_DROP[mode], (mode, drop)
    return agreement


def run_tflite(path, x):
    """Runs a .tflite file image by image with LiteRT, (de)quantizing with the tensors' own parameters; returns
    its outputs (probabilities: the exported models end in a softmax)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    logits = []
    for image in x:
        feed = image[None]
        if inp["dtype"] != np.float32:
            scale, zero = inp["quantization"]
            bounds = np.iinfo(inp["dtype"])
            feed = np.clip(np.round(feed / scale + zero), bounds.min, bounds.max).astype(inp["dtype"])
        interpreter.set_tensor(inp["index"], feed)
        interpreter.invoke()
        y = interpreter.get_tensor(out["index"])[0]
        if out["dtype"] != np.float32:
            scale, zero = out["quantization"]
            y = (y.astype(np.float32) - zero) * scale
        logits.append(y)
    return np.array(logits)


def flatbuffer_operators(path):
    """(name, subgraph, operator) for every operator, read straight from the flatbuffer with TFLite's schema
    (custom ops are named 'CUSTOM:name')."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(bytearray(path.read_bytes()), 0)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for o in range(subgraph.OperatorsLength()):
            op = subgraph.Operators(o)
            code = model.OperatorCodes(op.OpcodeIndex())
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            name = names[builtin] if builtin != schema.BuiltinOperator.CUSTOM else f"CUSTOM:{code.CustomCode()}"
            yield name, subgraph, op


def flatbuffer_ops(path):
    """Operator names read straight from the flatbuffer."""
    return [name for name, _, _ in flatbuffer_operators(path)]


def test_the_digits_model_learned(digits):
    assert digits.metrics["top1"] >= 0.93
    # The trainer evaluated the float images these uint8 samples round: an image near the decision boundary may flip.
    assert_top1_matches(digits.keras_logits, digits.labels, digits.metrics["top1"], rtol=UINT8_ROUNDING_RTOL)


def test_export_wrote_every_artifact_and_passed(digits):
    names = {a["name"] for a in digits.report["artifacts"]}
    assert names == {"saved_model", "model_float32.tflite", "model_float16.tflite", "model_dynamic_int8.tflite",
                     "model_int8.tflite", "model_int8_matmul.tflite", "model.onnx", "model.xml"}  # fmt: skip
    assert digits.report["passed"]
    # Paths in the report are as the command was given: relative to where the main job ran.
    resolve = lambda path: str((digits.cwd / path).resolve())  # noqa: E731
    verification = dict(digits.report["verification"], set=resolve(digits.report["verification"]["set"]))
    assert verification == {
        "set": resolve(digits.workdir / "samples" / "heldout.npz"), "images": len(digits.labels), "labelled": True,
    }  # fmt: skip
    on_disk = json.loads((digits.out / "report.json").read_text())
    assert on_disk["artifacts"] == json.loads(json.dumps(digits.report["artifacts"]))
    for a in digits.report["artifacts"]:
        assert (digits.out / a["name"]).exists() and resolve(a["path"]) == resolve(digits.out / a["name"])
        assert a["latency_ms"] > 0 and a["file_bytes"] > 0
    saved_model = next(a for a in digits.report["artifacts"] if a["name"] == "saved_model")
    assert saved_model["max_abs_logit_diff"] <= 1e-4 and saved_model["serving_default_max_abs_logit_diff"] <= 1e-4
    leftovers = [p.name for p in digits.out.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_tflite_float32_matches_keras(digits):
    probabilities = run_tflite(digits.out / "model_float32.tflite", digits.x)
    expected = softmax(digits.keras_logits.astype(np.float64))
    assert np.abs(probabilities - expected).max() <= 1e-4
    assert np.array_equal(probabilities.argmax(-1), digits.keras_logits.argmax(-1))  # 100% top-1 agreement
    entry = next(a for a in digits.report["artifacts"] if a["name"] == "model_float32.tflite")
    project = entry["project_preprocessing"]  # the report's figures with (x - 127.5) / 127.5, as fed here
    assert project["max_abs_probability_diff"] == pytest.approx(np.abs(probabilities - expected).max(), abs=1e-6)
    assert entry["top1_agreement"] == project["top1_agreement"] == 1.0
    assert entry["output"] == "probabilities" and entry["max_abs_probability_diff"] <= 1e-4


def test_onnx_and_openvino_match_keras_on_the_heldout_set(digits):
    import onnxruntime as ort
    import openvino as ov

    session = ort.InferenceSession(str(digits.out / "model.onnx"), providers=["CPUExecutionProvider"])
    compiled = ov.Core().compile_model(str(digits.out / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    outputs = {
        "model.onnx": session.run(None, {"images": digits.x.astype(np.float32)})[0],
        "model.xml": compiled(digits.x.astype(np.float32))[compiled.outputs[0]],
    }
    scale = max(1.0, np.abs(digits.keras_logits).max())
    for name, logits in outputs.items():
        assert np.abs(logits - digits.keras_logits).max() / scale <= 1e-4, name
        assert np.array_equal(logits.argmax(-1), digits.keras_logits.argmax(-1)), name
        entry = next(a for a in digits.report["artifacts"] if a["name"] == name)
        assert entry["passed"] and entry["top1_accuracy"] == pytest.approx(np.mean(logits.argmax(-1) == digits.labels))
        assert entry["dynamic_batch"]["max_rel_logit_diff"] <= 1e-4 and entry["input_shape"] == ["batch", 16, 16, 3]


def test_full_int8_keeps_accuracy_and_is_small(digits):
    logits = run_tflite(digits.out / "model_int8.tflite", digits.x)
    keras_accuracy = np.mean(digits.keras_logits.argmax(-1) == digits.labels)
    int8_accuracy = np.mean(logits.argmax(-1) == digits.labels)
    assert 100 * (keras_accuracy - int8_accuracy) <= 1.0
    agreement = assert_within_budget("int8", logits.argmax(-1), digits.keras_logits.argmax(-1), digits.labels)
    int8_size = (digits.out / "model_int8.tflite").stat().st_size
    float_size = (digits.out / "model_float32.tflite").stat().st_size
    assert int8_size <= 0.30 * float_size, (int8_size, float_size)
    entry = next(a for a in digits.report["artifacts"] if a["name"] == "model_int8.tflite")
    assert entry["project_preprocessing"]["top1_accuracy"] == pytest.approx(int8_accuracy)
    assert entry["project_preprocessing"]["top1_agreement"] == pytest.approx(agreement)


def test_full_int8_with_uint8_io_keeps_accuracy(digits):
    with np.load(digits.workdir / "samples" / "calibration.npz") as calibration:
        representative = calibration["images"]
    path = digits.workdir / "int8_uint8_io.tflite"
    path.write_bytes(export.convert_tflite(digits.model, "int8", representative, int8_io="uint8"))
    logits = run_tflite(path, digits.x)  # quantizes the model-space input with the tensor's scale/zero-point
    assert_within_budget("int8", logits.argmax(-1), digits.keras_logits.argmax(-1), digits.labels)


def test_ai_edge_quantizer_modes_keep_accuracy(digits):
    """int8 weights with int16 activations (int16 I/O) and int4 weights, built with ai-edge-quantizer."""
    with np.load(digits.workdir / "samples" / "calibration.npz") as calibration:
        representative = calibration["images"]
    keras_top1 = digits.keras_logits.argmax(-1)
    keras_accuracy = np.mean(keras_top1 == digits.labels)
    float_size = (digits.out / "model_float32.tflite").stat().st_size
    from ai_edge_litert.interpreter import Interpreter

    for mode, io_dtype in (("int8_int16", np.int16), ("int4_weights", np.float32)):
        path = digits.workdir / f"aeq_{mode}.tflite"
        path.write_bytes(export.convert_tflite(digits.model, mode, representative))
        probabilities = run_tflite(path, digits.x)
        assert np.mean(probabilities.argmax(-1) == keras_top1) >= 0.97, mode
        assert 100 * (keras_accuracy - np.mean(probabilities.argmax(-1) == digits.labels)) <= 1.0, mode
        (inp,) = Interpreter(model_path=str(path)).get_input_details()
        assert inp["dtype"] == io_dtype and path.stat().st_size <= 0.35 * float_size, mode


def op_input_types(path):
    """(operator name, type of its first input) for every operator, read with TFLite's schema."""
    from tensorflow.lite.python import schema_py_generated as schema

    type_names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    return [
        (name, type_names[subgraph.Tensors(op.Inputs(0)).Type()]) for name, subgraph, op in flatbuffer_operators(path)
    ]


def test_int8_matmul_quantises_every_matmul_and_keeps_accuracy(digits):
    path = digits.out / "model_int8_matmul.tflite"
    types = op_input_types(path)
    by_op = {}
    for name, dtype in types:
        by_op.setdefault(name, set()).add(dtype)
    # Every product with weights reads int8 activations; LayerNorm, GELU, softmax and the attention's
    # activation x activation products stay float; the interface stays float32.
    assert by_op["FULLY_CONNECTED"] == {"INT8"} and by_op["CONV_2D"] == {"INT8"}
    for name in ("MEAN", "RSQRT", "GELU", "SOFTMAX", "BATCH_MATMUL"):
        assert by_op[name] == {"FLOAT32"}, (name, by_op[name])
    assert types[0] == ("QUANTIZE", "FLOAT32")
    logits = run_tflite(path, digits.x)
    agreement = np.mean(logits.argmax(-1) == digits.keras_logits.argmax(-1))
    keras_accuracy = np.mean(digits.keras_logits.argmax(-1) == digits.labels)
    accuracy = np.mean(logits.argmax(-1) == digits.labels)
    assert agreement >= 0.99 and 100 * (keras_accuracy - accuracy) <= 1.0, (agreement, keras_accuracy, accuracy)
    entry = next(a for a in digits.report["artifacts"] if a["name"] == path.name)
    assert entry["project_preprocessing"]["top1_accuracy"] == pytest.approx(accuracy) and entry["passed"]


def test_other_quantized_models_within_budget(digits):
    keras_top1 = digits.keras_logits.argmax(-1)
    for mode in ("float16", "dynamic_int8"):
        logits = run_tflite(digits.out / f"model_{mode}.tflite", digits.x)
        assert_within_budget(mode, logits.argmax(-1), keras_top1, digits.labels)
    probabilities16 = run_tflite(digits.out / "model_float16.tflite", digits.x)
    assert np.abs(probabilities16 - softmax(digits.keras_logits.astype(np.float64))).max() <= 1e-2


def test_every_tflite_artifact_has_builtin_ops_only(digits):
    files = sorted(digits.out.glob("*.tflite"))
    assert len(files) == 5
    for path in files:
        ops = flatbuffer_ops(path)
        assert ops and not [op for op in ops if op.startswith("CUSTOM")], (path.name, set(ops))
        # export.read_ops must report the same list as TFLite's own analyzer prints.
        text = io.StringIO()
        import tensorflow as tf

        with contextlib.redirect_stdout(text):
            tf.lite.experimental.Analyzer.analyze(model_path=str(path))
        analyzed = re.findall(r"Op#\d+ (\w+)\(", text.getvalue())
        counted = export.read_ops(path.read_bytes())
        assert sorted(analyzed) == sorted(op for op, n in counted.items() for _ in range(n)) == sorted(ops)


def test_tflite_sidecar_records_labels_and_preprocessing(digits):
    info = json.loads((digits.out / "model_int8.json").read_text())
    assert info["labels"] == [str(i) for i in range(10)]
    assert info["preprocessing"]["resize"]["size"] == [16, 16]
    assert info["preprocessing"]["center"] == 127.5 and info["preprocessing"]["divisor"] == 127.5
    assert info["input"]["shape"] == [1, 16, 16, 3]  # batch 1 by default
    assert info["output"]["meaning"] == "probabilities" and info["metadata"] is True


def test_saved_model_serves_uint8_images_of_two_sizes(digits):
    import tensorflow as tf

    serving = tf.saved_model.load(str(digits.out / "saved_model")).signatures["serving_default"]
    for height, width in ((40, 40), (23, 31)):
        big = tf.image.resize(digits.images[:60].astype(np.float32), (height, width)).numpy()
        big = np.clip(np.round(big), 0, 255).astype(np.uint8)
        out = serving(images=tf.constant(big))
        # The Keras model on the same images resized to its input size (the preprocessing contract).
        resized = tf.image.resize(big.astype(np.float32), (16, 16), method="bilinear").numpy()
        expected = digits.model.predict((resized - 127.5) / 127.5, verbose=0).argmax(-1)
        assert np.array_equal(out["top_k_ids"].numpy()[:, 0], expected)
        assert np.abs(out["logits"].numpy() - digits.model.predict((resized - 127.5) / 127.5, verbose=0)).max() < 1e-4
        labels = out["top_k_labels"].numpy()[:, 0].astype(str)
        assert list(labels) == [str(i) for i in expected]
        np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, atol=1e-5)
    assets = digits.out / "saved_model" / "assets"
    assert (assets / "labels.txt").read_text().split() == [str(i) for i in range(10)]
    assert json.loads((assets / "preprocessing.json").read_text())["preprocessing"]["divisor"] == 127.5


def test_predict_on_every_artifact_kind(digits, tmp_path, capsys):
    from PIL import Image

    files = []
    for i in range(3):
        files.append(tmp_path / f"digit{i}.png")
        Image.fromarray(digits.images[i]).save(files[-1])
    expected = [str(c) for c in digits.keras_logits[:3].argmax(-1)]
    for artifact in ("model.keras", "export/saved_model", "export/model_float32.tflite", "export/model_int8.tflite",
                     "export/model.onnx", "export/model.xml"):  # fmt: skip
        assert cli(["predict", str(digits.workdir / artifact), *map(str, files), "--top-k", "3"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 3 * 4
        top1 = [lines[4 * i + 1].split()[0] for i in range(3)]
        if "int8" not in artifact:
            assert top1 == expected, artifact
        else:  # what LiteRT itself gives for the same images, and within the int8 budget of Keras' top-1
            assert top1 == [str(c) for c in run_tflite(digits.workdir / artifact, digits.x[:3]).argmax(-1)]
            assert_within_budget("int8", np.array(top1, int), np.array(expected, int))


def test_cli_export_prints_table_and_paths(digits, tmp_path, capsys):
    code = cli([str(digits.workdir), "--out", str(tmp_path / "out"), "--formats", "tflite", "--quantize",
                "float32", "--latency-runs", "3"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    assert "model_float32.tflite" in printed and "status: PASSED" in printed
    assert str(tmp_path / "out" / "model_float32.tflite") in printed
    assert str(tmp_path / "out" / "report.json") in printed


def test_every_tflite_runs_fully_on_the_gpu(digits):
    """LiteRT's GPU accelerator (SwiftShader, installed by .ci/run) takes every op of every mode, within the mode's
    budget; the class-token slice has no shrink-axis mask, a form the GPU delegate leaves to the CPU."""
    from tensorflow.lite.python import schema_py_generated as schema

    for entry in (a for a in digits.report["artifacts"] if a["format"] == "tflite"):
        g = entry["gpu"]
        assert g["verdict"] == "fully accelerated", (entry["name"], g["verdict"])
        assert g["within_budget"], (entry["name"], g["misses"])
    for name in ("model_float32.tflite", "model_float16.tflite"):
        model = schema.ModelT.InitFromPackedBuf(bytearray((digits.out / name).read_bytes()), 0)
        strided_slice = schema.BuiltinOperator.STRIDED_SLICE
        codes = model.operatorCodes
        slices = [op for op in model.subgraphs[0].operators if codes[op.opcodeIndex].builtinCode == strided_slice]
        assert slices and all(op.builtinOptions.shrinkAxisMask == 0 for op in slices)
