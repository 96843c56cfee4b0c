"""Feature maps on export (export/kinds/feature_maps.py, export/tflite/converter.py, export/saved_model.py): a
several-output
keras_vit.feature_model to SavedModel and TFLite.

Each output is read back by name from the runtime that runs it (LiteRT's interpreter through the file's signature,
the SavedModel reloaded) and checked against the blocks' outputs read with `model.get_layer(...)`: another path
through Keras than the feature model's, and none of the exporter's code. The blocks are asked for out of order, and a
block's patches and prefix tokens differ in shape while blocks 0 and 2 differ in value, so outputs swapped or
mapped by position cannot pass.
"""

import json

import keras
import numpy as np
import pytest

import export
import keras_vit
from export.__main__ import main as cli
from export.description import describe
from export.kinds import feature_maps
from export.saved_model import SavedModelRunner
from export.tflite.converter import convert_described
from export.tflite.runner import TFLiteRunner

GRID = (3, 5)  # 24 x 40 pixels, patch 8: a non-square grid
BLOCKS = (2, 0)  # out of order: the model's order is not the names' sorted order
NAMES = ["encoderblock_2", "encoderblock_2_prefix", "encoderblock_0", "encoderblock_0_prefix"]
MODES = ("float32", "float16", "dynamic_int8", "int8_matmul")
OTHER = dict(zip(NAMES, ["encoderblock_0", "encoderblock_0_prefix", "encoderblock_2", "encoderblock_2_prefix"]))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A random 3-block ViT, its feature model (blocks 2 and 0, NHWC, prefix tokens), exported once in MODES."""
    keras.utils.set_random_seed(0)
    model = keras_vit.create_model("testing", image_size=(24, 40), num_layers=3, num_classes=4)
    features = keras_vit.feature_model(model, blocks=BLOCKS, output="NHWC", return_prefix_tokens=True)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (8, 24, 40, 3), dtype=np.uint8)
    calibration = rng.integers(0, 256, (16, 24, 40, 3), dtype=np.uint8)
    folder = tmp_path_factory.mktemp("feature_maps")
    source = export.ExportSource(features, representative_images=calibration, heldout=(pixels, None), name="tiny")
    options = export.ExportOptions(formats="saved_model,tflite", quantize=",".join(MODES), latency_runs=2)
    report = export.export_model(source, folder / "export", options)
    return model, features, pixels, folder / "export", report


def block_outputs(model, pixels):
    """{name: array} from the blocks' own outputs (`get_layer`), split by hand: the independent reference."""
    x = (pixels.astype(np.float32) - 127.5) / 127.5
    names = [f"encoderblock_{b}" for b in BLOCKS]
    tokens = keras.Model(model.input, [model.get_layer(n).output for n in names]).predict(x, verbose=0)
    out = {}
    for name, t in zip(names, tokens):
        out[name] = t[:, 1:].reshape(len(x), *GRID, t.shape[-1])
        out[name + "_prefix"] = t[:, :1]
    return out


def assert_close(got, want, tol):
    assert np.shape(got) == np.shape(want)
    scale = max(1.0, float(np.abs(want).max()))
    assert float(np.abs(np.asarray(got, np.float64) - want).max()) <= tol * scale


@pytest.mark.slow
def test_the_reference_tells_the_outputs_apart(exported):
    model, _, pixels, _, _ = exported
    ref = block_outputs(model, pixels)
    assert ref["encoderblock_0"].shape == ref["encoderblock_2"].shape == (8, *GRID, 32)
    assert ref["encoderblock_0_prefix"].shape == (8, 1, 32)
    assert np.abs(ref["encoderblock_0"] - ref["encoderblock_2"]).max() > 0.1  # a swap of the two would show
    assert np.abs(ref["encoderblock_0_prefix"] - ref["encoderblock_2_prefix"]).max() > 0.1


@pytest.mark.slow
def test_tflite_outputs_read_by_name_equal_the_blocks(exported):
    model, _, pixels, out, _ = exported
    ref = block_outputs(model, pixels)
    x = (pixels.astype(np.float32) - 127.5) / 127.5
    for mode in MODES:
        runner = TFLiteRunner((out / f"feature_maps_{mode}.tflite").read_bytes(), by_signature=True)
        assert sorted(runner.names) == sorted(NAMES)
        got = runner.outputs(x)
        for name in NAMES:
            if mode == "float32":
                assert_close(got[name], ref[name], 1e-4)
            else:  # the quantised files: each name still holds its own block (cosines in the report)
                assert np.shape(got[name]) == np.shape(ref[name])
                other = ref[OTHER[name]]
                assert np.abs(got[name] - ref[name]).max() < np.abs(got[name] - other).max(), (mode, name)


