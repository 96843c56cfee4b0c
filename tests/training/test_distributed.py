"""Distribution: Mirrored over 2 logical CPUs equals the default strategy; MultiWorkerMirrored on 127.0.0.1.

Each case runs in fresh processes: logical devices must be configured before TensorFlow initialises, and a
multi-worker cluster needs one process per worker.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests import support
from tests.support.processes import free_ports, wait_all

ROOT = str(support.ROOT)
FIELDS = dict(dataset="synthetic", image_size=16, batch_size=16, epochs=3, steps_per_epoch=2, eval_every=0,
              checkpoint_every=0, learning_rate=3e-3, jit_compile=False, num_samples=4, num_calibration=4,
              plots=False, seed=1)  # fmt: skip
CONFIG = f"training.TrainConfig(**{FIELDS!r})"  # the same, in the scripts below

# Both MirroredStrategy tests' runs, in one process over 2 logical CPUs (`mirrored_runs`): the padded evaluation's
# run first, then the default and mirrored runs, the last without the clipping work-around.
MIRRORED = textwrap.dedent(f"""
    import json, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import training
    from training.data import eval_preprocess, load_source
    from training.placement import workarounds
    out = {{}}
    # 64 held-out images in batches of 48: the last batch is 16 images and 32 padding samples, so its second
    # replica sees only padding.
    config = training.TrainConfig(dataset="synthetic", image_size=16, batch_size=48, epochs=1, steps_per_epoch=2,
                                  eval_every=1, checkpoint_every=0, learning_rate=3e-3, label_smoothing=0.1,
                                  jit_compile=False, num_samples=4, num_calibration=4, seed=1, strategy="mirrored")
    result = training.train(config, sys.argv[1] + "/padded", verbose=0)
    source = load_source("synthetic", seed=1)
    images = np.stack([eval_preprocess(raw, 16).numpy() for raw, _ in source.heldout])
    labels = [int(label) for _, label in source.heldout]
    logits = np.asarray(result.model(images, training=False)).tolist()
    evaluated = training.evaluate(sys.argv[1] + "/padded")
    history = result.histories[-1]
    out["padded"] = {{
        "replicas": result.metrics["replicas"], "logits": logits, "labels": labels, "final": result.metrics,
        "fit": {{key: history["val_" + key][-1] for key in ("top1", "top5", "loss")}}, "evaluate": evaluated}}
    for name in ("default", "mirrored", "mirrored-keras-clipping"):
        if name == "mirrored-keras-clipping":  # without training.placement.workarounds.clip_after_all_reduce
            workarounds.clip_after_all_reduce = lambda optimizer, strategy: optimizer
        config = {CONFIG}.replace(strategy=name.split("-")[0])
        if name == "mirrored":  # the recipes' default: Keras' own choice under tf.distribute (no XLA)
            config = config.replace(jit_compile="auto")
        result = training.train(config, sys.argv[1] + "/" + name, verbose=0)
        losses = [loss for history in result.histories for loss in history["loss"]]
        out[name] = {{"losses": losses, "replicas": result.metrics["replicas"], "jit": result.model.jit_compile,
                     "head": result.model.get_layer("head").kernel.numpy().ravel().tolist()}}
    print("RESULT" + json.dumps(out))
""")

WORKER = textwrap.dedent(f"""
    import sys
    import numpy as np
    import training
    from training.placement import workarounds
    if sys.argv[3] == "without-workaround":
        workarounds.use_local_batch_for_symbolic_build = lambda model: model
    result = training.train({CONFIG}.replace(strategy="multi_worker"), sys.argv[1], verbose=0)
    np.savez(sys.argv[2], *[np.asarray(w) for w in result.model.get_weights()])
    print("STEPS", result.metrics["steps"], result.metrics["replicas"])
