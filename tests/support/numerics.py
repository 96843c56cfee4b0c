"""Tolerances from the numerics, not from the CPU at hand: top-1 compared where two code paths may round apart."""

import numpy as np

# Two float32 code paths (another batch split, another kernel, another CPU's vector width) sum in other orders;
# for the tiny models here their logits agree to a few 1e-6 of the logits' scale. An image whose top two logits are
# closer than this bound may rank them either way, so it proves nothing about which path is right.
LOGIT_RTOL = 1e-4
# A run's samples/heldout.npz holds the evaluated images rounded to uint8 (what an app feeds): up to half a step of
# 255 per pixel, which moves the digits model's logits by about 1% of their scale. Images within 5% may flip.
UINT8_ROUNDING_RTOL = 0.05


def ambiguous(logits, rtol=LOGIT_RTOL):
    """Which images' top-2 margin is within `rtol` of the logits' scale (their top-1 may flip between code paths)."""
    logits = np.asarray(logits, dtype=np.float64)
    top2 = np.sort(logits, axis=-1)[:, -2:]
    return (top2[:, 1] - top2[:, 0]) <= rtol * max(1.0, float(np.abs(logits).max()))


def assert_top1_matches(logits, labels, top1, rtol=LOGIT_RTOL):
    """`top1`, computed by another code path from the same model and images, agrees with these logits on every
    image whose top-2 margin exceeds the float32 bound: the correct counts differ by at most the ambiguous images."""
    logits, labels = np.asarray(logits), np.asarray(labels)
    correct = int(np.sum(logits.argmax(-1) == labels))
    reported = round(top1 * len(labels))
    assert abs(reported - top1 * len(labels)) < 1e-3, f"top1={top1} is not a count out of {len(labels)}"
    loose = int(np.sum(ambiguous(logits, rtol)))
    assert abs(correct - reported) <= loose, (
        f"{correct} of {len(labels)} correct from these logits, {reported} reported; only {loose} image(s) have a "
        f"top-2 margin within {rtol} of the logits' scale"
    )


def scaled_diff(actual, expected, rows=None):
    """Max |difference| over max(1, max |expected|): absolute for outputs of order 1, relative for larger ones
    (float32 round-off grows with the values' scale). `rows`: a mask of the rows compared (NaFlex's valid tokens)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    diff = np.abs(actual - expected)
    if rows is not None:
        diff = diff[rows]
    return float(diff.max() / max(1.0, float(np.abs(expected).max())))
