"""Options with bounds users can reach: lora_rank above its layers' width, an out-of-memory first step, a batch the
FSDP replicas do not divide, model.remat changed on resume, an ema_decay horizon longer than the run."""

import types

import pytest

import keras_vit
from training import run_identity, run_plan
from training.__main__ import out_of_memory_line
from training.options.config import TrainConfig

CONFIG = TrainConfig(dataset="synthetic", image_size=16, batch_size=16, epochs=1, steps_per_epoch=2, plots=False)


def test_lora_rank_above_the_smallest_projection_width_is_refused_with_the_bound():
    model = keras_vit.create_model("testing", num_classes=3, image_size=32)
    width = model.config.hidden_size
    with pytest.raises(ValueError, match=f"rank={10**9} exceeds .*at most {width}") as err:
        keras_vit.enable_lora(model, 10**9)
    assert "\n" not in str(err.value)
    mlp = min(width, model.config.mlp_dim)
    with pytest.raises(ValueError, match=f"at most {mlp}"):
        keras_vit.enable_lora(model, mlp + 1, targets="all")
    assert len(keras_vit.enable_lora(model, width)) == 4 * model.config.num_layers


class ResourceExhaustedError(Exception):
    """What TensorFlow raises (by name) when an allocation fails."""


def test_an_out_of_memory_names_the_option_most_likely_responsible():
    err = ResourceExhaustedError("OOM when allocating tensor with shape[192,6,1000000000] and type float")
    line = out_of_memory_line(err, {"lora_rank": 1000000000})
    assert "[192,6,1000000000]" in line and "lora_rank=1000000000" in line and "\n" not in line
    assert "--batch-size 32" in out_of_memory_line(err, {"batch_size": 64})
    assert "accum_steps" in out_of_memory_line(RuntimeError("RESOURCE_EXHAUSTED: Out of memory"), {})
    assert out_of_memory_line(RuntimeError("something else"), {}) is None


def test_the_cli_prints_one_line_for_an_out_of_memory(tmp_path, monkeypatch, capsys):
    import training
    from training import __main__ as cli

    def train(*args, **kwargs):
        raise ResourceExhaustedError("OOM when allocating tensor with shape[64,197,3072]")

    monkeypatch.setattr(training, "train", train)
    assert cli.main(["--workdir", str(tmp_path / "run"), "--batch-size", "64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--batch-size 32" in err and "Traceback" not in err, err


def test_fsdp_divisibility_names_a_batch_and_a_device_count_that_work():
    config = types.SimpleNamespace(batch_size=64, accum_steps=1)
    placement = types.SimpleNamespace(num_replicas_in_sync=3, name="FSDP")
    source = types.SimpleNamespace(num_train=1000)
    with pytest.raises(
        ValueError, match="replicas of FSDP. Use --batch-size 63 or --batch-size 66, or run on 2 devices"
    ):
        run_plan._step_counts(config, source, placement, None)


def test_model_remat_may_change_on_resume_and_a_refusal_shows_only_what_differs(tmp_path):
    run_identity.resolve(str(tmp_path), CONFIG, None).write(str(tmp_path))
    run_identity.resolve(str(tmp_path), CONFIG.replace(model={"remat": True}), None)  # no refusal
    changed = CONFIG.replace(model={"remat": True, "hidden_size": 64, "dropout_rate": 0.1})
    with pytest.raises(ValueError, match="model.dropout_rate, model.hidden_size") as err:
        run_identity.resolve(str(tmp_path), changed, None)
    message = str(err.value).replace(str(tmp_path), "WORKDIR")
    assert "remat" not in message and len(message) < 300


@pytest.mark.parametrize(("decay", "steps", "kept"), [(0.9998, 616, "88%"), (0.99, 50, "61%")])
def test_an_ema_horizon_longer_than_the_run_gets_a_note(decay, steps, kept):
    note = run_plan.ema_note(CONFIG.replace(ema_decay=decay), steps)
    assert f"keeps {kept} of the initial weights" in note
    assert run_plan.ema_note(CONFIG.replace(ema_decay=0.9), 616) is None
    assert run_plan.ema_note(CONFIG, 616) is None
