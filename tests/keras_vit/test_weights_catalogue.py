"""The catalogue's figures against their publishers': timm's results and configs, vision_transformer's counts."""

import dataclasses

import pytest

from keras_vit.weights import catalogue, catalogue_params
from keras_vit.weights.__main__ import _info, _table

# timm results/results-imagenet.csv @ 049b1332: name -> (top-1, line in that file), copied from the file.
TIMM_CSV_049B1332 = {
    "vit_base_patch16_224.sam_in1k": (80.244, 669),
    "vit_base_patch32_224.sam_in1k": (73.694, 947),
    "vit_base_patch16_224.augreg_in1k": (79.154, 746),
    "vit_base_patch16_384.augreg_in1k": (81.102, 587),
    "vit_base_patch32_224.augreg_in1k": (74.894, 928),
    "vit_base_patch32_384.augreg_in1k": (78.752, 772),
    "vit_small_r26_s32_224.augreg_in21k_ft_in1k": (81.864, 515),
    "vit_small_patch16_224.augreg_in1k": (78.846, 764),
    "vit_small_patch16_384.augreg_in1k": (81.116, 585),
    "vit_base_patch16_384.orig_in21k_ft_in1k": (84.200, 275),
    "vit_large_patch16_384.augreg_in21k_ft_in1k": (87.084, 67),
}
# timm vision_transformer.py default_cfgs: the S/16 pair pre-trained on ImageNet-1k only (url, input_size).
TIMM_S16_IN1K = {
    "vit_small_patch16_224.augreg_in1k": (
        "S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224.npz",
        224,
    ),
    "vit_small_patch16_384.augreg_in1k": (
        "S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384.npz",
        384,
    ),
}
# vision_transformer vit_jax/models_test.py MODEL_SIZES: 224 px, 1000 classes, no pre_logits.
VIT_JAX_COUNTS = {
    "Ti/16": 5_717_416,
    "S/16": 22_050_664,
    "S/32": 22_878_952,
    "B/8": 86_576_872,
    "B/16": 86_567_656,
    "B/32": 88_224_232,
    "L/16": 304_326_632,
    "L/32": 306_535_400,
    "H/14": 632_045_800,
    "R50+B/16": 98_659_112,
    "R26+S/32": 36_431_912,
}
VIT_JAX_GAP_NOREP = {"S/16": 22_049_896, "B/16": 86_566_120, "B/32": 88_222_696}


@pytest.mark.parametrize("name", sorted(TIMM_CSV_049B1332))
def test_top1_figures_are_timms_with_their_line(name):
    top1, line = TIMM_CSV_049B1332[name]
    entry = catalogue.get(name)
    assert entry.top1 == top1
    assert entry.top1_source == f"timm results-imagenet.csv @ 049b1332 (2023-05-24), timm's evaluation, line {line}"


def test_the_s16_pair_pre_trained_on_imagenet_1k_is_timms():
    for name, (stem, size) in TIMM_S16_IN1K.items():
        entry = catalogue.get(name)
        assert (entry.object, entry.image_size, entry.num_classes) == (f"augreg/{stem}", size, 1000)
        assert entry.hf_hub_id == f"timm/{name}" and entry.crop_pct == (0.9 if size == 224 else 1.0)


def test_the_recommended_b8_is_the_augreg_notebooks():
    """vit_jax_augreg.ipynb's selection output: B/8's best i21k run and its best ImageNet fine-tune (224 px)."""
    run = "B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"
    pre = catalogue.get(f"augreg/{run}.npz")
    assert (pre.name, pre.num_classes, pre.hf_hub_id) == ("vit_base_patch8_224.augreg_rec_in21k", 21843, None)
    ft = catalogue.get(f"{run}--imagenet2012-steps_20k-lr_0.03-res_224")
    assert (ft.name, ft.image_size, ft.top1) == ("vit_base_patch8_224.augreg_rec_in21k_ft_in1k", 224, 85.578)
    assert "vit_jax_augreg.ipynb @ 62a446f" in ft.top1_source
    assert catalogue.get("vit_base_patch8_224.augreg_in21k").object != pre.object  # timm's is another run


# vit_jax_augreg.ipynb @ 62a446f, the selection cell's output: adapt_final_test of each recommended 384 px fine-tune.
AUGREG_NOTEBOOK_TEST = {
    "L/16": 0.85588, "B/16": 0.85486, "S/16": 0.83728, "R26+S/32": 0.83846, "Ti/16": 0.78220, "B/32": 0.83586,
    "S/32": 0.79584,
}  # fmt: skip


