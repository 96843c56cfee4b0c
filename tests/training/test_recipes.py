"""Every recipe against a table of its reference configuration, written here from the reference files (big_vision
`configs/vit_s16_i1k.py`, `configs/vit_i21k.py`; vision_transformer `vit_jax/configs/common.py`, the paper), so an
edit that drifts from the reference fails; each recipe's section of docs/training.md names its reference, published
number and deviations. Also: extra evaluation splits reported in metrics.json."""

import json

import numpy as np
import pytest

from tests import support
from tests.support.runs import TINY_CONFIG
from training.configs import available_configs, get_config

# What vit_jax's cifar10 and imagenet2012 fine-tuning presets share (configs/common.py, paper appendix B.1.1).
_FINETUNE_384 = dict(
    eval_resize_small=None,
    image_size=384,
    shuffle_buffer=50_000,
    variant="B/16",
    model={},
    batch_size=512,
    optimizer="sgd",
    momentum=0.9,
    learning_rate=0.03,
    weight_decay=0.0,
    schedule="cosine",
    warmup_steps=500,
    global_clipnorm=1.0,
    augment="inception",
    crop_area=(0.05, 1.0),
    flip=True,
    randaugment=None,
    mixup_alpha=0.0,
    init_head=False,
)

# Values as the references state them; conversions (big_vision's wd x schedule -> Keras' wd x lr) done here by hand.
REFERENCE = {
    "imagenet1k_s16": dict(  # big_vision configs/vit_s16_i1k.py
        dataset="tfds:imagenet2012",
        train_split="train[:99%]",
        eval_split="validation",
        extra_evals={"minival": "train[99%:]"},
        eval_resize_small=256,
        image_size=224,
        shuffle_buffer=250_000,
        variant="S/16",
        model={"pooling": "gap", "class_token": False, "position_embedding": "sincos2d", "representation_size": 384},
        batch_size=1024,
        epochs=90,
        optimizer="adamw",
        beta_1=0.9,
        beta_2=0.999,
        learning_rate=1e-3,
        weight_decay=1e-4 / 1e-3,
        schedule="cosine",
        warmup_steps=10_000,
        global_clipnorm=1.0,
        loss="softmax",
        label_smoothing=0.0,
        augment="inception",
        crop_area=(0.05, 1.0),
        flip=True,
        randaugment=(2, 10),
        mixup_alpha=0.2,
        mixup_images=2,
        head_bias_init=None,
        init=None,
    ),
    "imagenet21k_b16": dict(  # the paper's Table 3; data and head as big_vision configs/vit_i21k.py
        dataset="tfds:imagenet21k",
        train_split="full[51200:]",
        eval_split="full[:25600]",
        extra_evals={"val": "full[25600:51200]"},
        eval_resize_small=256,
        image_size=224,
        variant="B/16",
        model={"representation_size": 768, "dropout_rate": 0.1},
        batch_size=4096,
        epochs=90,
        optimizer="adamw",
        beta_1=0.9,
        beta_2=0.999,
        learning_rate=1e-3,
        weight_decay=0.03,
        schedule="linear",
        warmup_steps=10_000,
        global_clipnorm=1.0,
        loss="sigmoid",
        head_bias_init=-10.0,
        augment="inception",
        flip=True,
        randaugment=None,
        mixup_alpha=0.0,
        init=None,
    ),
    "cifar10_finetune": dict(  # vit_jax configs/common.py cifar10 preset + paper appendix B.1.1
        dataset="tfds:cifar10", train_split="train[:98%]", eval_split="test", label_smoothing=0.0, **_FINETUNE_384
    ),
    "finetune": dict(  # paper appendix B.1.1's optimiser; the model and the step counts are the run's (resolve.py)
        eval_resize_small=None,
        variant=None,
        image_size=None,
        model={},
        batch_size=None,
        optimizer="sgd",
        momentum=0.9,
        learning_rate=0.03,
        weight_decay=0.0,
        schedule="cosine",
        warmup_steps=None,
        global_clipnorm=1.0,
        augment="inception",
        crop_area=(0.05, 1.0),
        flip=True,
        randaugment=None,
        mixup_alpha=0.0,
        label_smoothing=0.0,
        init_head=False,
    ),
    "imagenet_finetune_384": dict(  # vit_jax configs/common.py imagenet2012 preset + paper appendix B.1.1
        dataset="tfds:imagenet2012", train_split="train[:99%]", eval_split="validation", **_FINETUNE_384
    ),
}
TOTAL_STEPS = {"cifar10_finetune": 10_000, "imagenet_finetune_384": 20_000}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_recipe_matches_its_reference_table(name):
    config = get_config(name).to_dict()
    drift = {
        key: (config[key], want)
        for key, want in REFERENCE[name].items()
        if not (config[key] == pytest.approx(want) if isinstance(want, float) else config[key] == want)
    }
    assert not drift, f"{name} differs from its reference (recipe, reference): {drift}"
    if name in TOTAL_STEPS:
        assert config["steps_per_epoch"] * config["epochs"] == TOTAL_STEPS[name]


