"""training.options.config and training.optim: recipes, overrides, schedules, weight-decay conversion, losses."""

import math

import keras
import numpy as np
import pytest

from training import optim
from training.configs import available_configs, get_config
from training.options.config import TrainConfig, steps_per_execution_for
from training.options.overrides import parse_overrides

RECIPES = [
    "cifar10_finetune",
    "digits",
    "digits_augreg",
    "digits_lora",
    "finetune",
    "imagenet1k_s16",
    "imagenet21k_b16",
    "imagenet_finetune_384",
]


def test_every_recipe_loads_and_states_its_command_line():
    assert available_configs() == RECIPES
    for name in RECIPES:
        config = get_config(name)
        assert isinstance(config, TrainConfig)
        module = __import__(f"training.configs.{name}", fromlist=["get_config"])
        assert "python -m training" in module.__doc__, name


def test_paper_recipes_have_the_published_hyperparameters():
    cifar = get_config("cifar10_finetune")
    assert (cifar.optimizer, cifar.momentum, cifar.weight_decay, cifar.batch_size) == ("sgd", 0.9, 0.0, 512)
    assert cifar.steps_per_epoch * cifar.epochs == 10_000 and cifar.warmup_steps == 500
    assert cifar.image_size == 384 and cifar.global_clipnorm == 1.0
    # The generic recipe: the same optimiser (appendix B.1.1), the model and the step counts left to the run.
    tune = get_config("finetune")
    assert (tune.optimizer, tune.momentum, tune.weight_decay, tune.global_clipnorm) == ("sgd", 0.9, 0.0, 1.0)
    assert (tune.schedule, tune.learning_rate, tune.augment, tune.crop_area) == (
        "cosine",
        0.03,
        "inception",
        (0.05, 1.0),
    )
    assert (tune.variant, tune.image_size, tune.batch_size, tune.warmup_steps) == (None, None, None, None)
    s16 = get_config("imagenet1k_s16")
    assert s16.weight_decay == pytest.approx(0.1)  # big_vision wd 1e-4 at lr 1e-3
    assert s16.model == {
        "pooling": "gap",
        "class_token": False,
        "position_embedding": "sincos2d",
        "representation_size": 384,
    }
    assert (s16.randaugment, s16.mixup_alpha, s16.batch_size) == ((2, 10), 0.2, 1024)
    b16 = get_config("imagenet21k_b16")
    assert (b16.learning_rate, b16.weight_decay, b16.schedule, b16.batch_size) == (1e-3, 0.03, "linear", 4096)


def test_overrides_parse_literals_and_model_keys():
    overrides = parse_overrides(
        ["learning_rate=3e-3", "model.dropout_rate=0.1", "randaugment=(2, 15)", "dataset=folder:/data/x", "init=None"]
    )
    assert overrides == {
        "learning_rate": 3e-3,
        "model.dropout_rate": 0.1,
        "randaugment": (2, 15),
        "dataset": "folder:/data/x",
        "init": None,
    }
    config = get_config("digits").replace(**overrides)
    assert config.learning_rate == 3e-3 and config.model["dropout_rate"] == 0.1
    assert config.model["hidden_size"] == 192  # the recipe's other model overrides kept


def test_bad_overrides_say_what_is_known():
    with pytest.raises(KeyError, match="Unknown training option 'lr'.*learning_rate"):
        get_config("digits").replace(lr=1)
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides(["learning_rate"])
    with pytest.raises(ValueError, match="Unknown config 'nope'.*digits"):
        get_config("nope")
    with pytest.raises(ValueError, match="Unknown optimizer 'adam'"):
        TrainConfig(optimizer="adam")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="num_calibration must be an integer >= 1 and <= 512"):
        TrainConfig(num_calibration=1000)


def test_keras_weight_decay_conversion_matches_the_reference_update():
    # big_vision: w -= wd * (lr(t) / lr_peak) * w ; Keras AdamW: w -= lr(t) * weight_decay * w.
    wd, peak = 1e-4, 1e-3
    converted = optim.keras_weight_decay(wd, peak)
    for lr_t in (peak, 0.3 * peak, 1e-6):
        assert lr_t * converted == pytest.approx(wd * lr_t / peak)
    # And Keras really applies it that way: zero gradients, so only the decay moves the weight.
    w = keras.Variable(np.ones(3, "float32"))
    opt = keras.optimizers.AdamW(learning_rate=peak, weight_decay=converted)
    opt.apply_gradients([(np.zeros(3, "float32"), w)])
    np.testing.assert_allclose(w.numpy(), 1.0 - wd, rtol=1e-6)


