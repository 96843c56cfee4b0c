"""A Keras-quantized model (`model.quantize`) is refused by the exporter in one line, before any conversion, with
the cause and the fix: no format carries Keras' quantized matmuls faithfully (LiteRT has no kernel for them)."""

import subprocess
import sys
import warnings

import keras
import pytest

import keras_vit
from export import job
from export.errors import ExportError
from tests import support


def _quantized(mode):
    model = keras_vit.create_model("testing", num_classes=3, image_size=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.quantize(mode)
    return model


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_a_quantized_model_is_refused_before_any_conversion(tmp_path, mode, monkeypatch):
    monkeypatch.setattr(job, "_plan", lambda *a: pytest.fail("planned (and converted) a quantized model"))
    with pytest.raises(ExportError, match=f"Keras-quantized \\({mode}") as err:
        job.export_model(_quantized(mode), tmp_path / "out")
    message = str(err.value)
    assert "\n" not in message and "LiteRT" in message and "--quantize" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_cli_refuses_a_quantized_keras_file_in_one_line(tmp_path):
    path = tmp_path / "q.keras"
    _quantized("int8").save(path)
    result = subprocess.run(
        [sys.executable, "-m", "export", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=support.ROOT,
        timeout=600,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Keras-quantized (int8" in lines[0], result.stderr[-2000:]
    assert not (tmp_path / "out").exists()
    assert keras.saving.load_model(path).get_layer("head").quantization_mode == "int8"
