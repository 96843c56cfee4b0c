"""benchmarks/export_gpu.py: the GPU check of every TFLite mode, printed per file."""

import json

import pytest

from benchmarks import export_gpu


@pytest.mark.slow
def test_prints_each_files_gpu_verdict(tmp_path, capsys):
    export_gpu.main(["--variant", "testing", "--image-size", "32", "--modes", "float32,dynamic_int8", "--images", "4",
                     "--json", str(tmp_path / "gpu.json")])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("testing at 32 px, random weights")
    rows = {line.split(":")[0]: line for line in out[1:]}
    assert set(rows) == {"model_float32.tflite", "model_dynamic_int8.tflite"}
    entries = json.loads((tmp_path / "gpu.json").read_text())
    for name, line in rows.items():
        verdict = entries[name]["verdict"]
        assert line.startswith(f"{name}: {verdict}")
        if entries[name]["status"] == "ran":  # a Vulkan driver is installed (CI's SwiftShader)
            assert f"{entries[name]['figures']['images']} images" in line
            assert ("within budget" in line) == entries[name]["within_budget"]
        else:
            assert verdict.startswith("not run") and "images" not in line


def test_too_few_images_is_refused(capsys):
    with pytest.raises(SystemExit):
        export_gpu.main(["--images", "1"])
    assert "--images must be at least 2" in capsys.readouterr().err
