"""Bad input gets a clear error that names the problem and the fix."""

import warnings

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError
from tests.support.checkpoints import vit_checkpoint


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "testing.npz"
    ckpt = vit_checkpoint(
        np.random.default_rng(0), hidden=32, layers=2, heads=2, mlp=128, patch=8, grid=(4, 4), classes=10
    )
    np.savez(path, **ckpt)
    return path


def test_wrong_channel_count():
    model = keras_vit.create_model("testing")
    with pytest.raises(ValueError, match=r"expects 3 channels but received 1.*repeat the channel"):
        model(np.zeros((1, 32, 32, 1), np.float32))
    with pytest.raises(ValueError, match=r"expects 3 channels but received 4"):
        model.predict(np.zeros((2, 32, 32, 4), np.float32), verbose=0)


def test_wrong_image_size_at_call():
    model = keras_vit.create_model("testing")
    with pytest.raises(ValueError, match=r"built for 32x32 images but received 48x48.*image_size=\(48, 48\)"):
        model(np.zeros((1, 48, 48, 3), np.float32))


def test_uint8_images_are_refused_not_silently_misread():
    model = keras_vit.create_model("testing")
    with pytest.raises(ValueError, match=r"received uint8 images.*127.5"):
        model(np.zeros((1, 32, 32, 3), np.uint8))


def test_wrong_rank():
    with pytest.raises(ValueError, match="rank 3"):
        keras_vit.create_model("testing")(np.zeros((32, 32, 3), np.float32))


def test_image_size_not_divisible_by_patch():
    with pytest.raises(ValueError, match=r"multiple of 16 \(patch_size=16\).*image_size=\(225, 225\).*224 or 240"):
        keras_vit.create_model("B/16", image_size=225)


def test_hybrid_image_size_must_fit_the_resnet_stride():
    with pytest.raises(ValueError, match="output stride 16"):
        keras_vit.create_model("R50+B/16", image_size=200)


def test_patch_embedding_layer_checks_divisibility():
    from keras_vit.layers import PatchEmbedding

    with pytest.raises(ValueError, match="patch size must divide the image width"):
        PatchEmbedding(8, 16).build((None, 32, 40, 3))


def test_unknown_variant():
    with pytest.raises(ValueError, match=r"Unknown ViT variant 'X/16'.*'B/16'"):
        keras_vit.create_model("X/16")


def test_unknown_option():
    with pytest.raises(TypeError, match=r"Unknown model option\(s\) \['hidden_dim'\]"):
        keras_vit.create_model("testing", hidden_dim=64)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="hidden_size must be divisible by num_heads"):
        keras_vit.create_model("testing", num_heads=3)


def test_variant_name_spellings():
    assert keras_vit.get_variant("ViT-B_16") == keras_vit.get_variant("B/16") == keras_vit.get_variant("vit-b/16")


def test_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="Checkpoint not found"):
        keras_vit.load_npz(keras_vit.create_model("testing"), tmp_path / "nope.npz")


def test_truncated_checkpoint(tmp_path, tiny_checkpoint):
    data = tiny_checkpoint.read_bytes()
    broken = tmp_path / "truncated.npz"
    broken.write_bytes(data[: len(data) // 2])
    model = keras_vit.create_model("testing")
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match="truncated, corrupt or not an .npz"):
        keras_vit.load_npz(model, broken)
    for w, b in zip(model.weights, before):
        np.testing.assert_array_equal(w.numpy(), b)


def test_not_an_npz(tmp_path):
    path = tmp_path / "notes.npz"
    path.write_text("this is not a checkpoint")
    with pytest.raises(CheckpointError, match="Cannot read"):
        keras_vit.load_npz(keras_vit.create_model("testing"), path)


def test_checkpoint_of_another_variant(tiny_checkpoint):
    model = keras_vit.create_model("testing", hidden_size=64, num_heads=4)
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError) as err:
        keras_vit.load_npz(model, tiny_checkpoint)
    message = str(err.value)
    assert "nothing was loaded" in message
    assert "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel: checkpoint (32, 128) vs model (64, 128)" in message
    assert "another variant" in message
    for w, b in zip(model.weights, before):  # no silent partial load
        np.testing.assert_array_equal(w.numpy(), b)


