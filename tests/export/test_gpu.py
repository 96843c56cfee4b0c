"""The GPU check (export/tflite/gpu.py): LiteRT's GPU accelerator run on a Vulkan driver, in a child process.

The driver is SwiftShader from Debian's chromium package, which .ci/run installs (`apt-get install chromium
libvulkan1`); these tests need it and fail, not skip, without it. References are independent of export/: the Keras
model's own outputs with a numpy softmax, numpy for the hand-built graphs, and LiteRT's CPU interpreter.
"""

import json
import os

import numpy as np
import pytest

import export
from export import kinds
from export.__main__ import main as cli
from export.tflite import gpu
from tests.support import export_fixtures as fx

SWIFTSHADER = "/usr/lib/chromium/vk_swiftshader_icd.json"


def softmax(logits):
    z = np.asarray(logits, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def convert(fn, shape):
    import tensorflow as tf

    concrete = tf.function(fn, input_signature=[tf.TensorSpec(shape, tf.float32, name="images")], autograph=False)
    return tf.lite.TFLiteConverter.from_concrete_functions([concrete.get_concrete_function()]).convert()


@pytest.fixture(scope="module")
def driver():
    found, why = gpu.find_driver()
    assert found is not None, (
        f"no Vulkan driver ({why}): install it as .ci/run does (apt-get install chromium libvulkan1)"
    )
    return found


@pytest.fixture(scope="module")
def exported(tmp_path_factory, driver):
    """One small classifier exported once (float32 and dynamic_int8 TFLite, GPU check on)."""
    model = fx.random_classifier("testing", head_scale=4.0)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (24, 32, 32, 3), dtype=np.uint8)
    out = tmp_path_factory.mktemp("gpu") / "export"
    report = export.export_model(
        export.ExportSource(model, heldout=(images, None)), out,
        export.ExportOptions(formats="tflite", quantize="float32,dynamic_int8", latency_runs=2),
    )  # fmt: skip
    return model, images, out, report


def test_driver_is_found_from_the_environment_first(tmp_path, monkeypatch):
    monkeypatch.delenv(gpu.ICD_ENV, raising=False)
    found, _ = gpu.find_driver()
    assert found == gpu.Driver((SWIFTSHADER,), "chromium's SwiftShader")
    manifest = tmp_path / "mine.json"
    manifest.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": "/nowhere.so"}}))
    monkeypatch.setenv(gpu.ICD_ENV, str(tmp_path))  # a folder: its manifests
    assert gpu.find_driver()[0] == gpu.Driver((str(manifest),), gpu.ICD_ENV)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(gpu.ICD_ENV, str(tmp_path / "empty"))  # set to nothing: no driver, SwiftShader not used
    found, why = gpu.find_driver()
    assert found is None and "names no driver manifest" in why
    monkeypatch.delenv(gpu.ICD_ENV)
    monkeypatch.setattr(gpu, "KNOWN_ICDS", (str(tmp_path / "absent.json"),))
    monkeypatch.setattr(gpu, "SYSTEM_ICD_DIRS", (str(tmp_path / "empty"),))
    assert gpu.find_driver()[0] is None


@pytest.mark.slow
def test_export_runs_every_tflite_on_the_gpu(exported):
    model, images, out, report = exported
    keras_probabilities = softmax(model.predict((images.astype(np.float32) - 127.5) / 127.5, verbose=0))
    for entry in report["artifacts"]:
        g = entry["gpu"]
        assert g["status"] == "ran" and g["verdict"] == "fully accelerated", g
        assert "SwiftShader" in g["adapter"] and g["cpu_ops"] == {}
        assert g["within_budget"] and g["figures"]["images"] == len(images)
        # The report's figure, recomputed from the GPU's own outputs against Keras here.
        result = gpu.run_on_gpu(out / entry["name"], images.astype(np.float32) * np.float32(2 / 255) - 1, g_driver(g))
        diff = np.abs(result["outputs"] - keras_probabilities).max()
        assert diff == pytest.approx(g["figures"]["max_abs_probability_diff"], rel=1e-3, abs=1e-7)
        assert diff < (1e-4 if entry["quantization"] == "float32" else 0.05), (entry["name"], diff)
    table = export.format_table(report)
    assert table.count("GPU (LiteRT GPU accelerator on SwiftShader") == 2 and "fully accelerated" in table


def g_driver(entry):
    return gpu.Driver(tuple(entry["driver"]["icd_files"]), entry["driver"]["source"])


@pytest.mark.slow
def test_ops_the_gpu_refuses_are_named_and_run_on_the_cpu(tmp_path, driver):
    import tensorflow as tf

    def segment_and_argmax(x):
        y = tf.nn.relu(tf.reshape(x, (1, 192)))
        sums = tf.math.unsorted_segment_sum(tf.transpose(y), tf.constant(np.arange(192) % 4), 4)[None, :, 0]
        return {"out": sums + tf.cast(tf.argmax(y, -1), tf.float32)[:, None]}

    path = tmp_path / "odd.tflite"
    path.write_bytes(convert(segment_and_argmax, (1, 8, 8, 3)))
    x = np.random.default_rng(1).normal(size=(3, 8, 8, 3)).astype(np.float32)
    result = gpu.run_on_gpu(path, x, driver)
    assert result["status"] == "ran"
    assert set(result["cpu_ops"]) >= {"UNSORTED_SEGMENT_SUM", "ARG_MAX"}, result["cpu_ops"]
    assert result["nodes_on_cpu"] > 0 and not result["fully_accelerated"]
    assert gpu.verdict(result).startswith("partly accelerated: ") and "UNSORTED_SEGMENT_SUM" in gpu.verdict(result)
    y = np.maximum(x.reshape(3, 192), 0)
    expected = y.reshape(3, 48, 4).sum(1) + y.argmax(-1)[:, None]
    np.testing.assert_allclose(result["outputs"], expected, rtol=1e-5, atol=1e-5)
    # With no time to spare the child still runs one image (a 224 px model takes seconds per image on SwiftShader).
    assert len(gpu.run_on_gpu(path, x, driver, run_seconds=0)["outputs"]) == 1


