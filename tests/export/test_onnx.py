"""ONNX and OpenVINO artifacts: one small model built with dynamic_image_size=True, exported once for the module,
and checked with onnxruntime's and OpenVINO's own APIs against the Keras model's logits computed here."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

import export
from export.__main__ import main as cli
from tests.support.export_fixtures import random_classifier

pytestmark = pytest.mark.slow  # one export of the two formats (~30 s on 2 cores)

LABELS = [f"class {i}" for i in range(10)]
TOLERANCE = 1e-4  # relative to max(1, max |Keras logit|), as the export's budget


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = random_classifier("testing", dynamic_image_size=True)  # 32x32, patch 8
    out = tmp_path_factory.mktemp("onnx") / "export"
    options = export.ExportOptions(formats="onnx,openvino", latency_runs=3)
    report = export.export_model(export.ExportSource(model, labels=LABELS), out, options)
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    return SimpleNamespace(model=model, out=out, report=report, pixels=pixels, x=(pixels - 127.5) / 127.5)


def keras_logits(model, x):
    return np.asarray(model(np.asarray(x, np.float32), training=False), np.float64)


def relative_diff(outputs, reference):
    return np.abs(np.asarray(outputs, np.float64) - reference).max() / max(1.0, np.abs(reference).max())


def onnxruntime_run(path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    return session.run(None, {inp.name: np.asarray(x, np.float32)})[0]


def openvino_run(path, x):
    import openvino as ov

    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(np.asarray(x, np.float32))[compiled.outputs[0]]


RUNTIMES = {"model.onnx": onnxruntime_run, "model.xml": openvino_run}


@pytest.mark.parametrize("name", sorted(RUNTIMES))
@pytest.mark.parametrize("batch", [1, 3])
def test_runtime_matches_keras_at_batch_1_and_3(exported, name, batch):
    x = exported.x[:batch]
    assert relative_diff(RUNTIMES[name](exported.out / name, x), keras_logits(exported.model, x)) <= TOLERANCE


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_takes_another_image_size(exported, name):
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (2, 48, 40, 3))  # multiples of the patch, not the trained 32x32
    reference = keras_logits(exported.model, x)
    assert relative_diff(RUNTIMES[name](exported.out / name, x), reference) <= TOLERANCE


def test_report_verified_both_formats(exported):
    by_name = {a["name"]: a for a in exported.report["artifacts"]}
    assert sorted(by_name) == ["model.onnx", "model.xml"] and exported.report["passed"]
    assert sorted(exported.report["files"]) == ["model.bin", "model.onnx", "model.xml"]
    for entry in by_name.values():
        assert entry["max_rel_logit_diff"] <= TOLERANCE and entry["top1_agreement"] == 1.0
        assert entry["input_shape"] == ["batch", "height", "width", 3]
        assert entry["dynamic_batch"]["batches"] == [1, 3] and entry["dynamic_batch"]["max_rel_logit_diff"] <= 1e-4
        assert entry["dynamic_image_size"]["size"] == [48, 40]
        assert entry["dynamic_image_size"]["max_rel_logit_diff"] <= TOLERANCE
        assert entry["threads"] == 1 and entry["latency_ms"] > 0 and entry["contract_in_file"]
    assert by_name["model.onnx"]["opset"]["ai.onnx"] == 17
    assert by_name["model.xml"]["inference_precision"] == "f32"
    assert any(op.startswith("MatMul") for op in by_name["model.xml"]["ops"])
    table = export.format_table(exported.report)
    assert "model.onnx" in table and "opset" in table and "status: PASSED" in table


def test_labels_and_input_contract_travel_with_the_files(exported):
    import onnx
    import openvino as ov

    props = {p.key: p.value for p in onnx.load(str(exported.out / "model.onnx")).metadata_props}
    ov_model = ov.Core().read_model(str(exported.out / "model.xml"))
    ov_info = {k: ov_model.get_rt_info(["keras_vit", k]).astype(str) for k in ("labels", "input", "output")}
    for documents in ({k: props[f"keras_vit.{k}"] for k in ("labels", "input", "output")}, ov_info):
        assert json.loads(documents["labels"]) == LABELS
        contract = json.loads(documents["input"])
        assert contract["layout"] == "NHWC" and contract["range"] == [-1.0, 1.0] and contract["dtype"] == "float32"
        assert contract["image_size"] == [32, 32] and contract["dynamic_image_size"] is True
        assert json.loads(documents["output"])["meaning"] == "logits"
    assert [o.name for o in onnx.load(str(exported.out / "model.onnx")).graph.output] == ["logits"]


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_predict_cli_runs_the_file(exported, name, tmp_path, capsys):
    from PIL import Image

    path = tmp_path / "image.png"
    Image.fromarray(exported.pixels[0]).save(path)
    assert cli(["predict", str(exported.out / name), str(path), "--top-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    logits = keras_logits(exported.model, exported.x[:1])[0]
    probabilities = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    top = np.argsort(-probabilities)[:3]
    assert lines[0] == str(path) and len(lines) == 4
    for line, index in zip(lines[1:], top):
        got_index, got_probability, *label = line.split()
        assert int(got_index) == index and " ".join(label) == LABELS[index]
        assert float(got_probability) == pytest.approx(probabilities[index], abs=1e-4)


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_corrupted_file_is_one_line_error(exported, name, tmp_path, capsys):
    from PIL import Image

    image = tmp_path / "image.png"
    Image.fromarray(exported.pixels[0]).save(image)
    broken = tmp_path / name
    broken.write_bytes((exported.out / name).read_bytes()[:500])
    if name == "model.xml":
        (tmp_path / "model.bin").write_bytes((exported.out / "model.bin").read_bytes())
    assert cli(["predict", str(broken), str(image)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and str(broken) in err[0], err
