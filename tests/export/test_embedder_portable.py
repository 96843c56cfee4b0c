"""ONNX and OpenVINO image embedders (export/interchange/portable.py `check`, the classifiers' check with the
embedder's figures):
a head-less model exported once for the module through `export.export_model`, then run with onnxruntime's and
OpenVINO's own APIs and compared with the Keras features computed here (numpy cosines and norms); the L2-normalised,
pre_logits and dynamic-image-size forms on one more small conversion."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

import export
from export import interchange
from export.__main__ import main as cli
from export.interchange import portable

pytestmark = pytest.mark.slow  # one export of the two formats, one more ONNX conversion (~30 s on 2 cores)

FILES = ("embedder.onnx", "embedder.xml")
FLOOR = 0.9999  # the float32 cosine budget (export.kinds.embedder.BUDGETS["float32"])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    import keras

    import keras_vit

    keras.utils.set_random_seed(0)
    model = keras_vit.create_model("testing", num_classes=0)  # 32x32, 32 features
    folder = tmp_path_factory.mktemp("embedder_portable")
    pixels = np.random.default_rng(0).integers(0, 256, (12, 32, 32, 3), dtype=np.uint8)
    report = export.export_model(export.ExportSource(model, heldout=(pixels, None)), folder / "export",
                                 export.ExportOptions(formats="saved_model,onnx,openvino", latency_runs=2))  # fmt: skip
    return SimpleNamespace(model=model, out=folder / "export", report=report, pixels=pixels,
                           x=((pixels - 127.5) / 127.5).astype(np.float32))  # fmt: skip


def cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def keras_features(model, x):
    return np.asarray(model(np.asarray(x, np.float32), training=False), np.float64)


def onnxruntime_run(path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert out.name == "embedding"
    return session.run(None, {inp.name: np.asarray(x, np.float32)})[0]


def openvino_run(path, x):
    import openvino as ov

    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert compiled.outputs[0].get_names() == {"embedding"}
    return compiled(np.asarray(x, np.float32))[compiled.outputs[0]]


RUNTIMES = {"embedder.onnx": onnxruntime_run, "embedder.xml": openvino_run}


def file_contract(path):
    """{key: parsed JSON} of the keras_vit documents in an ONNX file's metadata_props or an IR's rt_info."""
    if str(path).endswith(".onnx"):
        import onnx

        props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
        return {k[len("keras_vit.") :]: json.loads(v) for k, v in props.items() if k.startswith("keras_vit.")}
    import openvino as ov

    model = ov.Core().read_model(str(path))
    keys = ("labels", "input", "output", "preprocessing")
    return {k: json.loads(model.get_rt_info(["keras_vit", k]).astype(str)) for k in keys
            if model.has_rt_info(["keras_vit", k])}  # fmt: skip


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("batch", [1, 3, 12])
def test_runtime_vectors_match_keras(exported, name, batch):
    x = exported.x[:batch]
    vectors, reference = RUNTIMES[name](exported.out / name, x), keras_features(exported.model, x)
    assert vectors.shape == reference.shape == (batch, 32)
    similarity = cosine(vectors, reference)
    print(f"{name} batch {batch}: min cosine with Keras 1 - {1 - similarity.min():.1e}")
    assert similarity.min() >= FLOOR
    np.testing.assert_allclose(vectors, reference, rtol=1e-4, atol=1e-5)  # the vector itself, not only its direction


def test_random_vectors_are_checked_centred_too(exported):
    """Centred on their mean the vectors still agree: a cosine near 1 can say little where vectors share a
    direction (random networks' did while their attention projections started equal: mean neighbour cosine > 0.8)."""
    reference = keras_features(exported.model, exported.x)
    centre = reference.mean(0)
    for name, run in RUNTIMES.items():
        assert cosine(run(exported.out / name, exported.x) - centre, reference - centre).min() >= FLOOR, name


@pytest.mark.parametrize("name", FILES)
def test_file_says_it_is_a_feature_vector(exported, name):
    contract = file_contract(exported.out / name)
    assert "labels" not in contract
    output = contract["output"]
    assert output["meaning"] == "embedding" and output["kind"] == "feature_vector" and output["name"] == "embedding"
    assert output["dimensions"] == 32 and output["l2_normalized"] is False and output["quantization"] == "float32"
    assert contract["input"]["layout"] == "NHWC" and contract["input"]["range"] == [-1.0, 1.0]
    assert contract["input"]["image_size"] == [32, 32]


def test_report_verified_both_files(exported):
    report = exported.report
    assert report["passed"] and report["kind"] == "embedder"
    assert [a["name"] for a in report["artifacts"]] == list(FILES)
    assert sorted(report["files"]) == ["embedder.bin", "embedder.onnx", "embedder.xml"]
    assert "saved_model not written" in " ".join(report["notes"])
    reference = keras_features(exported.model, exported.x)
    for entry in report["artifacts"]:
        measured = cosine(RUNTIMES[entry["name"]](exported.out / entry["name"], exported.x), reference).min()
        assert entry["min_cosine"] == pytest.approx(measured, abs=1e-6) and entry["min_cosine"] >= FLOOR
        assert entry["dimensions"] == 32 and entry["l2_normalized"] is False and entry["contract_in_file"]
        assert entry["dynamic_batch"]["batches"] == [1, 3] and entry["dynamic_batch"]["min_cosine"] >= FLOOR
        assert entry["input_shape"] == ["batch", 32, 32, 3] and entry["threads"] == 1 and entry["latency_ms"] > 0
    by_name = {a["name"]: a for a in report["artifacts"]}
    assert by_name["embedder.onnx"]["opset"]["ai.onnx"] == 17
    assert by_name["embedder.xml"]["inference_precision"] == "f32"
    table = export.format_table(report)
    assert "embedder.onnx" in table and "output `embedding`: 32 float32 values, not L2-normalised" in table
    assert "status: PASSED" in table


@pytest.mark.parametrize("name", FILES)
def test_cli_predict_prints_size_and_norm_and_similar_compares(exported, name, tmp_path, capsys):
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(exported.pixels[i]).save(paths[-1])
    reference = keras_features(exported.model, exported.x[:2])
    assert cli(["predict", str(exported.out / name), str(paths[0])]) == 0
    printed = capsys.readouterr().out
    assert f"embedding: 32 values, L2 norm {np.linalg.norm(reference[0]):.4f}" in printed, printed
    assert cli(["similar", str(exported.out / name), str(paths[0]), str(paths[1])]) == 0
    value = float(capsys.readouterr().out.split()[2])
    assert value == pytest.approx(cosine(reference[0], reference[1]), abs=2e-6)


def test_l2_normalised_pre_logits_embedder_keeps_an_open_image_size(tmp_path):
    """A pre_logits model built with dynamic_image_size=True, written L2-normalised: unit vectors, the Keras
    direction at the trained size and at another, and a file that says l2_normalized."""
    import keras

    import keras_vit
    from export.description import describe
    from export.kinds import embedder as kind
    from keras_vit.models.vision_transformer import fixed_size_model

    keras.utils.set_random_seed(1)
    model = keras_vit.create_model("testing", num_classes=0, representation_size=16, dynamic_image_size=True)
    described = describe(kind, fixed_size_model(model), dynamic_image_size=True, l2_normalize=True)
    x = np.random.default_rng(2).uniform(-1, 1, (4, 32, 32, 3)).astype(np.float32)
    _, _, runner = interchange.write("onnx", model, described, tmp_path, name="embedder.onnx")
    found, failures, fields = portable.check(kind, runner, x, {"embedding": keras_features(model, x)}, None,
                                             kind.BUDGETS["float32"], described, dynamic_model=model)  # fmt: skip
    assert not failures and found["min_cosine"] >= FLOOR, failures
    assert fields["dynamic_image_size"]["size"] == [48, 40] and fields["input_shape"] == ["batch", "height", "width", 3]
    path = tmp_path / "embedder.onnx"
    assert file_contract(path)["output"]["l2_normalized"] is True and file_contract(path)["output"]["dimensions"] == 16
    for size in ((32, 32), (48, 40)):
        images = np.random.default_rng(3).uniform(-1, 1, (3, *size, 3)).astype(np.float32)
        vectors, reference = onnxruntime_run(path, images), keras_features(model, images)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5)
        assert vectors.shape == (3, 16) and cosine(vectors, reference).min() >= FLOOR, size
