"""Weights of other libraries in and out: the fixtures saved by timm, transformers and keras-hub (with their own
outputs), round trips through save_pretrained, overrides, and the errors for what does not fit."""

import json
import os
import shutil
import warnings

import keras
import numpy as np
import pytest
import scipy.ndimage
from safetensors.numpy import load_file, save_file

import keras_vit
from keras_vit.weights.model_io import fold_normalisation
from tests import support
from tests.support import numpy_vit
from tests.support.checkpoints import resnet_checkpoint, vit_checkpoint

INTEROP = os.path.join(str(support.FIXTURES), "interop")
TIMM = os.path.join(INTEROP, "timm_vit_tiny")
HF_CLS = os.path.join(INTEROP, "hf_vit_for_image_classification")
HF_POOLER = os.path.join(INTEROP, "hf_vit_model_with_pooler")
KERAS_HUB = os.path.join(INTEROP, "keras_hub_vit_image_classifier")
TOL = 1e-5
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def io(folder):
    return dict(np.load(os.path.join(folder, "io.npz")))


def outputs(model, images, layer):
    return keras.Model(model.input, model.get_layer(layer).output).predict(images, verbose=0)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def max_diff(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


_models = {}


def loaded(folder):
    """from_pretrained of a fixture, once per test session (building models is most of these tests' time)."""
    if folder not in _models:
        _models[folder] = keras_vit.from_pretrained(folder)
    return _models[folder]


# ----- each library's own outputs -----


def test_timm_fixture_matches_timm():
    ref = io(TIMM)
    model = loaded(TIMM)
    assert (model.config.gelu, model.config.layer_norm_epsilon, model.config.pooling) == ("exact", 1e-6, "token")
    assert max_diff(model.predict(ref["images"], verbose=0), ref["logits"]) < TOL
    assert max_diff(outputs(model, ref["images"], "pool"), ref["pre_logits"]) < TOL


def test_transformers_classifier_fixture_matches_transformers():
    ref = io(HF_CLS)
    model = loaded(HF_CLS)
    assert (model.config.gelu, model.config.layer_norm_epsilon) == ("exact", 1e-12)
    assert model.class_names == tuple(f"class_{i}" for i in range(5))  # the config's id2label
    assert max_diff(model.predict(ref["images"], verbose=0), ref["logits"]) < TOL


def test_transformers_vit_model_pooler_is_pre_logits():
    ref = io(HF_POOLER)
    model = loaded(HF_POOLER)
    assert (model.config.num_classes, model.config.representation_size) == (0, 48)
    assert model.class_names is None  # id2label without a head names nothing
    assert max_diff(outputs(model, ref["images"], "encoder_norm"), ref["last_hidden_state"]) < TOL
    assert max_diff(model.predict(ref["images"], verbose=0), ref["pooler_output"]) < TOL


def test_keras_hub_fixture_matches_keras_hub():
    ref = io(KERAS_HUB)
    model = loaded(KERAS_HUB)
    assert max_diff(model.predict(ref["images"], verbose=0), ref["logits"]) < TOL
    assert max_diff(outputs(model, ref["images"], "encoder_norm"), ref["backbone_output"]) < TOL


# ----- round trips -----


@pytest.mark.parametrize(
    "folder, fmt",
    [(TIMM, "timm"), (HF_CLS, "transformers"), (HF_POOLER, "transformers")],
    ids=["timm", "transformers-classifier", "transformers-pooler"],
)
def test_save_pretrained_writes_the_fixture_tensors(tmp_path, folder, fmt):
    model = loaded(folder)
    out = keras_vit.save_pretrained(model, tmp_path / "out", format=fmt)
    written, original = load_file(os.path.join(out, "model.safetensors")), load_file(f"{folder}/model.safetensors")
    assert sorted(written) == sorted(original)
    for key, value in original.items():
        assert written[key].shape == value.shape, key
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    cfg, ref_cfg = (read_json(os.path.join(p, "config.json")) for p in (out, folder))
    if fmt == "timm":
        assert cfg["num_classes"] == ref_cfg["num_classes"] and cfg["global_pool"] == ref_cfg["global_pool"]
        for key, value in ref_cfg["model_args"].items():
            assert cfg["model_args"][key] == value, key
        for key in ("input_size", "mean", "std", "num_classes", "first_conv", "classifier"):
            assert cfg["pretrained_cfg"][key] == ref_cfg["pretrained_cfg"][key], key
    else:
        for key in ("architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "hidden_act", "layer_norm_eps", "image_size", "patch_size",
                    "num_channels", "qkv_bias", "pooler_output_size", "pooler_act"):  # fmt: skip
            assert cfg[key] == ref_cfg[key], key
        if "classifier.weight" in original:
            assert cfg["id2label"] == ref_cfg["id2label"] and cfg["label2id"] == ref_cfg["label2id"]
        processor = read_json(os.path.join(out, "preprocessor_config.json"))
        ref_processor = read_json(os.path.join(folder, "preprocessor_config.json"))
        for key in ("image_mean", "image_std", "size", "do_rescale", "do_normalize", "image_processor_type"):
            assert processor[key] == ref_processor[key], key
    ref = io(folder)
    key = "logits" if "logits" in ref else "pooler_output"
    again = keras_vit.from_pretrained(out)
    assert again.class_names == model.class_names
    assert max_diff(again.predict(ref["images"], verbose=0), ref[key]) < TOL


def _h5_tree(path):
    import h5py

    tree = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: tree.__setitem__(n, o[()] if isinstance(o, h5py.Dataset) else dict(o.attrs)))
    return tree


