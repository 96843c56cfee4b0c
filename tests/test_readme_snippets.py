"""README's pretrained-weights snippet runs as written once its checkpoint is in the cache, with no network.

The released Ti/16 file is stood in for by a random Ti/16 checkpoint of the same layout and shapes, placed where
the download would put it; the bucket endpoint points at a closed port, so any download attempt fails the run.
"""

import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT


def _snippet(heading):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index(heading) :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_pretrained_snippet_runs_from_the_cache(tmp_path):
    import keras_vit
    from keras_vit.weights import catalogue, sources

    code = _snippet("### Pretrained weights")
    names = set(re.findall(r'from_pretrained\("([^"]+)"', code))
    assert names, "the snippet loads nothing"
    cache = tmp_path / "cache"
    env_cache = {"KERAS_VIT_CACHE": str(cache)}
    rng = np.random.default_rng(0)
    for name in names:
        entry = catalogue.get(name)
        model = keras_vit.create_model(entry.variant, image_size=entry.image_size, num_classes=entry.num_classes)
        for w in model.weights:
            w.assign(rng.normal(0, 0.02, w.shape).astype("float32"))
        target = sources.entry_cache_path(entry).replace(sources.download.cache_dir(), str(cache), 1)
        keras_vit.save_pretrained(model, target, format="npz")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    env = {**os.environ, **env_cache, catalogue.GCS_ENDPOINT_ENV: closed, "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Prediction(index=" in result.stdout
    assert (tmp_path / "vit_ti16_384" / "model.safetensors").exists()
