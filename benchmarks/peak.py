"""Matmul peak probe: the GFLOP/s ceiling that MFU and the TFLite bound are measured against."""

import time


def matmul_peak(dtype="float32", size=1024, chain=4, reps=5):
    """Best GFLOP/s of a chain of `chain` (size x size) @ (size x size) TF matmuls, over `reps` timed runs.

    A chain inside one tf.function keeps dispatch overhead out of the figure; the best run, not the median,
    is the ceiling (a median would move with other processes on the machine and inflate MFU).
    """
    import tensorflow as tf

    a = tf.random.uniform((size, size), -1, 1, dtype=tf.float32)
    a = tf.cast(a, dtype)
    b = tf.cast(tf.random.uniform((size, size), -1, 1) / size**0.5, dtype)

    @tf.function
    def run(x):
        for _ in range(chain):
            x = tf.matmul(x, b)
        return x

    run(a).numpy()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        run(a).numpy()
        best = min(best, time.perf_counter() - start)
    return {"gflops": 2 * size**3 * chain / best / 1e9, "size": size, "dtype": dtype}