@pytest.mark.slow
def test_save_pretrained_keras_hub_writes_the_fixture_preset(tmp_path):
    out = keras_vit.save_pretrained(loaded(KERAS_HUB), tmp_path / "preset", format="keras_hub")
    for name in ("model.weights.h5", "task.weights.h5"):
        written, original = _h5_tree(os.path.join(out, name)), _h5_tree(os.path.join(KERAS_HUB, name))
        assert sorted(written) == sorted(original), name
        for key, value in original.items():
            if isinstance(value, dict):
                assert written[key] == value, key  # the groups' layer-name attributes
            else:
                assert written[key].dtype == value.dtype and written[key].shape == value.shape, key
                np.testing.assert_array_equal(written[key], value, err_msg=key)
    for name in ("config.json", "task.json"):
        assert read_json(os.path.join(out, name)) == read_json(os.path.join(KERAS_HUB, name)), name
    metadata, ref_metadata = (read_json(os.path.join(p, "metadata.json")) for p in (out, KERAS_HUB))
    for key in ("keras_hub_version", "parameter_count", "tasks"):
        assert metadata[key] == ref_metadata[key], key
    ref = io(KERAS_HUB)
    assert max_diff(keras_vit.from_pretrained(out).predict(ref["images"], verbose=0), ref["logits"]) < TOL


@pytest.mark.parametrize("fmt", ["timm", "transformers"])
def test_keras_hub_weights_out_to_pytorch_formats(tmp_path, fmt):
    """keras-hub has no way back out to PyTorch; its preset written as timm or transformers keeps its logits."""
    ref = io(KERAS_HUB)
    out = keras_vit.save_pretrained(loaded(KERAS_HUB), tmp_path / fmt, format=fmt)
    assert max_diff(keras_vit.from_pretrained(out).predict(ref["images"], verbose=0), ref["logits"]) < TOL


def test_transformers_to_timm_keeps_names_and_warns_about_epsilon(tmp_path):
    """timm's ViT has LayerNorm epsilon 1e-6 fixed (a config cannot state 1e-12): written with a warning, the
    logits then move by about 2e-5; transformers' class names become timm's label_names."""
    ref = io(HF_CLS)
    with pytest.warns(UserWarning, match="timm's ViT uses LayerNorm epsilon 1e-6; this model uses 1e-12"):
        out = keras_vit.save_pretrained(loaded(HF_CLS), tmp_path / "timm", format="timm")
    again = keras_vit.from_pretrained(out)
    assert again.class_names == loaded(HF_CLS).class_names
    assert again.config.layer_norm_epsilon == 1e-6
    assert max_diff(again.predict(ref["images"], verbose=0), ref["logits"]) < 1e-4


@pytest.mark.slow
def test_npz_round_trip_loads_with_load_npz(tmp_path):
    ref = io(TIMM)
    path = keras_vit.save_pretrained(loaded(TIMM), tmp_path / "vit.npz", format="npz")
    assert str(path).endswith("vit.npz")
    model = keras_vit.create_model("testing", hidden_size=48, num_heads=3, mlp_dim=192, num_classes=5, gelu="exact")
    keras_vit.load_npz(model, path)
    assert max_diff(model.predict(ref["images"], verbose=0), ref["logits"]) < TOL
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an .npz states no GELU form: nothing to warn about
        keras_vit.load_weights(model, path)
    # A bare .npz states no options: from_pretrained infers the shapes and takes the released models' tanh GELU.
    inferred = keras_vit.from_pretrained(path)
    assert inferred.config == model.config.replace(gelu="tanh")
    assert (
        max_diff(keras_vit.from_pretrained(path, gelu="exact").predict(ref["images"], verbose=0), ref["logits"]) < TOL
    )


