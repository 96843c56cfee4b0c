"""training.train / evaluate options: mixed_bfloat16, XLA with steps_per_execution, errors of evaluate."""

import json

import keras
import numpy as np
import pytest

import training

TINY = dict(
    dataset="synthetic",
    image_size=16,
    batch_size=16,
    epochs=2,
    steps_per_epoch=4,
    eval_every=1,
    strategy="default",
    num_samples=8,
    num_calibration=8,
    checkpoint_every=0,
    plots=False,
)


@pytest.mark.slow
def test_mixed_bfloat16_trains_with_float32_variables_and_logits(tmp_path):
    config = training.TrainConfig(**TINY, precision="mixed_bfloat16", jit_compile=False)
    result = training.train(config, str(tmp_path), verbose=0)
    block = result.model.get_layer("encoderblock_0")
    assert block.compute_dtype == "bfloat16" and all(w.dtype == "float32" for w in result.model.weights)
    assert result.model.output.dtype == "float32"
    assert np.isfinite(result.metrics["loss"]) and result.metrics["steps"] == 8


@pytest.mark.slow  # XLA compiles the train and eval steps: ~25 s on 2 busy cores
def test_xla_steps_per_execution_counts_every_step(tmp_path):
    # As an earlier deterministic run in this process leaves it: TensorFlow's op determinism is process-wide, and
    # Keras refuses XLA while it is on. The trainer sets it from each run's config, so this run gets XLA.
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    config = training.TrainConfig(**TINY, jit_compile=True, steps_per_execution=2)
    result = training.train(config, str(tmp_path), verbose=0)
    assert result.model.jit_compile is True and result.metrics["steps"] == 8
    rows = (tmp_path / "log.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("epoch,")
    # The held-out metrics of metrics.json are those of the saved model.
    model = keras.saving.load_model(tmp_path / "model.keras")
    with np.load(tmp_path / "samples" / "heldout.npz") as held:
        logits = model.predict((held["images"].astype("float32") - 127.5) / 127.5, verbose=0)
    assert logits.shape == (8, 10) and np.isfinite(logits).all()
    assert json.loads((tmp_path / "metrics.json").read_text())["steps"] == 8
    # plots=False (TINY): everything else written, no figures (the digits and fine-tune tests check them drawn).
    assert result.metrics["plots"] == {} and not (tmp_path / "plots").exists()


def test_evaluate_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="No model at .*train first"):
        training.evaluate(str(tmp_path))


@pytest.mark.slow
def test_steps_per_execution_adjusted_to_the_epoch_then_evaluate_under_a_strategy(tmp_path, capsys):
    # 6 steps per epoch with 4 per execution would make Keras run 8 per epoch; the trainer uses 3.
    config = training.TrainConfig(**{**TINY, "steps_per_epoch": 6}, jit_compile=False, steps_per_execution=4)
    result = training.train(config, str(tmp_path), verbose=0)
    out = capsys.readouterr().out
    assert "steps_per_execution=4 does not divide the 6 steps per epoch; using 3" in out
    assert "jit_compile=False as configured" in out
    assert result.metrics["steps"] == 12 and result.model.steps_per_execution == 3
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("ckpt-*.npz")) == [
        "ckpt-00000006.npz",
        "ckpt-00000012.npz",
    ]
    # evaluate builds and runs the model inside the selected strategy (here Mirrored over the CPU) and gets the
    # metrics that train reported for the same model and data.
    metrics = training.evaluate(str(tmp_path), strategy="mirrored")
    assert metrics["strategy"] == "MirroredStrategy"
    assert metrics["top1"] == pytest.approx(result.metrics["top1"]) and metrics["loss"] == pytest.approx(
        result.metrics["loss"], rel=1e-5
    )
    from training.__main__ import main

    assert main(["evaluate", "--workdir", str(tmp_path), "--strategy", "default"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["strategy"] == "_DefaultDistributionStrategy" and printed["top1"] == pytest.approx(metrics["top1"])
