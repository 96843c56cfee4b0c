"""`--set lora_rank=N`: a LoRA run on the digits trains only the factors and the head, resumes exactly, and leaves a
merged model.keras without LoRA variables; the `digits_lora` recipe reaches the accuracy its docstring states and
exports."""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
import training
from keras_vit.lora import TARGET_GROUPS
from tests.support.processes import call_cli
from training.checkpoints.checkpoint_file import _AUTO_SUFFIX
from training.checkpoints.checkpointing import CheckpointManager
from training.configs import get_config
from training.model_setup import build_model, model_config
from training.options.config import option_choices
from training.options.overrides import parse_overrides

# Keras' factor layout per projection (keras_vit/lora.py): the numpy form of A @ B.
UPDATE = {"query": "dhr,rk->dhk", "key": "dhr,rk->dhk", "value": "dhr,rk->dhk", "out": "hkr,rd->hkd"}


@pytest.fixture(scope="module")
def digits_init(tmp_path_factory):
    """A model.keras of the digits recipe's architecture with random non-zero weights: the run's `--init`."""
    path = tmp_path_factory.mktemp("init") / "model.keras"
    model = keras_vit.create_model(model_config(get_config("digits"), 10))
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.05, variable.shape).astype("float32"))
    model.save(path)
    return path, {v.path: v.numpy() for v in model.weights}


def _checkpoint(workdir, step):
    """{group: [(path, array), ...]} in the file's order."""
    header, arrays = CheckpointManager.read(str(workdir / "checkpoints" / f"ckpt-{step:08d}.npz"))
    return {
        group: [(path, arrays[f"{group}/{i:05d}"]) for i, path in enumerate(header["paths"][group])]
        for group in ("model", "optimizer")
    }