def test_an_unused_pooler_in_a_transformers_classifier_is_not_applied(tmp_path):
    """ViTForImageClassification never calls a pooler its file may carry; neither does the loaded model."""
    folder = tmp_path / "with_pooler"
    shutil.copytree(HF_CLS, folder)
    state = load_file(folder / "model.safetensors")
    state["vit.pooler.dense.weight"] = np.eye(48, dtype=np.float32) * 3
    state["vit.pooler.dense.bias"] = np.ones(48, np.float32)
    save_file(state, folder / "model.safetensors")
    model = keras_vit.from_pretrained(folder)
    assert model.config.representation_size is None
    ref = io(HF_CLS)
    assert max_diff(model.predict(ref["images"], verbose=0), ref["logits"]) < TOL


@pytest.mark.slow
def test_tanh_gelu_and_generic_labels_survive_transformers(tmp_path):
    model = keras_vit.create_model("testing", num_classes=3)
    rng = np.random.default_rng(0)
    for v in model.weights:
        v.assign(rng.standard_normal(v.shape).astype("float32") * 0.1)
    out = keras_vit.save_pretrained(model, tmp_path / "hf", format="transformers")
    cfg = read_json(os.path.join(out, "config.json"))
    assert cfg["hidden_act"] == "gelu_pytorch_tanh" and cfg["id2label"]["2"] == "LABEL_2"
    again = keras_vit.from_pretrained(out)
    assert again.config.gelu == "tanh" and again.class_names is None  # LABEL_i are placeholders, not names
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    assert max_diff(again.predict(images, verbose=0), model.predict(images, verbose=0)) < TOL


# ----- timm's other layouts, against the independent numpy ViT -----


def _timm_state(ckpt, no_embed_class):
    """A timm state dict written from an original checkpoint by hand (REFERENCE.md's layout, not keras_vit's code)."""
    d = ckpt["embedding/bias"].shape[0]
    posemb = ckpt["Transformer/posembed_input/pos_embedding"]
    state = {
        "patch_embed.proj.weight": ckpt["embedding/kernel"].transpose(3, 2, 0, 1),
        "patch_embed.proj.bias": ckpt["embedding/bias"],
        "pos_embed": posemb[:, 1:] if no_embed_class else posemb,
        "norm.weight": ckpt["Transformer/encoder_norm/scale"],
        "norm.bias": ckpt["Transformer/encoder_norm/bias"],
        "head.weight": ckpt["head/kernel"].T,
        "head.bias": ckpt["head/bias"],
    }
    if "cls" in ckpt:
        state["cls_token"] = ckpt["cls"]
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in ckpt:
        g = lambda name, i=i: ckpt[f"Transformer/encoderblock_{i}/{name}"]  # noqa: E731
        att = "MultiHeadDotProductAttention_1"
        b = f"blocks.{i}"
        state[f"{b}.norm1.weight"], state[f"{b}.norm1.bias"] = g("LayerNorm_0/scale"), g("LayerNorm_0/bias")
        state[f"{b}.norm2.weight"], state[f"{b}.norm2.bias"] = g("LayerNorm_2/scale"), g("LayerNorm_2/bias")
        qkv = [g(f"{att}/{p}/kernel").reshape(d, d).T for p in ("query", "key", "value")]
        state[f"{b}.attn.qkv.weight"] = np.concatenate(qkv)
        state[f"{b}.attn.qkv.bias"] = np.concatenate(
            [g(f"{att}/{p}/bias").reshape(d) for p in ("query", "key", "value")]
        )
        state[f"{b}.attn.proj.weight"] = g(f"{att}/out/kernel").reshape(d, d).T
        state[f"{b}.attn.proj.bias"] = g(f"{att}/out/bias")
        state[f"{b}.mlp.fc1.weight"], state[f"{b}.mlp.fc1.bias"] = (
            g("MlpBlock_3/Dense_0/kernel").T,
            g("MlpBlock_3/Dense_0/bias"),
        )
        state[f"{b}.mlp.fc2.weight"], state[f"{b}.mlp.fc2.bias"] = (
            g("MlpBlock_3/Dense_1/kernel").T,
            g("MlpBlock_3/Dense_1/bias"),
        )
        i += 1
    return {k: np.ascontiguousarray(v, np.float32) for k, v in state.items()}