""")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, **extra)
    return env


def _two_workers(tmp_path, mode):
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(tmp_path / "run"), str(tmp_path / f"w{index}.npz"), mode],
                cwd=ROOT,
                env=_env(TF_CONFIG=tf_config),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    for process in processes:
        try:
            outputs.append(process.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            pytest.fail("multi-worker run hung")
    return [p.returncode for p in processes], outputs


@pytest.fixture(scope="module")
def mirrored_runs(tmp_path_factory):
    """MIRRORED's runs, in a fresh process (logical devices are set before TensorFlow starts): what each gave."""
    result = subprocess.run([sys.executable, "-c", MIRRORED, str(tmp_path_factory.mktemp("mirrored"))], cwd=ROOT,
                            env=_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.split("RESULT", 1)[1])


@pytest.mark.slow
@pytest.mark.process  # logical devices are set before TensorFlow starts
def test_mirrored_over_two_logical_cpus_matches_the_default_strategy(mirrored_runs):
    out = mirrored_runs
    assert out["default"]["replicas"] == 1 and out["mirrored"]["replicas"] == 2
    assert out["mirrored"]["jit"] is False  # jit_compile="auto" resolved by Keras under MirroredStrategy
    default, mirrored = np.array(out["default"]["losses"]), np.array(out["mirrored"]["losses"])
    assert len(default) == 3 and np.all(np.diff(default) < 0)  # it trains
    np.testing.assert_allclose(mirrored, default, rtol=1e-5)
    np.testing.assert_allclose(out["mirrored"]["head"], out["default"]["head"], rtol=1e-4, atol=1e-6)
    # Keras' own global_clipnorm clips each replica's gradient before the sum: if this ever matches, Keras fixed
    # it and training.placement.workarounds.clip_after_all_reduce can go.
    keras_clipping = np.array(out["mirrored-keras-clipping"]["losses"])
    assert not np.allclose(keras_clipping, default, rtol=1e-5), "Keras now clips after the all-reduce"


@pytest.mark.slow
@pytest.mark.process  # two worker processes
def test_multi_worker_two_processes_end_with_identical_weights(tmp_path):
    codes, outputs = _two_workers(tmp_path, "with-workaround")
    assert codes == [0, 0], "\n\n".join(o[-3000:] for o in outputs)
    assert all("STEPS 6 2" in o for o in outputs)  # 6 steps, 2 replicas (one per worker)
    first, second = np.load(tmp_path / "w0.npz"), np.load(tmp_path / "w1.npz")
    for key in first.files:
        np.testing.assert_array_equal(first[key], second[key])
    head = [first[k] for k in first.files if first[k].shape == (32, 10)]
    assert head and np.abs(head[0]).max() > 0  # the zero-initialised head moved: it trained
    assert (tmp_path / "run" / "model.keras").exists()  # written by the chief
    # The same run in one process (this one: its process is not the subject): each worker read its own half of
    # every global batch, not the whole batch (two workers both reading every row would still agree with each
    # other, but not with this).
    import training

    one = training.train(training.TrainConfig(**FIELDS, strategy="default"), str(tmp_path / "one"), verbose=0)
    assert (one.metrics["steps"], one.metrics["replicas"]) == (6, 1)
    single = one.model.get_weights()
    assert len(single) == len(first.files)
    for index, weight in enumerate(single):
        key = f"arr_{index}"  # np.savez's name of the index-th weight
        np.testing.assert_allclose(first[key], np.asarray(weight), rtol=1e-4, atol=1e-6, err_msg=key)


@pytest.mark.slow
@pytest.mark.process  # two worker processes
def test_multi_worker_workaround_is_still_needed(tmp_path):
    """Fails when Keras fixes keras-team/keras#20585: then delete training/workarounds.py and this test."""
    codes, outputs = _two_workers(tmp_path, "without-workaround")
    text = "\n".join(outputs)
    assert codes != [0, 0], "Keras' fit now works under MultiWorkerMirroredStrategy: remove training/workarounds.py"
    assert "PerReplica" in text or "Invalid reduction dimension" in text, text[-3000:]