def test_checkpoint_with_fewer_layers(tiny_checkpoint):
    model = keras_vit.create_model("testing", num_layers=3)
    with pytest.raises(
        CheckpointError, match=r"(?s)checkpoint has 2 encoder blocks, the model 3.*missing from the checkpoint \(16\)"
    ):
        keras_vit.load_npz(model, tiny_checkpoint)


def test_checkpoint_with_unexpected_keys(tmp_path, tiny_checkpoint):
    ckpt = dict(np.load(tiny_checkpoint))
    ckpt["Transformer/encoderblock_0/extra/kernel"] = np.zeros(3, np.float32)
    np.savez(tmp_path / "extra.npz", **ckpt)
    with pytest.raises(CheckpointError, match=r"unexpected in the checkpoint \(1\):\n.*extra/kernel"):
        keras_vit.load_npz(keras_vit.create_model("testing"), tmp_path / "extra.npz")


def test_head_of_another_class_count_is_skipped_with_a_warning(tiny_checkpoint):
    model = keras_vit.create_model("testing", num_classes=3)
    with pytest.warns(UserWarning, match=r"skipped head: checkpoint head \(32, 10\) does not fit.*\(32, 3\)"):
        report = keras_vit.load_npz(model, tiny_checkpoint)
    assert "head/kernel" in report.skipped
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), 0)  # zero-initialised head kept
    expected = np.load(tiny_checkpoint)["Transformer/encoder_norm/scale"]
    np.testing.assert_array_equal(model.get_layer("encoder_norm").gamma.numpy(), expected)


@pytest.mark.parametrize("num_classes", [3, 10])
def test_a_new_head_asked_for_is_not_loaded_and_not_warned_about(tiny_checkpoint, num_classes):
    model = keras_vit.create_model("testing", num_classes=num_classes)
    before = model.get_layer("head").kernel.numpy().copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = keras_vit.load_weights(model, tiny_checkpoint, new_head=True)
    assert not [w for w in caught if "skipped head" in str(w.message)]
    assert {"head/kernel", "head/bias"} <= set(report.skipped) and "head/kernel" not in report.loaded
    # The model's own head, even where the checkpoint's would fit (10 classes); the rest loaded.
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), before)
    expected = np.load(tiny_checkpoint)["Transformer/encoder_norm/scale"]
    np.testing.assert_array_equal(model.get_layer("encoder_norm").gamma.numpy(), expected)


def test_pre_logits_dropped_when_fine_tuning(tmp_path):
    ckpt = vit_checkpoint(
        np.random.default_rng(1), hidden=32, layers=2, heads=2, mlp=128, patch=8, grid=(4, 4), classes=10, pre_logits=16
    )
    np.savez(tmp_path / "pre.npz", **ckpt)
    model = keras_vit.create_model("testing", num_classes=5)
    with pytest.warns(UserWarning) as caught:
        report = keras_vit.load_npz(model, tmp_path / "pre.npz")
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert "skipped head: checkpoint head (16, 10)" in messages[0]
    assert "skipped pre_logits: the model has no pre_logits layer" in messages[1]
    assert set(report.skipped) == {"pre_logits/kernel", "pre_logits/bias", "head/kernel", "head/bias"}


def test_class_token_mismatch(tiny_checkpoint):
    model = keras_vit.create_model("testing", class_token=False, pooling="gap")
    with pytest.raises(CheckpointError, match="class_token=False"):
        keras_vit.load_npz(model, tiny_checkpoint)


def test_pickled_npz_is_refused(tmp_path):
    path = tmp_path / "pickled.npz"
    np.savez(path, obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="Cannot read"):
        keras_vit.load_npz(keras_vit.create_model("testing"), path)
