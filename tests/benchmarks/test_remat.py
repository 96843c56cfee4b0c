"""benchmarks.remat: what each remat setting keeps for the backward pass, and the batches that fit from it."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import remat
from tests import support

ROOT = str(support.ROOT)
GIB = 2**30


def test_the_largest_batch_is_what_fits_beside_the_fixed_part():
    # 80 GiB - 2 GiB fixed = 78 GiB; at 100 MiB an image: floor(78 * 1024 / 100) = 798
    assert remat.largest_batch(2 * GIB, 100 * 2**20, 80) == 798
    assert remat.largest_batch(90 * GIB, 100 * 2**20, 80) == 0  # the state alone does not fit
    fitted = remat.fit({"batch": 4, "memory": {"total": 3 * GIB}}, {"batch": 8, "memory": {"total": 5 * GIB}})
    assert fitted == {"per_image": GIB / 2, "fixed": 1 * GIB}
    assert remat.largest(fitted) == {"80 GiB": 158, "141 GiB": 280}


def test_a_gpu_runs_records_give_the_batches_that_fit(tmp_path):
    memory = {"argument": GIB, "output": GIB, "alias": GIB, "temp": 16 * GIB, "total": 17 * GIB}
    records = [
        {"label": "kv_jax_remat_elementwise", "argv": ["keras-vit", "--batch", "256"], "memory": memory,
         "peak_gib": 17.5},
        {"label": "timm_compiled", "argv": ["timm", "--batch", "256"], "peak_gib": 17.4},  # no XLA figures: no row
    ]  # fmt: skip
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    text = remat.from_results(str(path))
    # 16 GiB of temporaries over 256 images = 64 MiB an image; (80 - 1) GiB / 64 MiB = 1264; (141 - 1) -> 2240
    assert "| kv_jax_remat_elementwise | 256 | 17.5 | 17.0 (16.0) | 64 | 1264, 2240 |" in text
    assert "timm_compiled" not in text


@pytest.mark.slow
def test_each_setting_keeps_less_than_the_one_before():
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "XLA_FLAGS")}
    env.update(KERAS_BACKEND="jax", PYTHONPATH=ROOT, BLOCK_TF="1")
    argv = ["--variants", "Ti/16", "--image-size", "32", "--dtypes", "bf16"]
    code = f"import sys; sys.modules['tensorflow'] = None; from benchmarks import remat; remat.main({argv!r})"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    kept = {r["setting"]: r for r in json.loads(done.stdout.split("RESULT ", 1)[1])["kept"]}
    assert kept["none"]["kept"] > kept["elementwise"]["kept"] > kept["block"]["kept"] > 0, kept
    assert kept["none"]["residuals"] > kept["elementwise"]["residuals"] > kept["block"]["residuals"], kept
    fits = [remat.largest(kept[s])["80 GiB"] for s in remat.SETTINGS]
    assert fits == sorted(fits) and fits[0] > 0, fits
