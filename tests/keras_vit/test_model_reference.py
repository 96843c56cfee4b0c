"""create_model + load_npz against an independent numpy ViT (tests/support/numpy_vit.py) and the golden fixtures."""

import json

import numpy as np
import pytest

import keras_vit
from tests.support import numpy_vit
from tests.support.checkpoints import resnet_checkpoint, vit_checkpoint


def _save(tmp_path, ckpt, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **ckpt)
    return path


def _assert_close(actual, expected, rtol=1e-5):
    # 1e-5 relative to the logits' scale (float32 round-off through a dozen layers).
    scale = np.abs(expected).max()
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("pooling", ["token", "gap"])
@pytest.mark.parametrize("pre_logits", [None, 24])
def test_testing_variant_matches_numpy(tmp_path, pooling, pre_logits):
    rng = np.random.default_rng(1)
    ckpt = vit_checkpoint(
        rng, hidden=32, layers=2, heads=2, mlp=128, patch=8, grid=(4, 4), classes=10, pre_logits=pre_logits
    )
    model = keras_vit.create_model("testing", pooling=pooling, representation_size=pre_logits)
    report = keras_vit.load_npz(model, _save(tmp_path, ckpt))
    assert sorted(report.loaded) == sorted(ckpt)  # every tensor used
    images = rng.uniform(-1, 1, (3, 32, 32, 3)).astype(np.float32)
    expected = numpy_vit.vit_forward(images, ckpt, num_layers=2, pooling=pooling)
    _assert_close(model.predict(images, verbose=0), expected)


def test_non_square_image_matches_numpy(tmp_path):
    rng = np.random.default_rng(2)
    ckpt = vit_checkpoint(rng, hidden=32, layers=2, heads=2, mlp=128, patch=8, grid=(3, 5), classes=4)
    model = keras_vit.create_model("testing", image_size=(24, 40), num_classes=4)
    keras_vit.load_npz(model, _save(tmp_path, ckpt))
    images = rng.uniform(-1, 1, (2, 24, 40, 3)).astype(np.float32)
    _assert_close(model.predict(images, verbose=0), numpy_vit.vit_forward(images, ckpt, num_layers=2))


@pytest.mark.slow
def test_ti16_matches_numpy(tmp_path):
    rng = np.random.default_rng(3)
    ckpt = vit_checkpoint(rng, hidden=192, layers=12, heads=3, mlp=768, patch=16, grid=(14, 14), classes=1000)
    model = keras_vit.create_model("Ti/16")
    keras_vit.load_npz(model, _save(tmp_path, ckpt))
    images = rng.uniform(-1, 1, (2, 224, 224, 3)).astype(np.float32)
    _assert_close(model.predict(images, verbose=0), numpy_vit.vit_forward(images, ckpt, num_layers=12))


def test_residual_unit_matches_numpy():
    from keras_vit.layers import ResidualUnit

    rng = np.random.default_rng(4)
    ckpt = resnet_checkpoint(rng, stage_units=(1,), width=64)
    unit = ResidualUnit(64, strides=2)
    x = rng.standard_normal((2, 9, 9, 64)).astype(np.float32)  # odd size: exercises SAME's asymmetric padding
    unit.build(x.shape)
    for name in ("conv1", "conv2", "conv3", "conv_proj"):
        getattr(unit, name).kernel.assign(ckpt[f"block1/unit1/{name}/kernel"])
        norm = getattr(unit, name.replace("conv", "gn"))
        norm.gamma.assign(ckpt[f"block1/unit1/{name.replace('conv', 'gn')}/scale"])
        norm.beta.assign(ckpt[f"block1/unit1/{name.replace('conv', 'gn')}/bias"])
    expected = numpy_vit.residual_unit(
        x.astype(np.float64), {k: v.astype(np.float64) for k, v in ckpt.items()}, "block1/unit1", stride=2
    )
    _assert_close(np.asarray(unit(x)), expected)