def test_every_recipe_is_in_the_table_or_is_a_project_recipe():
    assert set(available_configs()) == set(REFERENCE) | {"digits", "digits_augreg", "digits_lora"}


def test_digits_augreg_has_the_shape_of_the_imagenet_recipe():
    small, big = get_config("digits_augreg"), get_config("imagenet1k_s16")
    same = (
        "optimizer",
        "learning_rate",
        "weight_decay",
        "schedule",
        "global_clipnorm",
        "loss",
        "augment",
        "randaugment",
        "mixup_alpha",
        "mixup_images",
    )
    assert {k: getattr(small, k) for k in same} == {k: getattr(big, k) for k in same}
    assert {k: small.model[k] for k in ("pooling", "class_token", "position_embedding")} == {
        k: big.model[k] for k in ("pooling", "class_token", "position_embedding")
    }


def _recipe_section(name):
    """The `### `name`` section of docs/training.md's Recipes."""
    text = (support.ROOT / "docs" / "training.md").read_text()
    start = text.index(f"### `{name}`\n")
    end = min(i for i in (text.find("\n### ", start + 1), text.find("\n## ", start + 1)) if i > 0)
    return text[start:end]


@pytest.mark.parametrize("name", [*sorted(REFERENCE), "digits_augreg"])
def test_recipe_docs_state_reference_published_number_and_deviations(name):
    section = _recipe_section(name)
    for heading in ("Reference:", "Published:", "Deviations"):
        assert heading in section, f"{name}: no {heading!r} section in docs/training.md"
    assert "python -m training --config " + name in section
    doc = __import__(f"training.configs.{name}", fromlist=["get_config"]).__doc__
    assert "python -m training --config " + name in doc


def test_docs_say_what_the_code_does():
    i21k = _recipe_section("imagenet21k_b16")
    assert "first 51,200" in i21k and "last 51,200" not in i21k
    cifar = _recipe_section("cifar10_finetune")
    assert "500-step run with 50 warm-up steps" in cifar
    import training.options.config

    assert "AugReg" not in training.options.config.TrainConfig.__doc__.split("head_bias_init:")[1].split("\n")[0]


@pytest.mark.slow
def test_extra_evals_are_reported_in_metrics_json(tmp_path):
    """A run on a tiny TFDS dataset with two extra splits: "test_again" repeats the main split (same numbers),
    "first12" is checked against the model's own predictions on those images, computed with numpy."""
    import training
    from tests.support.tfds_fakes import tiny_shapes
    from training import data

    name = tiny_shapes(tmp_path / "tfds")
    result = training.train(
        dict(
            TINY_CONFIG,
            dataset=f"tfds:{name}",
            train_split="train",
            eval_split="test",
            variant="testing",
            model={"patch_size": 8},
            batch_size=6,
            plots=True,
            eval_resize_small=18,
            extra_evals={"test_again": "test", "first12": "train[:12]"},
        ),
        str(tmp_path / "run"),
        data_dir=str(tmp_path / "tfds"),
        verbose=0,
    )
    with open(tmp_path / "run" / "metrics.json") as f:
        metrics = json.load(f)
    assert set(metrics["evals"]) == {"test_again", "first12"}
    assert metrics["evals"]["test_again"]["top1"] == pytest.approx(metrics["top1"])
    assert metrics["evals"]["test_again"]["loss"] == pytest.approx(metrics["loss"], rel=1e-5)
    source = data.load_source(
        f"tfds:{name}", data_dir=str(tmp_path / "tfds"), train_split="train[:12]", eval_split="train[:12]"
    )
    images, labels = zip(
        *[(data.eval_preprocess(source.decode(raw), 16, 18).numpy(), int(label)) for raw, label in source.heldout]
    )
    logits = result.model.predict(np.stack(images), verbose=0)
    top1 = float((np.argmax(logits, -1) == np.asarray(labels)).mean())
    first12 = metrics["evals"]["first12"]
    assert first12["top1"] == pytest.approx(top1) and first12["num_heldout"] == 12
    log_softmax = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    assert first12["loss"] == pytest.approx(float(-log_softmax[np.arange(12), labels].mean()), rel=1e-4)
