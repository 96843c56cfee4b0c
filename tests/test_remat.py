"""Rematerialised encoder blocks (`remat=True`): the same gradients as without, on TensorFlow and JAX, with the
blocks really recomputed in the backward pass; kept in the model's config; refused with dropout."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import keras_vit
from keras_vit.layers.encoder_block import EncoderBlock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GRADIENTS = textwrap.dedent("""
    import json
    import keras
    import numpy as np
    import keras_vit
    from keras_vit.layers.encoder_block import EncoderBlock

    calls = []
    forward = EncoderBlock._forward
    def counted(self, *args):
        calls.append(self.name)
        return forward(self, *args)
    EncoderBlock._forward = counted

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
                value = loss(labels, model(images, training=True))
            grads = tape.gradient(value, model.trainable_variables)
            recomputed = len(calls) - 2  # eager: one call per block forward, one more per block if recomputed
        else:
            import jax
            non_trainable = [v.value for v in model.non_trainable_variables]
            def f(trainable):
                return loss(labels, model.stateless_call(trainable, non_trainable, images, training=True)[0])
            trainable = [v.value for v in model.trainable_variables]
            grads = jax.grad(f)(trainable)
            text = str(jax.make_jaxpr(jax.grad(f))(trainable))
            recomputed = text.count("checkpoint[") + text.count("remat")  # jax.checkpoint's primitive
        return [np.asarray(g) for g in grads], recomputed

    plain, plain_recomputed = gradients(False)
    remat, remat_recomputed = gradients(True)
    print("RESULT" + json.dumps({
        "diff": max(float(np.abs(a - b).max()) for a, b in zip(plain, remat)),
        "scale": max(float(np.abs(a).max()) for a in plain),
        "recomputed": [plain_recomputed, remat_recomputed],
    }))
""")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_remat_gives_the_same_gradients_and_recomputes(backend):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "XLA_FLAGS")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, KERAS_BACKEND=backend)
    result = subprocess.run(
        [sys.executable, "-c", GRADIENTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    out = json.loads(result.stdout.split("RESULT", 1)[1])
    print(backend, "remat:", out)
    assert out["scale"] > 1e-2  # non-trivial gradients
    assert out["diff"] < 1e-6
    plain, remat = out["recomputed"]
    assert plain == 0 and remat >= 2  # both blocks recomputed with remat, none without


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
