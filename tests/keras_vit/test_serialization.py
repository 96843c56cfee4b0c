"""`.keras` round trips, config round trips of every layer, mixed precision, compiled vs eager."""

import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import layers as L
from tests import support

LAYERS = [
    L.PatchEmbedding(16, 4, name="embedding"),
    L.ClassToken(name="cls"),
    L.PositionEmbedding((2, 3), 1, name="posembed_input"),
    L.PositionEmbedding((2, 2), 0, kind="sincos2d"),
    L.MultiHeadSelfAttention(2, dropout_rate=0.1),
    L.MlpBlock(32, gelu="exact", dropout_rate=0.1),
    L.EncoderBlock(2, 32, dropout_rate=0.1, attention_dropout_rate=0.1, drop_path_rate=0.2, gelu="exact"),
    L.DropPath(0.3, seed=1),
    L.LayerNorm(epsilon=1e-6),
    L.TokenPooling("gap", 1),
    L.StdConv2D(8, 3, padding="same", use_bias=False),
    L.ResidualUnit(32, strides=2),
    L.ResNetStage(2, 32, strides=2),
    L.LayerScale(1e-5),
    L.RegisterTokens(4, insert_at=1),
    L.MAPHead(2, 32, gelu="quick", layer_norm_epsilon=1e-5),
    L.PatchEmbedding(16, 4, use_bias=False),
    L.MlpBlock(32, gelu="quick"),
    L.EncoderBlock(2, 32, layer_scale=1e-6),
    L.TokenPooling("distillation", 2),
    L.StdConv2D(8, 3, padding="same", use_bias=False, ws_epsilon=1e-8, ws_form="var"),
    L.ResNetStage(1, 32, strides=2, norm="timm"),
]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: type(layer).__name__)
def test_layer_config_round_trip(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    # And through Keras' registry, the way .keras loading finds it.
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is type(layer) and revived.get_config() == config


def test_model_config_round_trip():
    model = keras_vit.create_model("testing", pooling="gap", representation_size=16, gelu="exact", image_size=(32, 48))
    clone = keras_vit.VisionTransformer.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert clone.count_params() == model.count_params()


FAMILY_MODELS = {
    "deit3": dict(layer_scale=1e-6, no_embed_class=True),
    "dinov2-reg": dict(layer_scale=1e-5, num_registers=4, no_embed_class=True, patch_size=8),
    "clip": dict(pre_norm=True, patch_bias=False, gelu="quick", layer_norm_epsilon=1e-5),
    "siglip": dict(class_token=False, pooling="map"),
    "deit-distilled": dict(distillation_token=True),
    "fc-norm": dict(pooling="gap", fc_norm=True),
}


@pytest.mark.slow
@pytest.mark.parametrize("options", FAMILY_MODELS.values(), ids=FAMILY_MODELS.keys())
def test_family_model_config_and_keras_file_round_trip(tmp_path, options):
    model = keras_vit.create_model("testing", **options)
    rng = np.random.default_rng(5)
    for w in model.weights:
        w.assign(rng.normal(0, 0.2, w.shape).astype("float32"))
    clone = keras_vit.VisionTransformer.from_config(model.get_config())
    assert clone.get_config() == model.get_config() and clone.count_params() == model.count_params()
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    model.save(tmp_path / "m.keras")
    revived = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_array_equal(revived.predict(images, verbose=0), model.predict(images, verbose=0))


def test_plain_vit_config_has_no_family_keys():
    config = keras_vit.create_model("testing").get_config()
    assert not {"layer_scale", "num_registers", "distillation_token", "fc_norm", "pre_norm"} & set(config)


def test_class_names_survive_config_and_keras_file(tmp_path):
    names = [f"class {i}" for i in range(10)]
    model = keras_vit.create_model("testing", class_names=names)
    assert keras_vit.VisionTransformer.from_config(model.get_config()).class_names == tuple(names)
    model.save(tmp_path / "m.keras")
    assert keras.saving.load_model(tmp_path / "m.keras").class_names == tuple(names)
    assert keras_vit.create_model("testing").class_names is None
    with pytest.raises(ValueError, match="class_names has 3 names for a head of 10 classes"):
        keras_vit.create_model("testing", class_names=["a", "b", "c"])


@pytest.mark.slow
def test_keras_file_round_trip_in_a_fresh_process(tmp_path):
    model = keras_vit.create_model("testing", representation_size=16, stochastic_depth_rate=0.1, dropout_rate=0.1)
    rng = np.random.default_rng(0)
    for w in model.weights:  # non-trivial weights everywhere, the zero-initialised head included
        w.assign(rng.normal(0, 0.1, w.shape).astype("float32"))
    images = rng.uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    expected = model.predict(images, verbose=0)
    model.save(tmp_path / "m.keras")
    np.save(tmp_path / "x.npy", images)
    script = textwrap.dedent(
        f"""
        import numpy as np, keras
        import keras_vit  # registers the layers; no custom_objects below
        model = keras.saving.load_model({str(tmp_path / "m.keras")!r}, safe_mode=True)
        assert type(model).__name__ == "VisionTransformer", type(model)
        np.save({str(tmp_path / "y.npy")!r}, model.predict(np.load({str(tmp_path / "x.npy")!r}), verbose=0))
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=str(_repo_root()), capture_output=True)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


@pytest.mark.slow
def test_mixed_bfloat16_policy(tmp_path):
    rng = np.random.default_rng(1)
    reference = keras_vit.create_model("testing")
    for w in reference.weights:
        w.assign(rng.normal(0, 0.2, w.shape).astype("float32"))
    model = keras_vit.create_model("testing", dtype="mixed_bfloat16")
    model.set_weights(reference.get_weights())
    assert model.get_layer("encoderblock_0").compute_dtype == "bfloat16"
    assert all(w.dtype == "float32" for w in model.weights)  # variables stay float32
    images = rng.uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    logits = model.predict(images, verbose=0)
    assert logits.dtype == np.float32
    expected = reference.predict(images, verbose=0)
    # bfloat16 keeps 8 bits of mantissa: ~1e-2 relative through two blocks.
    assert np.abs(logits - expected).max() < 0.05 * np.abs(expected).max()
    model.save(tmp_path / "bf16.keras")
    revived = keras.saving.load_model(tmp_path / "bf16.keras")
    assert revived.get_layer("encoderblock_0").compute_dtype == "bfloat16"
    np.testing.assert_array_equal(revived.predict(images, verbose=0), logits)


@pytest.mark.slow
def test_compiled_matches_eager():
    rng = np.random.default_rng(2)
    model = keras_vit.create_model("testing")
    for w in model.weights:
        w.assign(rng.normal(0, 0.2, w.shape).astype("float32"))
    images = rng.uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    eager = np.asarray(model(images, training=False))
    model.compile(jit_compile=True)
    np.testing.assert_allclose(model.predict(images, verbose=0), eager, atol=1e-5)


@pytest.mark.slow
def test_fit_one_step_with_regularisation():
    model = keras_vit.create_model("testing", dropout_rate=0.1, attention_dropout_rate=0.1, stochastic_depth_rate=0.2)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(3)
    history = model.fit(
        rng.uniform(-1, 1, (8, 32, 32, 3)).astype("float32"), rng.integers(0, 10, 8), epochs=2, verbose=0
    )
    assert np.isfinite(history.history["loss"]).all()
    assert np.abs(model.get_layer("head").kernel.numpy()).max() > 0  # the zero-initialised head learns


def _repo_root():

    return support.ROOT