def _timm_folder(path, state, cfg):
    os.makedirs(path)
    save_file(state, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return str(path)


@pytest.mark.parametrize(
    "cls, no_embed_class, pool, model_args",
    [(True, True, "token", True), (True, True, "avg", False), (False, False, "avg", True)],
    ids=["no_embed_class", "avg-no-model-args", "no-class-token-avg"],
)
def test_timm_layouts_match_numpy_vit(tmp_path, cls, no_embed_class, pool, model_args):
    rng = np.random.default_rng(3)
    # Without model_args the heads come from the width (head width 64, as timm's ViTs have): 64 wide, 1 head.
    hidden, heads = (32, 2) if model_args else (64, 1)
    ckpt = vit_checkpoint(rng, hidden=hidden, layers=2, heads=heads, mlp=128, patch=8, grid=(4, 4), classes=4, cls=cls)
    if no_embed_class:
        ckpt["Transformer/posembed_input/pos_embedding"][:, 0] = 0  # what timm's layout means for the class token
    cfg = {"architecture": "vit_custom", "num_classes": 4, "global_pool": pool, "pretrained_cfg": {}}
    if model_args:
        cfg["model_args"] = dict(num_heads=heads, class_token=cls, no_embed_class=no_embed_class, global_pool=pool)
    folder = _timm_folder(tmp_path / "t", _timm_state(ckpt, no_embed_class), cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = keras_vit.from_pretrained(folder)
    assert any("assumed 1 (head width 64" in str(w.message) for w in caught) == (not model_args)
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    pooling = "token" if pool == "token" else "gap"
    expected = numpy_vit.vit_forward(images, ckpt, 2, pooling=pooling, approximate_gelu=False)
    assert model.config.pooling == pooling and model.config.class_token == cls
    assert max_diff(model.predict(images, verbose=0), expected) < TOL * max(1, np.abs(expected).max())


# ----- overrides -----


def test_image_size_override_interpolates_position_embeddings():
    model = keras_vit.from_pretrained(TIMM, image_size=64)
    posemb = load_file(f"{TIMM}/model.safetensors")["pos_embed"][0]
    grid = posemb[1:].reshape(4, 4, -1)
    expected = scipy.ndimage.zoom(grid, (8 / 4, 8 / 4, 1), order=1)  # vit_jax's own resize
    got = model.get_layer("posembed_input").pos_embedding.numpy()[0]
    np.testing.assert_allclose(got[0], posemb[0], atol=0)
    np.testing.assert_allclose(got[1:].reshape(8, 8, -1), expected, atol=1e-6)


@pytest.mark.slow
def test_num_classes_override_starts_a_zero_head_with_a_warning():
    ref = io(HF_CLS)
    with pytest.warns(UserWarning, match=r"from_pretrained: skipped head: checkpoint head \(48, 5\)"):
        model = keras_vit.from_pretrained(HF_CLS, num_classes=10)
    assert model.class_names is None  # the checkpoint's 5 names do not name 10 outputs
    assert not np.any(model.get_layer("head").kernel.numpy())
    loaded_model = loaded(HF_CLS)
    np.testing.assert_allclose(
        outputs(model, ref["images"], "pool"), outputs(loaded_model, ref["images"], "pool"), atol=1e-6
    )


def test_load_weights_into_a_user_built_model_warns_on_other_options():
    ref = io(HF_CLS)
    model = keras_vit.create_model("testing", hidden_size=48, num_heads=3, mlp_dim=192, num_classes=5, gelu="exact")
    with pytest.warns(UserWarning, match="layer_norm_epsilon=1e-12"):
        keras_vit.load_weights(model, HF_CLS)
    assert max_diff(model.predict(ref["images"], verbose=0), ref["logits"]) < 1e-4  # eps 1e-6 instead of 1e-12


# ----- preprocessing fold -----


def test_other_normalisation_is_folded_into_the_patch_embedding(tmp_path):
    """A timm config with ImageNet mean/std: keras-vit's [-1, 1] input gives what timm computes on its own input."""
    folder = tmp_path / "imagenet_stats"
    shutil.copytree(TIMM, folder)
    cfg = read_json(folder / "config.json")
    cfg["pretrained_cfg"].update(mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD))
    (folder / "config.json").write_text(json.dumps(cfg))
    folded = keras_vit.from_pretrained(folder)
    pixels = io(TIMM)["pixels"].astype("float32")
    contract = (pixels - 127.5) / 127.5
    theirs = ((pixels / 255 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)).astype("float32")
    expected = loaded(TIMM).predict(theirs, verbose=0)  # the unfolded weights on timm's own normalisation
    assert max_diff(folded.predict(contract, verbose=0), expected) < TOL
    written = keras_vit.save_pretrained(folded, tmp_path / "out", format="timm")
    assert read_json(os.path.join(written, "config.json"))["pretrained_cfg"]["mean"] == [0.5, 0.5, 0.5]


def test_keras_hub_image_converter_statistics_are_folded(tmp_path):
    """A preset whose ViTImageConverter rescales by 1/255 then normalises with ImageNet statistics."""
    folder = tmp_path / "preset"
    shutil.copytree(KERAS_HUB, folder)
    converter = {"class_name": "ViTImageConverter", "config": {"scale": 1 / 255, "offset": None,
                 "norm_mean": list(IMAGENET_MEAN), "norm_std": list(IMAGENET_STD)}}  # fmt: skip
    (folder / "preprocessor.json").write_text(json.dumps({"config": {"image_converter": converter}}))
    pixels = io(KERAS_HUB)["pixels"].astype("float32")
    theirs = ((pixels / 255 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)).astype("float32")
    expected = loaded(KERAS_HUB).predict(theirs, verbose=0)
    got = keras_vit.from_pretrained(folder).predict((pixels - 127.5) / 127.5, verbose=0)
    assert max_diff(got, expected) < TOL


def test_fold_is_exact_for_a_hand_computed_patch():
    rng = np.random.default_rng(0)
    kernel = rng.standard_normal((2, 2, 3, 4)).astype("float32")
    bias = rng.standard_normal(4).astype("float32")
    out = fold_normalisation({"embedding/kernel": kernel, "embedding/bias": bias}, IMAGENET_MEAN, IMAGENET_STD)
    p = rng.uniform(0, 1, (2, 2, 3))
    theirs = np.einsum("hwc,hwcd->d", (p - IMAGENET_MEAN) / IMAGENET_STD, kernel) + bias
    ours = np.einsum("hwc,hwcd->d", (p - 0.5) / 0.5, out["embedding/kernel"]) + out["embedding/bias"]
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_fold_refuses_a_hybrid():
    params = {"conv_root/kernel": np.zeros((7, 7, 3, 64)), "embedding/kernel": np.zeros((1, 1, 1024, 8))}
    with pytest.raises(keras_vit.CheckpointError, match="hybrid ViT trained with mean"):
        fold_normalisation(params, IMAGENET_MEAN, IMAGENET_STD)


# ----- configuration inferred from a bare .npz -----


def test_infer_options_of_a_hybrid_with_pre_logits():
    from keras_vit.weights.config_inference import infer_options

    rng = np.random.default_rng(0)
    ckpt = vit_checkpoint(
        rng, hidden=32, layers=3, heads=4, mlp=64, patch=1, grid=(2, 3), classes=7, pre_logits=16, embed_in=1024
    )
    ckpt.update(resnet_checkpoint(rng, (1, 2, 1)))
    options = infer_options(ckpt, grid=(2, 3))
    assert options["resnet_layers"] == (1, 2, 1) and options["resnet_width"] == 1
    assert options["image_size"] == (32, 48)  # grid x output stride 16
    assert (options["hidden_size"], options["num_layers"], options["num_heads"], options["mlp_dim"]) == (32, 3, 4, 64)
    assert (options["num_classes"], options["representation_size"], options["pooling"]) == (7, 16, "token")


def test_big_vision_sincos_npz_builds_a_sincos_model(tmp_path):
    """big_vision's plain ViT stores no position embedding (a fixed 2-D sin-cos table): from_pretrained builds that."""
    rng = np.random.default_rng(5)
    ckpt = vit_checkpoint(rng, hidden=32, layers=2, heads=2, mlp=128, patch=8, grid=(4, 4), classes=3, cls=False)
    ckpt.pop("Transformer/posembed_input/pos_embedding")
    np.savez(tmp_path / "bv.npz", **{f"params/{k}": v for k, v in ckpt.items()})
    model = keras_vit.from_pretrained(tmp_path / "bv.npz", image_size=32)
    assert (model.config.position_embedding, model.config.pooling, model.config.class_token) == (
        "sincos2d",
        "gap",
        False,
    )
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    reference = dict(ckpt, **{"Transformer/posembed_input/pos_embedding": numpy_vit.sincos_2d((4, 4), 32)[None]})
    expected = numpy_vit.vit_forward(images, reference, 2, pooling="gap")
    assert max_diff(model.predict(images, verbose=0), expected) < TOL * max(1, np.abs(expected).max())


def test_npz_saved_into_a_folder_is_found_there(tmp_path):
    path = keras_vit.save_pretrained(loaded(HF_POOLER), tmp_path / "folder", format="npz")
    assert path == str(tmp_path / "folder" / "model.npz")
    model = keras_vit.from_pretrained(tmp_path / "folder", gelu="exact", layer_norm_epsilon=1e-12)
    ref = io(HF_POOLER)
    assert max_diff(model.predict(ref["images"], verbose=0), ref["pooler_output"]) < TOL


# ----- errors -----


@pytest.mark.filterwarnings("ignore:load_weights.*was trained with")
def test_wrong_variant_names_the_mismatched_keys():
    model = keras_vit.create_model("testing")
    with pytest.raises(keras_vit.CheckpointError, match=r"(?s)does not fit the model.*shape mismatches"):
        keras_vit.load_weights(model, TIMM)


def test_folder_of_no_known_format(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(
        keras_vit.CheckpointError, match=r"not a checkpoint folder of a known format \(found: notes.txt, weights.bin\)"
    ):
        keras_vit.from_pretrained(tmp_path)


def test_missing_source_is_a_one_line_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="No such file or folder: .*nope.* is not in the catalogue") as err:
        keras_vit.from_pretrained(tmp_path / "nope")
    assert "\n" not in str(err.value)


def test_timm_tensors_without_counterpart_are_named(tmp_path):
    state = load_file(f"{TIMM}/model.safetensors")
    state["blocks.0.attn.gate.weight"] = np.ones(48, np.float32)  # a part no timm ViT keras-vit builds has
    folder = _timm_folder(tmp_path / "gate", state, read_json(f"{TIMM}/config.json"))
    with pytest.raises(keras_vit.CheckpointError, match="no counterpart in keras-vit's ViT: blocks.0.attn.gate.weight"):
        keras_vit.from_pretrained(folder)


@pytest.mark.parametrize(
    "tensor, feature",
    [
        ("blocks.0.attn.q_norm.weight", "qk-norm"),
        ("blocks.0.mlp.fc1_g.weight", "a SwiGLU MLP"),
        ("rope.freqs", "rotary position embeddings"),
        ("blocks.0.attn.norm.weight", "a LayerNorm inside attention"),
        ("blocks.0.mlp.norm.weight", "a LayerNorm inside the MLP"),
        ("patch_embed.backbone.conv1.0.weight", "a timm ResNet-D backbone"),  # timm's hybrids load: test_interop_hybrid
    ],
)
def test_timm_features_keras_vit_cannot_build_are_refused_in_one_line(tmp_path, tensor, feature):
    # fc_norm (global_pool='avg') and LayerScale load now (test_interop_families.py); these still cannot.
    state = load_file(f"{TIMM}/model.safetensors")
    state[tensor] = np.ones(48, np.float32)
    folder = _timm_folder(tmp_path / "x", state, read_json(f"{TIMM}/config.json"))
    with pytest.raises(keras_vit.CheckpointError, match=f"uses {feature}") as err:
        keras_vit.from_pretrained(folder)
    assert "\n" not in str(err.value) and tensor in str(err.value)


def test_formats_without_an_equivalent_are_refused(tmp_path):
    gap = keras_vit.create_model("testing", class_token=False, pooling="gap")
    with pytest.raises(keras_vit.CheckpointError, match="no transformers equivalent"):
        keras_vit.save_pretrained(gap, tmp_path / "hf", format="transformers")
    with pytest.raises(keras_vit.CheckpointError, match="no pre_logits"):
        keras_vit.save_pretrained(loaded(HF_POOLER), tmp_path / "timm", format="timm")
    with pytest.raises(keras_vit.CheckpointError, match="plain class-token ViTs only"):
        keras_vit.save_pretrained(gap, tmp_path / "kh", format="keras_hub")
    with pytest.raises(ValueError, match="Unknown format 'onnx'"):
        keras_vit.save_pretrained(gap, tmp_path / "x", format="onnx")
