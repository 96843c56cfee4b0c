"""Fine-tuning: --init from .npz (original layout) or .keras at a new resolution with a new class count, and from
a catalogue name, a `hf://` repo and timm / transformers / keras-hub folders."""

import os
import re
import warnings

import keras
import numpy as np
import pytest

import keras_vit
import training
from keras_vit.weights import checkpoint_variables
from tests import support
from tests.support.hosts import hub_files
from training.model_setup import build_model
from training.options.config import TrainConfig


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A 'testing' ViT at 32 px with 10 named classes and random non-zero weights, as .npz and .keras."""
    directory = tmp_path_factory.mktemp("pretrained")
    names = [f"pretrained {i}" for i in range(10)]
    model = keras_vit.create_model("testing", image_size=32, num_classes=10, class_names=names)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.05, variable.shape).astype("float32"))
    np.savez(directory / "vit.npz", **{k: np.asarray(v.numpy()) for k, v in checkpoint_variables(model).items()})
    model.save(directory / "vit.keras")
    return model, directory


def _finetune_config(init, **overrides):
    defaults = dict(
        dataset="synthetic",
        variant="testing",
        image_size=48,
        init=str(init),
        batch_size=16,
        epochs=1,
        steps_per_epoch=3,
        optimizer="sgd",
        learning_rate=0.01,
        eval_every=0,
        jit_compile=False,
        strategy="default",
        num_samples=8,
        num_calibration=8,
    )
    return TrainConfig(**{**defaults, **overrides})


def _without_head_warning(build, capsys, init, num_classes):
    """`build()`'s result, after checking that the head it replaces is named in the run's line, not warned about."""
    capsys.readouterr()  # what came before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = build()
    assert not [w for w in caught if "skipped head" in str(w.message)], [str(w.message) for w in caught]
    prefix = f"[training] --init {init}: "
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(prefix)]
    assert re.fullmatch(rf"\d+ tensors loaded; (.+; )?new {num_classes}-class head", line[len(prefix) :]), line
    return result


@pytest.mark.parametrize("suffix", ["npz", "keras"])
def test_init_at_a_new_resolution_with_a_fresh_head(pretrained, suffix, capsys):
    source, directory = pretrained
    config = _finetune_config(directory / f"vit.{suffix}")
    model = _without_head_warning(lambda: build_model(config, num_classes=3), capsys, config.init, 3)
    assert model.config.image_size == (48, 48) and model.output_shape == (None, 3)
    # The 4x4 grid of position embeddings was interpolated to 6x6 (class row kept), everything else copied.
    expected = keras_vit.layers.resize_position_embedding(
        source.get_layer("posembed_input").pos_embedding.numpy(),
        (6, 6),
        old_grid=(4, 4),
        num_prefix_tokens=1,
        method="zoom",
    )
    np.testing.assert_allclose(model.get_layer("posembed_input").pos_embedding.numpy(), expected, atol=1e-6)
    np.testing.assert_array_equal(
        model.get_layer("embedding").kernel.numpy(), source.get_layer("embedding").kernel.numpy()
    )
    np.testing.assert_array_equal(
        model.get_layer("encoderblock_1").mlp.dense_1.kernel.numpy(),
        source.get_layer("encoderblock_1").mlp.dense_1.kernel.numpy(),
    )
    assert not model.get_layer("head").kernel.numpy().any() and not model.get_layer("head").bias.numpy().any()


@pytest.mark.slow
def test_finetune_end_to_end_32_to_48_with_three_classes(pretrained, tmp_path, capsys):
    from PIL import Image

    _, directory = pretrained
    rng = np.random.default_rng(1)
    for c, name in enumerate(["a", "b", "c"]):
        (tmp_path / "data" / name).mkdir(parents=True)
        for i in range(12):
            pixels = rng.integers(0, 80, (20, 20, 3), dtype=np.uint8)
            pixels[..., c] += 150
            Image.fromarray(pixels).save(tmp_path / "data" / name / f"{i}.png")
    config = _finetune_config(directory / "vit.npz").replace(
        dataset=f"folder:{tmp_path / 'data'}", holdout_fraction=0.25, batch_size=8, epochs=3
    )
    result = _without_head_warning(
        lambda: training.train(config, str(tmp_path / "run"), verbose=0), capsys, config.init, 3
    )
    assert result.model.output_shape == (None, 3) and result.model.input_shape == (None, 48, 48, 3)
    assert result.metrics["steps"] == 9 and np.isfinite(result.metrics["loss"])
    assert (tmp_path / "run" / "labels.txt").read_text() == "a\nb\nc\n"
    # The run's class names, not the checkpoint's, travel in model.keras (what `python -m export` labels with).
    assert result.model.class_names == ("a", "b", "c")
    assert keras.saving.load_model(tmp_path / "run" / "model.keras").class_names == ("a", "b", "c")
    with np.load(tmp_path / "run" / "samples" / "heldout.npz") as samples:
        # num_samples=8 of the 9 held-out images, at the new model size.
        assert samples["images"].shape == (8, 48, 48, 3) and samples["images"].dtype == np.uint8
    assert np.abs(result.model.get_layer("head").kernel.numpy()).max() > 0  # the new head trained


def test_bad_init_and_non_divisible_image_size(tmp_path):
    with pytest.raises(FileNotFoundError, match="--init checkpoint not found"):
        build_model(_finetune_config(tmp_path / "missing.npz"), 3)
    (tmp_path / "weights.h5").write_bytes(b"x")
    with pytest.raises(ValueError, match="is a file keras-vit does not read on its own; pass a .npz checkpoint"):
        build_model(_finetune_config(tmp_path / "weights.h5"), 3)
    with pytest.raises(ValueError, match="multiple of 8.*Nearest valid sizes: 48 or 56"):
        training.train(TrainConfig(dataset="synthetic", image_size=50, strategy="default"), str(tmp_path / "r"))


@pytest.mark.parametrize("suffix", ["npz", "keras"])
def test_fine_tuning_starts_a_fresh_head_even_when_the_class_count_fits(pretrained, suffix):
    """The references always reset the head for fine-tuning; `init_head=True` keeps the checkpoint's."""
    source, directory = pretrained
    model = build_model(_finetune_config(directory / f"vit.{suffix}", image_size=32), num_classes=10)
    assert not model.get_layer("head").kernel.numpy().any() and not model.get_layer("head").bias.numpy().any()
    np.testing.assert_array_equal(
        model.get_layer("encoder_norm").gamma.numpy(), source.get_layer("encoder_norm").gamma.numpy()
    )
    biased = build_model(_finetune_config(directory / f"vit.{suffix}", image_size=32, head_bias_init=-10.0), 10)
    np.testing.assert_array_equal(biased.get_layer("head").bias.numpy(), np.full(10, -10.0, np.float32))
    kept = build_model(_finetune_config(directory / f"vit.{suffix}", image_size=32, init_head=True), num_classes=10)
    np.testing.assert_array_equal(kept.get_layer("head").kernel.numpy(), source.get_layer("head").kernel.numpy())