@pytest.mark.slow
def test_a_lora_run_trains_the_factors_and_head_resumes_exactly_and_saves_the_merged_model(
    digits_init, tmp_path, capsys
):
    init, initial = digits_init
    config = get_config("digits_lora").replace(
        init=str(init), epochs=2, steps_per_epoch=3, warmup_steps=1, checkpoint_every=0, eval_every=0,
        deterministic=True, jit_compile=False, strategy="default", num_samples=8, num_calibration=8,
    )  # fmt: skip
    result = training.train(config, str(tmp_path), verbose=0)
    said = "[training] LoRA rank 8 on every attention's query, key, value and out: 64,906 of 671,818 parameters train"
    assert said in capsys.readouterr().out
    assert result.metrics["trainable_parameters"] == 62_976 + 1_930  # the factors (digits_lora's docstring) + head
    final = _checkpoint(tmp_path, 6)
    weights = dict(final["model"])
    factors = {p for p in weights if "lora_kernel" in p}
    assert len(factors) == 2 * 4 * 2  # A and B of q/k/v/out in both blocks
    # Everything but the factors and the head is what --init set; the factors and the head have trained.
    for path, value in initial.items():
        if not path.startswith("head/"):
            np.testing.assert_array_equal(weights[path], value, err_msg=path)
    assert all(np.abs(weights[p]).max() > 0 for p in factors if p.endswith("lora_kernel_b"))
    assert np.abs(weights["head/kernel"]).max() > 0

    # model.keras is the merged model: no LoRA variables, each projection's kernel + A @ B (numpy), the run's outputs.
    saved = keras.saving.load_model(tmp_path / "model.keras", compile=False)
    assert not [v.path for v in saved.weights if "lora" in v.path] and len(saved.weights) == len(initial)
    merged = {v.path: v.numpy() for v in saved.weights}
    for path in (p for p in factors if p.endswith("lora_kernel_a")):
        layer = path.rsplit("/", 1)[0]
        update = np.einsum(UPDATE[layer.rsplit("/", 1)[1]], weights[path], weights[f"{layer}/lora_kernel_b"])
        np.testing.assert_allclose(merged[f"{layer}/kernel"], weights[f"{layer}/kernel"] + update, atol=1e-6)
    images = np.random.default_rng(1).uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(saved.predict(images, verbose=0), result.model.predict(images, verbose=0), atol=1e-5)
    # Evaluation reads it unchanged and agrees with the run's own held-out figures.
    evaluated = training.evaluate(str(tmp_path))
    assert evaluated["top1"] == pytest.approx(result.metrics["top1"], abs=1e-6)

    # As if killed after the first epoch: the resume restores the factors, the frozen weights and the optimizer.
    os.remove(tmp_path / "checkpoints" / "ckpt-00000006.npz")
    resumed = training.train(config, str(tmp_path), verbose=0)
    assert resumed.metrics["resumed_from_step"] == 3 and resumed.metrics["steps"] == 6
    again = _checkpoint(tmp_path, 6)
    for group in ("model", "optimizer"):
        assert len(again[group]) == len(final[group]) > 1
        for (path, value), (path_again, value_again) in zip(final[group], again[group]):
            # Keras numbers automatic names per process: the second run's optimizer is `adam_w_1`.
            assert _AUTO_SUFFIX.sub("", path) == _AUTO_SUFFIX.sub("", path_again)
            np.testing.assert_array_equal(value_again, value, err_msg=path)
    for a, b in zip(keras.saving.load_model(tmp_path / "model.keras").get_weights(), saved.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_lora_rank_is_checked_like_every_option_and_needs_an_init(tmp_path):
    with pytest.raises(ValueError, match=r"lora_rank must be an integer >= 1, or None for full fine-tuning"):
        get_config("digits").replace(lora_rank=0)
    with pytest.raises(ValueError, match=r"lora_rank=8 fine-tunes a trained model, but the run has no --init\. Pass"):
        training.train("digits_lora", str(tmp_path), verbose=0)


@pytest.mark.parametrize("targets, per_block", [("attention", 4), ("qkv", 3), ("all", 6)])
def test_lora_targets_picks_the_projections_that_get_factors(targets, per_block, capsys):
    assert parse_overrides([f"lora_targets={targets}"]) == {"lora_targets": targets}
    config = get_config("digits_lora").replace(lora_targets=targets)
    model = build_model(config, 10)  # no --init here: the run refuses that earlier (run_plan), the builder does not
    names = {path.rsplit("/", 2)[-2] for path in (v.path for v in model.trainable_weights) if "lora_kernel" in path}
    expected = {"attention": set(UPDATE), "qkv": {"query", "key", "value"}, "all": {*UPDATE, "Dense_0", "Dense_1"}}
    assert names == expected[targets]
    assert sum("lora_kernel" in v.path for v in model.trainable_weights) == 2 * 2 * per_block  # A, B; 2 blocks
    said = {"attention": "every attention's query, key, value and out:",
            "qkv": "every attention's query, key and value:",
            "all": "every attention's query, key, value and out, and every MLP:"}[targets]  # fmt: skip
    assert f"[training] LoRA rank 8 on {said}" in capsys.readouterr().out


def test_lora_targets_are_the_librarys_sets_and_bad_ones_are_one_line_errors():
    assert option_choices("lora_targets") == tuple(TARGET_GROUPS)
    with pytest.raises(ValueError, match=r"^Unknown lora_targets 'mlp'. Use one of: attention, qkv, all.$"):
        training.TrainConfig(lora_rank=8, lora_targets="mlp")
    with pytest.raises(ValueError, match=r"^lora_targets expects 'attention' or 'qkv' or 'all'. Received: "):
        parse_overrides(["lora_targets=q,k"])
    with pytest.raises(ValueError, match=r"but the run has no LoRA. Received: lora_targets='qkv', lora_rank=None; set"):
        training.TrainConfig(lora_targets="qkv")


@pytest.mark.slow  # a 6-epoch digits run, the recipe and its export from the command line: ~60 s on 2 busy cores
def test_the_digits_lora_recipe_reaches_the_accuracy_it_states(tmp_path, capfd):
    from export.__main__ import main as export_main
    from training.__main__ import main as train_main

    # The backbone only gives the recipe its --init: trained without XLA (its compile is not the subject here), no
    # figures and no mid-run evaluation (neither touches the weights: the same top-1 with or without them).
    backbone = training.train("digits", str(tmp_path / "digits6"), verbose=0, epochs=6, num_samples=16,
                              num_calibration=16, jit_compile=False, plots=False, eval_every=0)  # fmt: skip
    command = [
        "--config",
        "digits_lora",
        "--init",
        tmp_path / "digits6" / "model.keras",
        "--workdir",
        tmp_path / "lora",
        "--set",
        "plots=false",  # the recipe's figures are not what this test checks
    ]
    run = call_cli(train_main, *command, capfd=capfd)  # the command line, in this process
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    metrics = json.loads((tmp_path / "lora" / "metrics.json").read_text())
    print(f"digits_lora: backbone {backbone.metrics['top1']:.4f}, LoRA {metrics['top1']:.4f}")
    assert metrics["top1"] >= 0.85 and metrics["trainable_parameters"] == 64_906
    # The merged model.keras exports and verifies as any run's does.
    export = [tmp_path / "lora", "--formats", "saved_model,tflite", "--quantize", "float32", "--gpu-check", "off"]
    exported = call_cli(export_main, *export, capfd=capfd)
    assert exported.returncode == 0 and "status: PASSED" in exported.stdout, exported.stdout[-3000:]