@pytest.mark.slow
def test_saved_model_reloaded_gives_the_blocks_by_name(exported):
    model, _, pixels, out, _ = exported
    ref = block_outputs(model, pixels)
    runner = SavedModelRunner(out / "saved_model")
    x = (pixels.astype(np.float32) - 127.5) / 127.5
    for got in (runner.outputs(x), runner.outputs_from_images(pixels)):  # model_space, serving_default
        assert sorted(got) == sorted(NAMES)
        for name in NAMES:
            assert_close(got[name], ref[name], 1e-4)
    # Raw images of another size are resized inside serving_default: one size in, the model's grid out.
    bigger = np.repeat(np.repeat(pixels[:2], 2, axis=1), 2, axis=2)
    assert runner.outputs_from_images(bigger)["encoderblock_2"].shape == (2, *GRID, 32)


@pytest.mark.slow
def test_sidecar_maps_each_name_to_where_tflite_put_it(exported):
    _, _, _, out, _ = exported
    flatbuffer = (out / "feature_maps_float32.tflite").read_bytes()
    info = json.loads((out / "feature_maps_float32.json").read_text())
    assert [o["name"] for o in info["outputs"]] == NAMES  # the model's order
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=flatbuffer)
    details = interpreter.get_output_details()
    signature = interpreter.get_signature_runner("serving_default").get_output_details()
    for o in info["outputs"]:
        assert details[o["subgraph_output"]]["index"] == o["tensor_index"] == signature[o["name"]]["index"]
        assert list(details[o["subgraph_output"]]["shape"]) == o["shape"]
    # TFLite did not keep the model's order (docs/export.md says so): a read by position would get other blocks.
    assert [o["subgraph_output"] for o in info["outputs"]] != list(range(len(NAMES)))
    assert info["outputs"][0]["shape"] == [1, *GRID, 32] and info["outputs"][1]["shape"] == [1, 1, 32]
    assert info["outputs"][0]["meaning"] == "patch map (NHWC) of encoderblock_2, (batch, 3, 5, 32)"


@pytest.mark.slow
def test_litert_compiled_model_reads_the_outputs_by_name(exported):
    """LiteRT's CompiledModel (the API after the interpreter) runs the file by the signature's names too."""
    from ai_edge_litert.compiled_model import CompiledModel, HardwareAccelerator

    model, _, pixels, out, _ = exported
    ref = block_outputs(model, pixels[:1])
    path = str(out / "feature_maps_float32.tflite")
    compiled = CompiledModel.from_file(path, hardware_accel=HardwareAccelerator.CPU)
    inputs = {"images": compiled.create_input_buffer_by_name("serving_default", "images")}
    outputs = {name: compiled.create_output_buffer_by_name("serving_default", name) for name in NAMES}
    inputs["images"].write(np.ascontiguousarray((pixels[:1].astype(np.float32) - 127.5) / 127.5))
    compiled.run_by_name("serving_default", inputs, outputs)
    for name in NAMES:
        got = outputs[name].read(ref[name].size, np.float32).reshape(ref[name].shape)
        assert_close(got, ref[name], 1e-4)


@pytest.mark.slow
def test_report_lists_every_file_and_output(exported):
    _, _, _, out, report = exported
    assert report["passed"] and report["kind"] == "feature_maps"
    assert [a["name"] for a in report["artifacts"]] == ["saved_model", *(f"feature_maps_{m}.tflite" for m in MODES)]
    for a in report["artifacts"]:
        assert sorted(a["outputs"]) == sorted(NAMES) and a["passed"]
        assert a["budget"] == feature_maps.BUDGETS[a["quantization"] or "saved_model"]
        assert a["min_cosine"] >= a["budget"]["min_cosine"]
    listed = set(report["files"])
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {"report.json"}
    assert listed == on_disk and {f"feature_maps_{m}.json" for m in MODES} <= listed
    assert json.loads((out / "report.json").read_text())["artifacts"][0]["outputs"].keys() == set(NAMES)
    table = export.format_table(report)
    assert "(feature maps)" in table and "status: PASSED" in table and "GPU check not run" in table


@pytest.mark.slow
def test_swapped_outputs_fail_the_verification(exported):
    model, _, pixels, _, _ = exported
    ref = block_outputs(model, pixels)
    budget = feature_maps.BUDGETS["float32"]
    assert feature_maps.check_budget(feature_maps.compare(ref, ref), budget) == []
    blocks = {**ref, "encoderblock_0": ref["encoderblock_2"], "encoderblock_2": ref["encoderblock_0"]}
    failures = feature_maps.check_budget(feature_maps.compare(blocks, ref), budget)
    assert {f.split(":")[0] for f in failures} == {"encoderblock_0", "encoderblock_2"}
    prefix = {**ref, "encoderblock_0": ref["encoderblock_0_prefix"], "encoderblock_0_prefix": ref["encoderblock_0"]}
    failures = feature_maps.check_budget(feature_maps.compare(prefix, ref), budget)
    assert failures == [
        "encoderblock_0: shape (8, 1, 32) != Keras (8, 3, 5, 32)",
        "encoderblock_0_prefix: shape (8, 3, 5, 32) != Keras (8, 1, 32)",
    ]
    renamed = {"block_0" if k == "encoderblock_0" else k: v for k, v in ref.items()}
    failures = feature_maps.check_budget(feature_maps.compare(renamed, ref), budget)
    assert failures == ["encoderblock_0: the artifact lacks it", "block_0: Keras has no output of that name"]


