"""Building without drawing initial values (keras_vit/layers/deferred_init.py), as `from_pretrained` does.

Inside `deferred()` the bulk of a ViT's weights is created as zeros and noted; the layers' configs do not change;
`draw_remaining` draws what the loader did not assign with the layer's own initialiser; and a model from
`from_pretrained` holds exactly the file's tensors, or, where the file has none, what a model built the usual way
holds.
"""

import keras
import numpy as np

import keras_vit
from keras_vit.layers import MlpBlock, MultiHeadSelfAttention, PositionEmbedding, deferred_init
from keras_vit.weights.loading import POSEMB_KEY
from keras_vit.weights.model_io import model_params


def _config(layer):
    return {k: v for k, v in layer.get_config().items() if k != "name"}


def test_inside_deferred_weights_are_zeros_noted_and_the_configs_unchanged():
    plain_mlp, plain_attention = MlpBlock(16), MultiHeadSelfAttention(2)
    plain_mlp.build((None, 4, 8))
    plain_attention.build((None, 4, 8))
    with deferred_init.deferred() as notes:
        mlp, attention = MlpBlock(16), MultiHeadSelfAttention(2)
        mlp.build((None, 4, 8))
        attention.build((None, 4, 8))
    assert len(notes) == 4 + 8  # two Dense kernels and biases; q, k, v, out kernels and biases
    assert all(not np.any(variable.numpy()) for variable, _ in notes)
    assert np.any(plain_mlp.dense_0.kernel.numpy()) and np.any(plain_attention.query_kernel.numpy())  # drawn
    assert _config(mlp) == _config(plain_mlp) and _config(attention) == _config(plain_attention)
    for dense, plain in ((mlp.dense_0, plain_mlp.dense_0), (mlp.dense_1, plain_mlp.dense_1)):
        assert dense.get_config() == plain.get_config()  # the Dense layers keep their own initialisers
    outside = MlpBlock(16)
    outside.build((None, 4, 8))
    assert np.any(outside.dense_0.kernel.numpy())  # after the block, building draws again


def test_draw_remaining_draws_what_was_not_assigned_with_its_own_initialiser():
    with deferred_init.deferred() as notes:
        table = PositionEmbedding((2, 3), 1, kind="sincos2d")
        learned = PositionEmbedding((2, 3), 1)
        for layer in (table, learned):
            layer.build((None, 7, 8))
    learned.pos_embedding.assign(np.full((1, 7, 8), 0.25, "float32"))  # what a loader would do
    assert deferred_init.draw_remaining(notes, [learned.pos_embedding]) == 1
    reference = PositionEmbedding((2, 3), 1, kind="sincos2d")
    reference.build((None, 7, 8))
    np.testing.assert_array_equal(table.pos_embedding.numpy(), reference.pos_embedding.numpy())
    assert np.any(reference.pos_embedding.numpy())
    np.testing.assert_array_equal(learned.pos_embedding.numpy(), np.full((1, 7, 8), 0.25, "float32"))


def _saved(tmp_path, **overrides):
    model = keras_vit.create_model("testing", **overrides)
    rng = np.random.default_rng(0)
    for w in model.weights:
        w.assign(rng.normal(0, 0.02, w.shape).astype("float32"))
    params = model_params(model)
    return model, params, keras_vit.save_pretrained(model, tmp_path / "weights.npz", format="npz")


def test_from_pretrained_holds_exactly_the_files_tensors(tmp_path):
    original, params, path = _saved(tmp_path)
    loaded = keras_vit.from_pretrained(path)
    got = model_params(loaded)
    assert sorted(got) == sorted(params)
    for key, value in params.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(loaded.predict(images, verbose=0), original.predict(images, verbose=0))


def test_what_the_file_lacks_is_what_a_model_built_the_usual_way_holds(tmp_path):
    _, params, _ = _saved(tmp_path, position_embedding="sincos2d")
    del params[POSEMB_KEY]  # big_vision stores no sin-cos table: the model computes it
    path = tmp_path / "no_table.npz"
    np.savez(path, **params)
    loaded = keras_vit.from_pretrained(path, image_size=32, num_classes=3, head_bias_init=-2.0)  # a new head too
    usual = keras_vit.create_model("testing", position_embedding="sincos2d", num_classes=3, head_bias_init=-2.0)
    for layer, attribute in (("posembed_input", "pos_embedding"), ("head", "kernel"), ("head", "bias")):
        want = getattr(usual.get_layer(layer), attribute).numpy()
        np.testing.assert_array_equal(getattr(loaded.get_layer(layer), attribute).numpy(), want, err_msg=layer)
    assert np.any(loaded.get_layer("posembed_input").pos_embedding.numpy())
    np.testing.assert_array_equal(loaded.get_layer("head").bias.numpy(), np.full(3, -2.0, "float32"))
    assert keras.ops.convert_to_numpy(loaded.get_layer("embedding").kernel).std() > 0.01  # the file's, not zeros