@pytest.mark.parametrize("decay", ["cosine", "linear", "constant"])
def test_warmup_decay_schedule_against_numpy(decay):
    peak, total, warmup = 0.01, 100, 10
    schedule = optim.WarmupDecay(peak, total, warmup, decay)
    for step in (0, 5, 9, 10, 40, 99, 100, 150):
        if step < warmup:
            expected = peak * (step + 1) / warmup
        else:
            progress = min((step - warmup) / (total - warmup), 1.0)
            expected = {
                "cosine": peak * 0.5 * (1 + math.cos(math.pi * progress)),
                "linear": peak * (1 - progress),
                "constant": peak,
            }[decay]
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-9), step
    assert optim.WarmupDecay.from_config(schedule.get_config()).get_config() == schedule.get_config()


def test_optimizers_of_the_recipes():
    sgd = optim.make_optimizer(get_config("cifar10_finetune"), 10_000)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.momentum == 0.9 and sgd.global_clipnorm == 1.0
    adamw = optim.make_optimizer(get_config("imagenet1k_s16"), 1000_000)
    assert isinstance(adamw, keras.optimizers.AdamW) and adamw.weight_decay == pytest.approx(0.1)
    with pytest.raises(ValueError, match="sgd.*weight_decay"):
        optim.make_optimizer(TrainConfig(optimizer="sgd", weight_decay=0.1), 100)
    with pytest.warns(UserWarning, match="warmup_steps=44"):
        schedule = optim.make_schedule(get_config("digits"), 20)
    assert schedule.warmup_steps == 2


def test_losses_against_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 5)).astype("float32")
    labels = np.eye(5, dtype="float32")[[0, 3, 1, 4]]
    smoothing = 0.1
    # Softmax cross-entropy with label smoothing (targets y * (1 - e) + e / K).
    targets = labels * (1 - smoothing) + smoothing / 5
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(targets * log_softmax).sum(-1).mean()
    loss = optim.make_loss(TrainConfig(loss="softmax", label_smoothing=smoothing))
    assert float(loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    # Sigmoid cross-entropy summed over classes (big_vision), label smoothing towards 0.5.
    targets = labels * (1 - smoothing) + 0.5 * smoothing
    probs = 1 / (1 + np.exp(-logits))
    expected = -(targets * np.log(probs) + (1 - targets) * np.log(1 - probs)).sum(-1).mean()
    loss = optim.make_loss(TrainConfig(loss="sigmoid", label_smoothing=smoothing))
    assert float(loss(labels, logits)) == pytest.approx(expected, rel=1e-5)


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize(
    "requested, steps, expected", [(100, 1238, 2), (50, 500, 50), (7, 22, 2), (1, 13, 1), (30, 12, 12), (5, 7, 1)]
)
def test_steps_per_execution_is_the_largest_divisor_of_the_epoch(requested, steps, expected):
    value, note = steps_per_execution_for(requested, steps)
    assert value == expected and steps % value == 0
    assert value == max(d for d in _divisors(steps) if d <= requested)
    if value == requested:
        assert note is None
    else:
        assert f"steps_per_execution={requested} does not divide the {steps} steps per epoch" in note
        assert f"using {value}" in note


def test_steps_per_execution_also_divides_a_mid_epoch_resume_step():
    # A checkpoint at step 10 of 8-step epochs (2 steps into epoch 1), written by a run with another value.
    value, note = steps_per_execution_for(4, 8, resume_steps=[8, 10])
    assert value == 2 and "mid-epoch checkpoint steps [8, 10]" in note
    assert steps_per_execution_for(4, 8, resume_steps=[8, 16, 20]) == (4, None)


def test_imagenet1k_s16_steps_per_execution_divides_its_epoch():
    s16 = get_config("imagenet1k_s16")
    # ImageNet-1k train has 1,281,167 images; TFDS's train[:99%] rounds to 1,268,355.
    steps = round(1_281_167 * 0.99) // s16.batch_size
    assert steps == 1238 and steps_per_execution_for(s16.steps_per_execution, steps) == (619, None)


def test_jit_compile_is_auto_true_or_false():
    assert TrainConfig().jit_compile == "auto"
    assert TrainConfig().replace(**parse_overrides(["jit_compile=False"])).jit_compile is False
    assert TrainConfig().replace(**parse_overrides(["jit_compile=auto"])).jit_compile == "auto"
    for bad in ("yes", 1, None):
        with pytest.raises(ValueError, match="jit_compile must be True, False or 'auto'"):
            TrainConfig(jit_compile=bad)