@pytest.mark.slow
def test_a_wrong_or_crashing_gpu_kernel_is_caught(tmp_path, driver):
    """Measured with LiteRT 2.3 on SwiftShader: the delegate takes CUMSUM, which TF's Analyzer calls supported too,
    and over a (1, 192) tensor returns its input unchanged; over a (1, 4, 4, 3) tensor it kills the process with
    SIGILL. Only the output comparison sees the first, and only the child process survives the second."""
    import tensorflow as tf

    def cumsum(x):
        return {"out": tf.math.cumsum(tf.reshape(x, (1, 192)), axis=-1)}

    path = tmp_path / "cumsum.tflite"
    path.write_bytes(convert(cumsum, (1, 8, 8, 3)))
    x = np.random.default_rng(2).uniform(0, 1, (2, 8, 8, 3)).astype(np.float32)
    result = gpu.run_on_gpu(path, x, driver)
    assert gpu.verdict(result) == "fully accelerated"
    assert np.abs(result["outputs"] - np.cumsum(x.reshape(2, 192), -1)).max() > 10
    np.testing.assert_allclose(result["outputs"], x.reshape(2, 192), atol=1e-6)

    path.write_bytes(convert(lambda x: {"out": tf.math.cumsum(x, axis=-1)}, (1, 4, 4, 3)))
    result = gpu.run_on_gpu(path, x[:, :4, :4], driver)
    assert result["status"] == "failed" and result["reason"].startswith("killed by signal 4"), result["reason"]


@pytest.mark.slow
def test_no_driver_says_not_run_and_require_fails(exported, tmp_path, monkeypatch):
    model, images, out, _ = exported
    runner = export.load_runner(out / "model_float32.tflite")
    reference = model.predict((images.astype(np.float32) - 127.5) / 127.5, verbose=0)
    args = (
        out / "model_float32.tflite",
        runner,
        images,
        {"logits": reference},
        None,
        kinds.classifier,
        {"max_rel_logit_diff": 1e-4},
    )
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(gpu.ICD_ENV, str(tmp_path / "empty"))
    entry = gpu.check_artifact(*args)
    assert entry["status"] == "not run" and entry["verdict"].startswith("not run: no Vulkan driver (")
    assert entry["failures"] == []
    assert gpu.check_artifact(*args, mode="require")["failures"] == [f"GPU: {entry['verdict']}"]
    # A manifest whose driver library does not exist: the child finds no device, which is no driver either.
    manifest = tmp_path / "broken.json"
    manifest.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": "/nowhere/libvk.so"}}))
    monkeypatch.setenv(gpu.ICD_ENV, str(manifest))
    entry = gpu.check_artifact(*args)
    assert entry["status"] == "not run" and "no usable device" in entry["verdict"]
    monkeypatch.setenv(gpu.ICD_ENV, SWIFTSHADER)
    assert gpu.check_artifact(*args, mode="off")["verdict"] == "not run: --gpu-check off"
    # A result outside the budget is reported, and fails the export only under "require".
    wrong = gpu.check_artifact(out / "model_float32.tflite", runner, images, {"logits": np.roll(reference, 1, axis=-1)},
                               None, kinds.classifier, {"min_top1_agreement": 0.99})  # fmt: skip
    assert wrong["status"] == "ran" and not wrong["within_budget"] and wrong["failures"] == []


@pytest.mark.slow
def test_a_crashing_or_hanging_driver_does_not_take_the_export_down(tmp_path, monkeypatch, driver):
    crash = tmp_path / "crash.py"
    crash.write_text("import os\nos.abort()\n")
    monkeypatch.setattr(gpu, "CHILD", crash)
    model = fx.random_classifier("testing", head_scale=4.0, seed=3)
    options = export.ExportOptions(formats="tflite", quantize="float32", latency_runs=2)
    report = export.export_model(model, tmp_path / "out", options)
    entry = report["artifacts"][0]["gpu"]
    assert report["passed"] and entry["status"] == "failed"
    assert entry["verdict"].startswith("failed: killed by signal 6"), entry["verdict"]
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(gpu, "CHILD", hang)
    result = gpu.run_on_gpu(tmp_path / "out" / "model_float32.tflite", np.zeros((1, 32, 32, 3), np.float32), driver, 2)
    assert result["status"] == "failed" and result["reason"] == "timed out after 2 s"


@pytest.mark.slow
def test_cli_require_fails_without_a_driver(exported, tmp_path, monkeypatch, capsys):
    model = exported[0]
    path = tmp_path / "m.keras"
    model.save(path)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(gpu.ICD_ENV, str(tmp_path / "empty"))
    argv = [str(path), "--formats", "tflite", "--quantize", "float32", "--latency-runs", "2", "--out"]
    assert cli([*argv, str(tmp_path / "a")]) == 0
    assert "GPU (LiteRT GPU accelerator): not run: no Vulkan driver" in capsys.readouterr().out
    assert cli([*argv, str(tmp_path / "b"), "--gpu-check", "require"]) == 2
    assert "GPU: not run: no Vulkan driver" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "b")
