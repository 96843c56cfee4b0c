"""benchmarks.fsdp_fit: H/14's per-device memory under fsdp, from its measured blocks and XLA's buffers per device."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import fit, fsdp_fit
from tests import support

ROOT = str(support.ROOT)
H14_PARAMETERS = 632_045_800  # tests/keras_vit/test_param_counts.py's golden count (1000 classes, 224 px)


def _record(image_size, blocks, step_mib, parameters, micro_batch=4, remat=False):
    return {"image_size": image_size, "num_layers": blocks, "step_mib": step_mib, "parameters": parameters,
            "micro_batch": micro_batch, "remat": remat}  # fmt: skip


def test_one_block_is_half_the_difference_of_the_1_and_3_block_models():
    # 1 block: 500 MiB step, 1 Mi parameters (4 MiB of gradient) over 4 images -> 124 MiB per image;
    # 3 blocks: 1,300 MiB, 3 Mi parameters (12 MiB) -> 322 per image. One block: (322 - 124) / 2 = 99; rest 25.
    records = [_record(224, 1, 500, 2**20), _record(224, 3, 1300, 3 * 2**20)]
    block, rest = fsdp_fit.block_activations(records, 224)
    assert (block, rest) == pytest.approx((99.0, 25.0))


def test_fsdp_divides_the_split_parameters_fixed_cost_by_the_devices():
    # 8 Mi split over 4 devices and 1 Mi whole: 3 Mi per device; weights, gradient, 1 slot: 3 copies of 4 bytes.
    assert fsdp_fit.fsdp_fixed_mib(8 * 2**20, 2**20, 4, slots=1) == pytest.approx(36.0)
    assert fsdp_fit.fsdp_fixed_mib(8 * 2**20, 2**20, 1, slots=1) == pytest.approx(fit.fixed_mib(9 * 2**20, 1))


def test_rows_add_the_micro_batch_of_32_blocks_of_activations():
    measured = {
        "activations": [_record(224, 1, 500, 2**20), _record(224, 3, 1300, 3 * 2**20)],
        "counts": {"224": {str(n): [8 * 2**20, 2**20] for n in fsdp_fit.DEVICES}},
    }
    rows = {row["setting"]: row for row in fsdp_fit.rows(measured)}
    assert set(rows) == {"whole batch", "accum_steps=8"}  # only 224 px without remat was "measured"
    assert rows["whole batch"]["per_image_mib"] == pytest.approx(25 + 32 * 99)
    auto, sharded = rows["whole batch"]["devices"][8]
    activations = 512 / 8 * (25 + 32 * 99)  # MiB
    assert auto * 1024 == pytest.approx(3 * 9 * 4 + activations)  # weights, gradient, slot: 9 Mi parameters each
    assert sharded * 1024 == pytest.approx(3 * (1 + 1) * 4 + activations)  # 8 Mi / 8 devices + 1 Mi whole
    auto, sharded = rows["accum_steps=8"]["devices"][8]  # micro-batches of 8 images; the accumulator: 4 copies
    assert sharded * 1024 == pytest.approx(4 * (1 + 1) * 4 + 8 * (25 + 32 * 99))


@pytest.mark.slow
def test_split_counts_add_up_to_the_golden_h14_count():
    counts = fsdp_fit.split_counts(224, 32, devices=(8, 3), num_classes=1000)
    assert sum(counts[8]) == sum(counts[3]) == H14_PARAMETERS
    whole = counts[8][1]
    # Biases, norms, the class token and the head bias stay whole (under 0.1%).
    assert 0 < whole < 0.001 * H14_PARAMETERS
    # Over 3 devices nothing of H/14 divides (1280 = 2^8 x 5; 5120 too): every kernel stays whole.
    assert counts[3] == [0, H14_PARAMETERS]


@pytest.mark.slow  # two compilations of a 12.7 M-parameter train step on 4 host devices: ~40 s
def test_xla_keeps_a_quarter_of_the_weights_and_slots_per_device_under_fsdp():
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT,
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}  # fmt: skip
    out = {}
    for kind in ("dp", "fsdp"):
        done = subprocess.run([sys.executable, "-m", "benchmarks.fsdp_fit", "--xla-one", kind], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        out[kind] = json.loads(done.stdout.split("RESULT", 1)[1])
    weights_mib = out["dp"]["parameters"] * 4 / 2**20
    # AdamW: the weights and two moments are the step's arguments, whole on every device under DataParallel...
    assert out["dp"]["argument_mib"] == pytest.approx(3 * weights_mib, rel=0.01)
    # ...and a quarter of that under fsdp (plus the biases and norms it keeps whole: under 1% here).
    assert out["fsdp"]["argument_mib"] == pytest.approx(3 * weights_mib / 4, rel=0.02)
    assert out["fsdp"]["temp_mib"] < out["dp"]["temp_mib"] / 4