# --- --init from every kind of source `keras_vit.load_weights` takes, against outputs computed elsewhere -----------

INTEROP = support.FIXTURES / "interop"
# The fixtures' architecture as their README states it (width 48, depth 2, heads 3, MLP 192, patch 8, 32 px, exact
# GELU; transformers' default LayerNorm epsilon 1e-12), and the output their library computed.
FOLDERS = {
    "timm_vit_tiny": {},
    "hf_vit_for_image_classification": {"layer_norm_epsilon": 1e-12},
    "keras_hub_vit_image_classifier": {},
}
TINY_48 = {"hidden_size": 48, "num_layers": 2, "num_heads": 3, "mlp_dim": 192, "patch_size": 8, "gelu": "exact"}


def _library_logits(fixture):
    with np.load(INTEROP / fixture / "io.npz") as io:
        return io["images"], io["logits"]


@pytest.mark.parametrize("fixture", sorted(FOLDERS))
def test_init_from_each_folder_layout_gives_the_library_outputs(fixture, capsys):
    config = _finetune_config(INTEROP / fixture, image_size=32, init_head=True, model={**TINY_48, **FOLDERS[fixture]})
    model = build_model(config, num_classes=5)
    images, logits = _library_logits(fixture)
    np.testing.assert_allclose(model.predict(images, verbose=0), logits, atol=1e-5)
    # The fine-tuning default: the same encoder, a fresh head, at 48 px.
    fresh_config = config.replace(image_size=48, init_head=False)
    fresh = _without_head_warning(lambda: build_model(fresh_config, num_classes=3), capsys, config.init, 3)
    assert not fresh.get_layer("head").kernel.numpy().any()
    np.testing.assert_array_equal(fresh.get_layer("embedding").kernel.numpy(), model.get_layer("embedding").kernel)


# `server`, `env`: the loopback bucket and Hub of tests/support/hosts.py (huggingface_hub's own client talks to it).
def test_init_from_a_loopback_hub_repo_gives_the_library_outputs(server, env):
    folder = INTEROP / "timm_vit_tiny"
    hub_files(
        server, "timm/vit_tiny_test", "main", {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "io.npz"}
    )
    config = _finetune_config("hf://timm/vit_tiny_test", image_size=32, init_head=True, model=TINY_48)
    model = build_model(config, num_classes=5)
    images, logits = _library_logits("timm_vit_tiny")
    np.testing.assert_allclose(model.predict(images, verbose=0), logits, atol=1e-5)
    assert ("GET", "/timm/vit_tiny_test/resolve/main/model.safetensors") in [m[:2] for m in server.state.requests]
    assert str(env / "hub") in os.path.realpath(next((env / "hub").rglob("model.safetensors")))


