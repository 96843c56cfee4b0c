"""How batches reach the device on each route (docs/training.md, "How each route moves batches to the device"): the
behaviour of Keras and tf.distribute that the docs describe, pinned so that an upgrade that changes it fails here."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf
from tensorflow.python.data.ops import multi_device_iterator_ops

from tests import support
from training.placement.strategy import select_strategy

ROOT = str(support.ROOT)


def _device_iterators(strategy):
    iterator = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(2)))
    return [
        inner
        for worker in getattr(iterator, "_iterators", [])
        if isinstance(inner := getattr(worker, "_iterator", None), multi_device_iterator_ops.OwnedMultiDeviceIterator)
    ]


def test_tensorflow_mirrored_on_one_device_prefetches_through_the_multi_device_iterator_and_default_does_not():
    mirrored, _ = select_strategy("mirrored")
    assert mirrored.num_replicas_in_sync == 1  # the one device this machine has, as one GPU would be
    assert len(_device_iterators(mirrored)) == 1
    assert _device_iterators(select_strategy("default")[0]) == []  # the host iterator, read inside the step


ONE_AHEAD = """
import numpy as np, jax, keras, tensorflow as tf
from keras.src.backend.jax import trainer
from tests import support

placed = []
place = trainer._distribute_data
trainer._distribute_data = lambda data, layouts=None: placed.append(int(np.asarray(data[0])[0, 0])) or place(
    data, layouts
)
jax.default_backend = lambda: "gpu"  # what Keras asks before it chooses the look-ahead (none on a CPU)
ds = tf.data.Dataset.range(4).map(lambda i: (tf.fill([2, 1], i), tf.fill([2, 1], i)))


def first_batch():
    placed.clear()
    for _, _, batches in trainer.JAXEpochIterator(x=ds, steps_per_execution=1).enumerate_epoch():
        return int(np.asarray(next(batches)[0])[0, 0]), list(placed)


print("ONE DEVICE", first_batch())
keras.distribution.set_distribution(keras.distribution.DataParallel())
print("DISTRIBUTED", first_batch())
"""


@pytest.mark.slow
def test_keras_jax_places_the_next_batch_before_handing_out_the_current_one_on_one_device_only():
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", ONE_AHEAD], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "ONE DEVICE (0, [0, 1])" in result.stdout, result.stdout[-2000:]  # batch 1 placed before 0 is used
    assert "DISTRIBUTED (0, [0])" in result.stdout, result.stdout[-2000:]  # under keras.distribution: no look-ahead