def test_the_notebooks_selection_is_the_readmes_table():
    """The notebook that gives B/8's recommended run gives the README's other rows, to the README's two decimals."""
    for variant, accuracy in AUGREG_NOTEBOOK_TEST.items():
        entry = catalogue.get(f"{catalogue._TIMM_NAMES[variant]}_384.augreg_rec_in21k_ft_in1k")
        assert entry.top1 == round(accuracy * 100, 2) and "README" in entry.top1_source, variant


@pytest.mark.parametrize(
    ("name", "resize"),
    [
        # timm's configs (input_size, crop_pct) through timm's transforms_imagenet_eval, floor(size / crop_pct):
        ("vit_base_patch16_224.augreg_in21k_ft_in1k", 248),  # _cfg: 224, crop_pct 0.9
        ("vit_base_patch16_224.sam_in1k", 248),
        ("vit_base_patch8_224.orig_in21k", 248),
        ("vit_base_patch16_384.augreg_in1k", None),  # input_size 384, crop_pct 1.0: no crop
        ("i1k-s16-90ep", 256),  # big_vision's resize_small(256)|central_crop(224)
    ],
)
def test_info_gives_the_eval_resize_timm_uses(name, resize):
    entry = catalogue.get(name)
    expected = f"resize to {resize}, centre-crop 224" if resize else "resize to 384x384"
    assert entry.preprocessing.startswith(expected + " ("), entry.preprocessing
    assert expected in _info(entry)


def test_eval_resize_floors_like_timm():
    # (img_size, crop_pct) of timm default_cfgs -> timm's scale_size: ViT 0.9, DeiT 0.875, ConvNeXt 0.95, EVA-02 1.0.
    for size, crop_pct, scale in [(224, 0.9, 248), (224, 0.875, 256), (224, 0.95, 235), (288, 0.95, 303)]:
        assert catalogue.eval_resize(size, crop_pct) == scale
    wrong = [e.name for e in catalogue.CATALOGUE.values() if "249" in e.preprocessing]
    assert not wrong


def test_parameter_counts_are_vision_transformers():
    base = catalogue.get("ViT-B_16-224")  # 224 px, 1000 classes, no pre_logits: models_test.py's setting
    for variant, count in VIT_JAX_COUNTS.items():
        assert catalogue_params.parameter_count(dataclasses.replace(base, variant=variant)) == count, variant
    for variant, count in VIT_JAX_GAP_NOREP.items():
        entry = dataclasses.replace(base, variant=variant, pooling="gap")
        assert catalogue_params.parameter_count(entry) == count, variant


def _rounding_mib(entry):
    """Half the unit a size was published in: 0.005 GiB, 0.005 MiB (vit_jax.ipynb) or 0.5 MiB (AugReg README)."""
    if "GiB" in entry.size_source:
        return 0.005 * 1024
    return 0.005 if "vit_jax.ipynb" in entry.size_source else 0.5


def test_computed_sizes_match_every_published_size():
    npz_overhead = 0.1  # MiB: zip and .npy headers, a few hundred bytes for each of a few hundred arrays
    published = [e for e in catalogue.CATALOGUE.values() if e.size_mib]
    assert len(published) > 20
    for entry in published:
        if entry.object == "imagenet21k/ViT-B_8.npz":  # its pre_logits is left open; its size says it has one
            entry = dataclasses.replace(entry, representation_size=768)
        gap = entry.size_mib - catalogue_params.float32_mib(entry)
        assert -_rounding_mib(entry) <= gap <= _rounding_mib(entry) + npz_overhead, (entry.name, gap)


def test_every_sam_checkpoint_has_a_computed_size():
    sam = [e for e in catalogue.CATALOGUE.values() if e.object.startswith("sam/")]
    assert len(sam) == 5
    listing = _table(sam)
    assert "?" not in listing
    for entry in sam:
        assert f"={catalogue_params.float32_mib(entry):.1f} MiB" in listing
        assert "computed: not published" in _info(entry) and entry.size_mib is None  # not checked on download
    assert "86,567,656 (from the architecture, without pre_logits)" in _info(catalogue.get("sam/ViT-B_16.npz"))