@pytest.mark.slow
def test_full_integer_int8_misses_what_int8_matmul_keeps(exported):
    """Why int8 is refused (feature_maps.REFUSED): on this model its tokens drift well below the budget that the
    int8_matmul file, calibrated on the same images, meets."""
    model, features, pixels, out, _ = exported
    ref = block_outputs(model, pixels)
    rng = np.random.default_rng(0)
    rng.integers(0, 256, pixels.shape, dtype=np.uint8)
    calibration = rng.integers(0, 256, (16, 24, 40, 3), dtype=np.uint8)  # the fixture's, drawn again
    x = (pixels.astype(np.float32) - 127.5) / 127.5
    worst = {}
    described = describe(feature_maps, features)
    for mode, flatbuffer in (("int8", convert_described(features, described, "int8", calibration)),
                             ("int8_matmul", (out / "feature_maps_int8_matmul.tflite").read_bytes())):  # fmt: skip
        figures = feature_maps.compare(TFLiteRunner(flatbuffer, by_signature=True).outputs(x), ref)
        worst[mode] = min(f["min_cosine"] for f in figures.values())
    assert worst["int8"] < 0.95 < feature_maps.BUDGETS["int8_matmul"]["min_cosine"] <= worst["int8_matmul"], worst


@pytest.mark.slow
@pytest.mark.parametrize(
    "options, message",
    [
        (
            dict(quantize="float32,int8"),
            r"Feature maps export as TFLite float32, float16, dynamic_int8, int8_matmul; "
            r"int8 is not offered: .*use int8_matmul",
        ),
        (dict(quantize="int4_weights"), r"int4_weights is not offered"),
        (dict(formats="onnx"), r"exports as saved_model and tflite only; --formats asks for onnx"),
        (dict(gpu_check="require"), r"feature-map files are not run on the GPU check"),
    ],
)
def test_requests_it_cannot_meet_fail_in_one_line(exported, tmp_path, options, message):
    _, features, _, _, _ = exported
    with pytest.raises(export.ExportError, match=message) as err:
        export.export_model(features, tmp_path / "out", export.ExportOptions(**options))
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_predict_refuses_feature_map_files_in_one_line(exported):
    _, _, pixels, out, _ = exported
    for path, what in ((out / "feature_maps_float32.tflite", "is a feature-map file"),
                       (out / "saved_model", "is a feature-map SavedModel")):  # fmt: skip
        with pytest.raises(export.ExportError, match=f"{what} .*predict and similar take classifiers") as err:
            export.predict(path, [pixels[0]])
        assert "\n" not in str(err.value)


def test_dynamic_image_size_feature_model_is_refused_in_one_line(tmp_path):
    model = keras_vit.create_model("testing", dynamic_image_size=True)
    features = keras_vit.feature_model(model, blocks=(0, 1))
    with pytest.raises(export.ExportError, match=r"at one image size.*fixed_size_model") as err:
        export.export_model(features, tmp_path / "out")
    assert "\n" not in str(err.value)


def test_what_goes_where():
    keras.utils.set_random_seed(1)
    model = keras_vit.create_model("testing", num_classes=0)
    assert not feature_maps.is_feature_maps(model)  # a pooled vector: an image embedder
    assert feature_maps.is_feature_maps(keras_vit.feature_model(model))  # one output, a feature map
    assert not feature_maps.is_feature_maps(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))


@pytest.mark.slow
def test_keras_file_exports_through_the_command_line(exported, tmp_path, capsys):
    """The feature model's .keras file through `python -m export`, as a user runs it (float32 with an open batch,
    SavedModel)."""
    _, features, pixels, _, _ = exported
    features.save(tmp_path / "features.keras")
    assert cli([str(tmp_path / "features.keras"), "--formats", "saved_model,tflite", "--quantize", "float32",
                "--dynamic-batch", "--latency-runs", "1", "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    assert "(feature maps)" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["passed"]
    assert [a["name"] for a in report["artifacts"]] == ["saved_model", "feature_maps_float32.tflite"]
    assert json.loads((tmp_path / "out" / "feature_maps_float32.json").read_text())["input"]["shape"][0] == -1
    runner = TFLiteRunner((tmp_path / "out" / "feature_maps_float32.tflite").read_bytes(), by_signature=True)
    assert runner.dynamic_batch
    x = (pixels.astype(np.float32) - 127.5) / 127.5
    expected = dict(zip(NAMES, features.predict(x, verbose=0)))
    for name in NAMES:
        assert_close(runner.outputs(x)[name], expected[name], 1e-4)
