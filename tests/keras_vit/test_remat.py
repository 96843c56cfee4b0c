"""Rematerialisation (`remat=True`/"block": whole encoder blocks; "elementwise": LayerNorm, GELU and softmax from the
matmul outputs): the same outputs and gradients as without, on TensorFlow and JAX, with the work really recomputed in
the backward pass; kept in the model's config and .keras files; whole blocks refused with dropout."""

import json

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.encoder_block import EncoderBlock


def _gradients(monkeypatch):
    """Outputs and gradients without remat and under each setting, and how much each recomputes, on this backend."""
    from keras_vit.layers.mlp import MlpBlock

    calls = []
    activate = MlpBlock._activate

    def counted(self, *args):
        calls.append(self.name)
        return activate(self, *args)

    monkeypatch.setattr(MlpBlock, "_activate", counted)

    def gradients(remat):
        model = keras_vit.create_model("testing", image_size=16, num_classes=3, remat=remat)
        rng = np.random.default_rng(0)
        model.set_weights([rng.normal(0, 0.2, w.shape).astype("float32") for w in model.get_weights()])
        images = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
        labels = np.eye(3, dtype="float32")[[0, 1, 2, 0]]
        loss = keras.losses.CategoricalCrossentropy(from_logits=True)
        calls.clear()
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            with tf.GradientTape() as tape:
                outputs = model(images, training=True)
                value = loss(labels, outputs)
            grads = tape.gradient(value, model.trainable_variables)
            recomputed = len(calls) - 2  # eager: one GELU per block forward, one more per block if recomputed
        else:
            import jax

            non_trainable = [v.value for v in model.non_trainable_variables]

            def f(trainable):
                return loss(labels, model.stateless_call(trainable, non_trainable, images, training=True)[0])

            trainable = [v.value for v in model.trainable_variables]
            outputs = model.stateless_call(trainable, non_trainable, images, training=True)[0]
            grads = jax.grad(f)(trainable)
            text = str(jax.make_jaxpr(jax.grad(f))(trainable))
            recomputed = text.count("checkpoint[") + text.count("remat")  # jax.checkpoint's primitive
        return np.asarray(outputs), [np.asarray(g) for g in grads], recomputed

    plain_out, plain, plain_recomputed = gradients(False)
    result = {"scale": max(float(np.abs(a).max()) for a in plain), "recomputed": {"none": plain_recomputed}}
    for setting in ("block", "elementwise"):
        out, grads, recomputed = gradients(setting)
        result["recomputed"][setting] = recomputed
        result[setting] = {
            "forward_diff": float(np.abs(out - plain_out).max()),
            "diff": max(float(np.abs(a - b).max()) for a, b in zip(plain, grads)),
        }
    return result


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", pytest.param("jax", marks=pytest.mark.jax)])  # in each session
def test_remat_gives_the_same_gradients_and_recomputes(backend, monkeypatch):
    assert keras.backend.backend() == backend
    out = json.loads(json.dumps(_gradients(monkeypatch)))
    print(backend, "remat:", out)
    assert out["scale"] > 1e-2  # non-trivial gradients
    for setting in ("block", "elementwise"):
        assert out[setting]["forward_diff"] == 0.0, (setting, out)  # the training forward pass is unchanged
        assert out[setting]["diff"] < 1e-6, (setting, out)
    recomputed = out["recomputed"]
    assert recomputed["none"] == 0
    if backend == "tensorflow":  # each block's GELU runs again in the backward pass, under both settings
        assert recomputed["block"] == 2 and recomputed["elementwise"] == 2, recomputed
    else:  # jax.checkpoint regions: one per block; four per block (LN+QKV, softmax+AV, LN+Dense_0, GELU+Dense_1)
        assert recomputed["block"] == 2 and recomputed["elementwise"] == 8, recomputed


def test_remat_is_kept_in_the_config_and_refused_with_dropout():
    model = keras_vit.create_model("testing", remat=True)
    assert model.get_config()["remat"] is True
    assert all(layer.remat for layer in model.layers if isinstance(layer, EncoderBlock))
    again = keras_vit.VisionTransformer.from_config(model.get_config())
    assert again.config.remat
    assert "remat" not in keras_vit.create_model("testing").get_config()  # off: the config as before the option
    with pytest.raises(ValueError, match=r"remat=True needs zero dropout.*dropout_rate=0.1"):
        keras_vit.create_model("testing", remat=True, dropout_rate=0.1)
    images = np.zeros((2, 32, 32, 3), "float32")
    np.testing.assert_allclose(
        np.asarray(model(images, training=True)), np.asarray(model(images, training=False)), atol=1e-6
    )


@pytest.mark.slow
def test_elementwise_remat_round_trips_keeps_the_weights_and_allows_dropout(tmp_path):
    model = keras_vit.create_model("testing", remat="elementwise")
    assert model.get_config()["remat"] == "elementwise"
    assert all(layer.remat == "elementwise" for layer in model.layers if isinstance(layer, EncoderBlock))
    plain = keras_vit.create_model("testing")
    assert [w.path for w in model.weights] == [w.path for w in plain.weights]  # the same variables, same paths
    plain.set_weights(model.get_weights())
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    for training in (False, True):
        np.testing.assert_array_equal(np.asarray(model(images, training=training)), np.asarray(plain(images)))
    path = tmp_path / "remat.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.config.remat == "elementwise" and loaded.get_config()["remat"] == "elementwise"
    np.testing.assert_array_equal(np.asarray(loaded(images)), np.asarray(model(images)))
    assert keras_vit.create_model("testing", remat="elementwise", dropout_rate=0.1).config.remat == "elementwise"
    assert keras_vit.create_model("testing", remat="block").config.remat is True  # one value per meaning
    with pytest.raises(ValueError, match=r"remat must be False, True, 'block' or 'elementwise'. Received: remat='mlp'"):
        keras_vit.create_model("testing", remat="mlp")