@pytest.mark.slow
def test_init_from_a_catalogue_name_reads_the_cache_without_a_request(server, env):
    """A catalogue name whose file the test placed in the (temporary) cache: loaded from there, no request made."""
    from keras_vit.weights import catalogue, sources

    # A file passes the cache's content check when it has the entry's tensors and head width (1000 classes here,
    # no published size): a 'testing' model with a 1000-class head under the AugReg Ti/16 entry's name.
    entry = catalogue.get("vit_tiny_patch16_224.augreg_in21k_ft_in1k")
    source = keras_vit.create_model("testing", image_size=32, num_classes=1000)
    rng = np.random.default_rng(1)
    for variable in source.weights:
        variable.assign(rng.normal(0, 0.05, variable.shape).astype("float32"))
    path = sources.entry_cache_path(entry)
    os.makedirs(os.path.dirname(path))
    np.savez(path, **{k: np.asarray(v.numpy()) for k, v in checkpoint_variables(source).items()})
    assert path.startswith(str(env / "cache"))
    model = build_model(_finetune_config(entry.name, image_size=32, init_head=True), num_classes=1000)
    images = np.random.default_rng(3).uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    expected = source.predict(images, verbose=0)
    assert np.abs(expected).max() > 0.01  # a random head: not a comparison between zeros
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, atol=1e-6)
    for mine, theirs in zip(model.weights, source.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs), err_msg=mine.path)
    assert server.state.requests == []


# --- --config finetune (variant=None): the model is the checkpoint's, whatever its family ---------------------------

FAMILIES = {
    "timm_dinov2_small_reg4": support.FIXTURES / "interop_families",  # registers, LayerScale
    "timm_deit3_small": support.FIXTURES / "interop_families",  # LayerScale, no position row for the class token
    "timm_clip_quickgelu": support.FIXTURES / "interop_families",  # pre-norm, QuickGELU
    "timm_dinov3_small": support.FIXTURES / "interop_families2",  # RoPE, no position table
    "timm_eva02_tiny": support.FIXTURES / "interop_families2",  # RoPE with a table, packed SwiGLU, q/v biases
    "timm_pe_core_tiny": support.FIXTURES / "interop_families2",  # RoPE (x, y), an 8-head MAP pool
    "timm_aimv2": support.FIXTURES / "interop_families2",  # RMSNorm, SwiGLU, no biases
}


@pytest.mark.parametrize("fixture", sorted(FAMILIES))
def test_the_finetune_recipe_builds_the_checkpoints_family(fixture):
    from keras_vit.weights.model_io import read_checkpoint
    from training.options.resolve import resolve_model

    folder = FAMILIES[fixture] / fixture
    with np.load(folder / "io.npz") as io:
        images, logits = io["images"], io["logits"]
    config = _finetune_config(folder, variant=None, image_size=images.shape[1], init_head=True)
    config = resolve_model(config, read_checkpoint(str(folder)))
    model = build_model(config, num_classes=logits.shape[-1])
    scale = max(1.0, float(np.abs(logits).max()))
    np.testing.assert_allclose(model.predict(images, verbose=0) / scale, logits / scale, rtol=0, atol=1e-5)


@pytest.mark.slow  # a 3-step fine-tuning run and its model.keras reloaded
def test_finetune_dinov3_end_to_end(tmp_path):
    folder = support.FIXTURES / "interop_families2" / "timm_dinov3_small"
    config = training.get_config("finetune").replace(
        dataset="synthetic", init=str(folder), image_size=48, batch_size=8, epochs=1, steps_per_epoch=3,
        eval_every=0, jit_compile=False, strategy="default", num_samples=4, num_calibration=4, plots=False,
    )  # fmt: skip
    result = training.train(config, str(tmp_path), verbose=0)
    assert result.metrics["steps"] == 3 and np.isfinite(result.metrics["loss"])
    saved = keras.saving.load_model(tmp_path / "model.keras")
    assert (saved.config.rope, saved.config.num_registers, saved.config.image_size) == ("dinov3", 4, (48, 48))
    probe = np.random.default_rng(0).uniform(-1, 1, (2, 48, 48, 3)).astype("float32")
    np.testing.assert_allclose(saved.predict(probe, verbose=0), result.model.predict(probe, verbose=0), atol=1e-6)