def test_small_hybrid_matches_numpy(tmp_path):
    """A hybrid with one unit per stage (the R50 layout, cut short) on 64 px: ResNet stem then 1x1 patches."""
    rng = np.random.default_rng(5)
    stages = (1, 1, 1)
    ckpt = resnet_checkpoint(rng, stages)
    ckpt.update(
        vit_checkpoint(rng, hidden=32, layers=1, heads=2, mlp=64, patch=1, grid=(4, 4), classes=5, embed_in=1024)
    )
    model = keras_vit.create_model(
        "R50+B/16",
        image_size=64,
        resnet_layers=stages,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        mlp_dim=64,
        num_classes=5,
    )
    report = keras_vit.load_npz(model, _save(tmp_path, ckpt))
    assert sorted(report.loaded) == sorted(ckpt)
    images = rng.uniform(-1, 1, (2, 64, 64, 3)).astype(np.float32)
    features = numpy_vit.resnet_stem(images, ckpt, stages)
    assert features.shape == (2, 4, 4, 1024)
    expected = numpy_vit.vit_forward(None, ckpt, num_layers=1, features=features)
    _assert_close(model.predict(images, verbose=0), expected)


@pytest.mark.slow
def test_r50_b16_checkpoint_keys_map_one_to_one(tmp_path):
    """Every key of a full R50+B/16 checkpoint layout maps to a variable of the right shape, and vice versa."""
    from keras_vit.weights import checkpoint_variables

    model = keras_vit.create_model("R50+B/16")
    table = checkpoint_variables(model)
    rng = np.random.default_rng(0)
    expected = resnet_checkpoint(rng, (3, 4, 9))
    expected.update(
        vit_checkpoint(
            rng, hidden=768, layers=12, heads=12, mlp=3072, patch=1, grid=(14, 14), classes=1000, embed_in=1024
        )
    )
    assert sorted(table) == sorted(expected)
    for key, value in expected.items():
        assert tuple(table[key].shape) == value.shape, key
    assert len(table) == len(model.weights)


# ----- golden tensors from an independent reference implementation (timm) -----


@pytest.fixture(scope="module")
def reference(fixtures_dir):
    with np.load(fixtures_dir / "vit_tiny_reference_io.npz") as data:
        return dict(data)


def _fixture_model(fixtures_dir, **overrides):
    config = json.loads((fixtures_dir / "vit_tiny_config.json").read_text())
    options = dict(
        image_size=config["img_size"],
        patch_size=config["patch_size"],
        hidden_size=config["embed_dim"],
        num_layers=config["depth"],
        num_heads=config["num_heads"],
        mlp_dim=config["mlp_dim"],
        num_classes=config["num_classes"],
        layer_norm_epsilon=config["layer_norm_epsilon"],
        pooling=config["pooling"],
        representation_size=config["representation_size"],
    )
    model = keras_vit.create_model("testing", **{**options, **overrides})
    keras_vit.load_npz(model, fixtures_dir / "vit_tiny_official.npz")
    return model


@pytest.mark.parametrize("gelu", ["tanh", "exact"])
def test_golden_logits(fixtures_dir, reference, gelu):
    model = _fixture_model(fixtures_dir, gelu=gelu)
    logits = model.predict(reference["x32"], verbose=0)
    np.testing.assert_allclose(logits, reference[f"logits32_gelu_{gelu}"], atol=1e-5, rtol=0)


def test_golden_gelu_flavours_differ(reference):
    # Guards the test above: the two golden sets must differ by more than its tolerance.
    assert np.abs(reference["logits32_gelu_tanh"] - reference["logits32_gelu_exact"]).max() > 1e-5


def test_golden_resized_input(fixtures_dir, reference):
    model = _fixture_model(fixtures_dir, image_size=48)
    np.testing.assert_allclose(
        model.get_layer("posembed_input").pos_embedding.numpy(), reference["pos_embedding48_scipy_zoom"], atol=1e-6
    )
    logits = model.predict(reference["x48"], verbose=0)
    np.testing.assert_allclose(logits, reference["logits48_gelu_tanh_scipy_zoom"], atol=1e-5, rtol=0)
