"""`--config finetune --init SOURCE`: the model the checkpoint describes, step counts scaled to the data set.

The expected variants and figures are the paper's (Table 1: Ti/16 is width 192, 12 layers, 3 heads, MLP 768) and
the arithmetic of the recipe's rules written out here, not read back from `training.options.resolve`.
"""

import json
import os
import warnings

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.weights import checkpoint_variables
from keras_vit.weights.checkpoint import Checkpoint
from tests.support.processes import call_cli
from training.checkpoints.init_checkpoint import read_init
from training.configs import get_config
from training.options import resolve
from training.options.config import TrainConfig
from training.options.overrides import parse_overrides


def _checkpoint(**options):
    base = keras_vit.get_variant("Ti/16").replace(image_size=224, num_classes=1000).to_dict()
    return Checkpoint(params={}, options={**base, **options}, source="ckpt.npz")


def test_the_recipe_takes_the_checkpoints_variant_resolution_and_form():
    config = get_config("finetune").replace(init="ckpt.npz")
    ckpt = _checkpoint(pooling="gap", class_token=False, representation_size=192, gelu="exact")
    resolved = resolve.resolve_model(config, ckpt)
    assert (resolved.variant, resolved.image_size) == ("Ti/16", 224)
    assert resolved.model["pooling"] == "gap" and resolved.model["class_token"] is False
    assert resolved.model["representation_size"] == 192 and resolved.model["gelu"] == "exact"
    # The user's own settings win over the checkpoint's: a higher resolution, a dropout rate.
    stated = resolve.resolve_model(config.replace(image_size=384, **{"model.dropout_rate": 0.1}), ckpt)
    assert stated.image_size == 384 and stated.model["dropout_rate"] == 0.1 and stated.variant == "Ti/16"


def test_a_checkpoint_of_no_table_variant_is_built_from_its_shapes():
    ckpt = _checkpoint(hidden_size=48, num_layers=2, num_heads=3, mlp_dim=192, patch_size=8, image_size=(32, 32))
    resolved = resolve.resolve_model(get_config("finetune").replace(init="x"), ckpt)
    assert resolved.variant == "testing" and resolved.image_size == 32
    assert {k: resolved.model[k] for k in ("hidden_size", "num_layers", "num_heads", "mlp_dim", "patch_size")} == {
        "hidden_size": 48,
        "num_layers": 2,
        "num_heads": 3,
        "mlp_dim": 192,
        "patch_size": 8,
    }


def test_a_stated_variant_that_contradicts_the_checkpoint_is_one_line_naming_both_and_the_fix():
    config = get_config("cifar10_finetune").replace(init="ckpt.npz")  # the recipe states B/16
    with pytest.raises(ValueError) as err:
        resolve.resolve_model(config, _checkpoint())
    message = str(err.value)
    assert "\n" not in message
    assert "hidden_size=192" in message and "variant='B/16' has" in message and "hidden_size=768" in message
    assert "--set variant=Ti/16" in message and "--config finetune" in message


def test_the_checkpoints_model_needs_a_checkpoint():
    with pytest.raises(ValueError, match=r"variant=None means the --init checkpoint's, but the run has no --init"):
        resolve.resolve_run(get_config("finetune"), None, num_train=100, replicas=1)


def test_model_variant_points_to_the_variant_option():
    with pytest.raises(ValueError, match=r"set variant itself \(--set variant=Ti/16\)"):
        TrainConfig(**parse_overrides(["model.variant=Ti/16"]))


@pytest.mark.parametrize(
    "num_train, replicas, batch, steps_per_epoch",
    [(24, 1, 16, 1), (40, 1, 32, 1), (100, 1, 64, 1), (49_000, 1, 512, 95), (40, 3, 30, 1), (7, 8, 8, 1)],
)
def test_the_batch_and_step_counts_scale_to_the_data_set(num_train, replicas, batch, steps_per_epoch):
    config = get_config("finetune").replace(variant="testing", image_size=32, epochs=10)
    resolved = resolve.resolve_run(config, None, num_train=num_train, replicas=replicas)
    assert resolved.batch_size == batch and resolved.batch_size % replicas == 0
    total = steps_per_epoch * 10
    assert resolved.warmup_steps == round(0.05 * total) < total  # the paper's 500 of 10k steps
    divisors = [d for d in range(1, min(50, steps_per_epoch) + 1) if steps_per_epoch % d == 0]
    assert resolved.steps_per_execution == max(divisors)


def test_stated_counts_are_kept():
    config = get_config("finetune").replace(
        variant="testing", image_size=32, batch_size=8, warmup_steps=3, steps_per_execution=2
    )
    resolved = resolve.resolve_run(config, None, num_train=1000, replicas=1)
    assert (resolved.batch_size, resolved.warmup_steps, resolved.steps_per_execution) == (8, 3, 2)


def test_a_catalogue_name_in_the_cache_resolves_to_its_model(tmp_path, monkeypatch):
    """The issue's command: the AugReg Ti/16 by its catalogue name, a file of the released layout in the cache."""
    from keras_vit.weights import catalogue, sources

    monkeypatch.setenv("KERAS_VIT_CACHE", str(tmp_path / "cache"))
    name = "vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    path = sources.entry_cache_path(catalogue.find(name))
    os.makedirs(os.path.dirname(path))
    model = keras_vit.create_model("Ti/16", image_size=224, num_classes=1000)
    np.savez(path, **{k: np.asarray(v.numpy()) for k, v in checkpoint_variables(model).items()})
    config = get_config("finetune").replace(init=name)
    resolved = resolve.resolve_run(config, read_init(name), num_train=40, replicas=1)
    assert (resolved.variant, resolved.image_size, resolved.batch_size) == ("Ti/16", 224, 32)
    assert resolved.model["representation_size"] is None and resolved.model["pooling"] == "token"