@pytest.mark.slow
@pytest.mark.process  # logical devices are set before TensorFlow starts
def test_padded_evaluation_under_mirrored_equals_the_unpadded_metrics(mirrored_runs):
    out = mirrored_runs["padded"]
    assert out["replicas"] == 2
    # The unpadded reference, in numpy from the model's logits on all 64 held-out images at once.
    logits, labels = np.array(out["logits"], np.float64), np.array(out["labels"])
    assert logits.shape == (64, 10)
    targets = np.eye(10)[labels] * 0.9 + 0.1 / 10  # label_smoothing=0.1
    log_softmax = logits - logits.max(-1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(-1, keepdims=True))
    reference = {
        "loss": float(np.mean(-(targets * log_softmax).sum(-1))),
        "top1": float(np.mean(logits.argmax(-1) == labels)),
        "top5": float(np.mean([label in np.argsort(-row)[:5] for row, label in zip(logits, labels)])),
    }
    assert 0 < reference["top1"] < 1 and 0 < reference["top5"] <= 1  # not a degenerate all-right/all-wrong model
    # fit's validation, the trainer's final evaluation (both under MirroredStrategy) and training.evaluate.
    for name in ("fit", "final", "evaluate"):
        for key, value in reference.items():
            np.testing.assert_allclose(out[name][key], value, rtol=1e-5, err_msg=f"{name} {key}")


CLI = [
    "--dataset",
    "synthetic",
    "--batch-size",
    "16",
    "--strategy",
    "multi_worker",
    "--set",
    "steps_per_epoch=2",
    "--set",
    "image_size=16",
    "--set",
    "eval_every=0",
    "--set",
    "checkpoint_every=0",
    "--set",
    "num_samples=4",
    "--set",
    "num_calibration=4",
    "--set",
    "jit_compile=False",
    "--set",
    "learning_rate=3e-3",
    "--set",
    "seed=1",
    "--set",
    "warmup_steps=1",
]


def _start_workers(workdir, *extra):
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    return [
        subprocess.Popen(
            [sys.executable, "-m", "training", "--workdir", str(workdir), *CLI, *extra],
            cwd=ROOT,
            env=_env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for index in range(2)
    ]


@pytest.mark.slow
@pytest.mark.process  # a signal to one of two workers
def test_sigterm_to_one_worker_stops_both_after_saving_and_the_rerun_resumes(tmp_path):
    import glob
    import re
    import signal
    import time

    workdir = tmp_path / "run"
    processes = _start_workers(workdir, "--epochs", "1000")  # far longer than the test waits
    deadline = time.time() + 240
    while not glob.glob(str(workdir / "checkpoints" / "ckpt-*.npz")):  # the chief's first epoch-end checkpoint
        if time.time() > deadline or any(p.poll() is not None for p in processes):
            for p in processes:
                p.kill()
            pytest.fail("no checkpoint: " + "\n\n".join(p.communicate()[0][-2000:] for p in processes))
        time.sleep(0.05)
    processes[1].send_signal(signal.SIGTERM)  # the non-chief worker: without agreement the chief would hang
    codes, outputs = wait_all(processes, timeout=120)
    assert codes == [143, 143], "\n\n".join(o[-2000:] for o in outputs)
    steps = sorted(
        int(re.search(r"ckpt-(\d+)", p).group(1)) for p in glob.glob(str(workdir / "checkpoints" / "ckpt-*.npz"))
    )
    saved = steps[-1]
    assert saved > 2 and all(f"saved the checkpoint of step {saved}" in o for o in outputs)  # the same step
    assert not (workdir / "model.keras").exists()
    # The rerun resumes from that checkpoint (shortened on purpose to end soon) and finishes on both workers.
    epochs = saved // 2 + 2
    codes, outputs = wait_all(_start_workers(workdir, "--epochs", str(epochs), "--set", "extend_epochs=True"), 240)
    assert codes == [0, 0], "\n\n".join(o[-2000:] for o in outputs)
    assert all(f"resuming from step {saved} of {2 * epochs}" in o for o in outputs)
    assert json.loads((workdir / "metrics.json").read_text())["steps"] == 2 * epochs