@pytest.fixture(scope="module")
def photos_and_checkpoint(tmp_path_factory):
    """A folder of 3 classes x 10 PNG photos and a small pretrained checkpoint (.npz) at 32 px."""
    root = tmp_path_factory.mktemp("finetune")
    rng = np.random.default_rng(0)
    for label, colour in enumerate(((200, 40, 40), (40, 200, 40), (40, 40, 200))):
        folder = root / "photos" / f"class_{label}"
        folder.mkdir(parents=True)
        for i in range(10):
            pixels = np.clip(rng.normal(colour, 30, (40, 48, 3)), 0, 255).astype("uint8")
            Image.fromarray(pixels).save(folder / f"{i}.png")
    model = keras_vit.create_model("testing", image_size=32, num_classes=10, hidden_size=48, num_heads=3, mlp_dim=96)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.05, variable.shape).astype("float32"))
    np.savez(root / "vit.npz", **{k: np.asarray(v.numpy()) for k, v in checkpoint_variables(model).items()})
    return root


@pytest.mark.slow
def test_the_finetune_command_trains_evaluates_and_exports_a_folder_of_photos(
    photos_and_checkpoint, capfd, monkeypatch
):
    from export.__main__ import main as export_main
    from training.__main__ import main as train_main

    # The commands called in this process (what they print and write is what is checked), from the user's folder.
    root = photos_and_checkpoint
    monkeypatch.chdir(root)
    workdir = root / "run"
    command = ["--config", "finetune", "--init", root / "vit.npz"]
    command += ["--dataset", f"folder:{root / 'photos'}", "--epochs", "2", "--workdir", workdir]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trained = call_cli(train_main, *command, capfd=capfd)
    assert trained.returncode == 0, trained.stderr[-3000:]
    output = trained.stdout + trained.stderr
    # Nothing to correct on a small folder: no note on steps_per_execution, no warning on the warm-up.
    assert "note:" not in output and "warmup" not in output.lower(), output[-3000:]
    # The head it was asked to replace is said in the run's own line, not warned about (warnings are for surprises).
    assert not [w for w in caught if w.category is UserWarning], [str(w.message) for w in caught]
    assert "UserWarning" not in output and "skipped head" not in output, output[-3000:]
    assert f"[training] --init {root / 'vit.npz'}: " in trained.stdout and "; new 3-class head\n" in trained.stdout
    recorded = json.loads((workdir / "config.json").read_text())
    # 24 training images (20% of 30 held out): the largest power of two they hold is 16, one step per epoch.
    assert (recorded["variant"], recorded["image_size"], recorded["batch_size"]) == ("testing", 32, 16)
    assert recorded["model"]["hidden_size"] == 48 and recorded["warmup_steps"] == 0
    assert recorded["optimizer"] == "sgd" and recorded["momentum"] == 0.9 and recorded["weight_decay"] == 0.0
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["num_heldout"] == 6 and metrics["steps"] == 2 and 0.0 <= metrics["top1"] <= 1.0
    assert metrics["plots"] and all((workdir / path).is_file() for path in metrics["plots"].values())
    # The same command again resumes (nothing left to train) without reading the checkpoint's folder again.
    (root / "vit.npz").rename(root / "moved.npz")
    again = call_cli(train_main, *command, capfd=capfd)
    assert again.returncode == 0, again.stderr[-3000:]
    exported = call_cli(export_main, workdir, "--quantize", "float32", "--latency-runs", "1", capfd=capfd)
    assert exported.returncode == 0 and "status: PASSED" in exported.stdout, exported.stdout[-3000:]


@pytest.mark.slow  # two fine-tuning runs and their exports in every format
@pytest.mark.parametrize("fixture", ["timm_dinov3_small", "timm_eva02_tiny"])
def test_a_dinov3_and_an_eva02_folder_fine_tune_from_the_command_line_and_export(
    photos_and_checkpoint, fixture, capfd, monkeypatch
):
    from export.__main__ import main as export_main
    from tests import support
    from training.__main__ import main as train_main

    root = photos_and_checkpoint
    monkeypatch.chdir(root)
    init, workdir = support.FIXTURES / "interop_families2" / fixture, root / f"run_{fixture}"
    command = ["--config", "finetune", "--init", init, "--dataset", f"folder:{root / 'photos'}", "--epochs", "1"]
    trained = call_cli(train_main, *command, "--workdir", workdir, capfd=capfd)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert f"[training] --init {init}: " in trained.stdout and "; new 3-class head\n" in trained.stdout
    recorded = json.loads((workdir / "config.json").read_text())["model"]
    rope = {"timm_dinov3_small": "dinov3", "timm_eva02_tiny": "eva"}[fixture]
    assert recorded["rope"] == rope and recorded["hidden_size"] == 48, recorded
    exported = call_cli(export_main, workdir, "--quantize", "float32", "--latency-runs", "1", capfd=capfd)
    assert exported.returncode == 0 and "status: PASSED" in exported.stdout, exported.stdout[-3000:]
    for name in ("saved_model", "model_float32.tflite", "model.onnx", "model.xml"):
        assert (workdir / "export" / name).exists(), name
