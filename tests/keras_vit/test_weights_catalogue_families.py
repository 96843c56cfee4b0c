"""The next families' catalogue data (catalogue_families.py) against timm's files and its publishers' figures."""

import dataclasses

import pytest
from safetensors.numpy import load_file

from keras_vit.weights import catalogue, catalogue_families
from keras_vit.weights.catalogue_families import ARCHS, FAMILIES, parameter_count
from tests import support
from tests.support.hosts import hub_files

FIXTURES = support.FIXTURES / "interop_families2"

# The fixtures timm 1.0.31 saved (their README): architecture, its model_args there (width, depth, patch, image),
# the hidden width timm derives from them, and the head's classes.
TINY = {
    "timm_dinov3_small": ("vit_small_patch16_dinov3", 48, 2, 8, 32, 192),  # mlp_ratio 4
    "timm_dinov3_small_qkvb": ("vit_small_patch16_dinov3_qkvb", 48, 2, 8, 32, 192),
    "timm_dinov3_small_plus": ("vit_small_plus_patch16_dinov3", 48, 2, 8, 32, 144),  # int(48 * 2.9) aligned to 8
    "timm_eva02_tiny": ("eva02_tiny_patch14_336", 48, 2, 14, 42, 128),  # int(48 * 4 * 2 / 3)
    "timm_eva02_base": ("eva02_base_patch14_448", 48, 2, 8, 32, 128),
    "timm_siglip2_gap": ("vit_base_patch16_siglip_gap_224", 48, 2, 8, 32, 192),
    "timm_siglip2_giantopt": ("vit_giantopt_patch16_siglip_256", 48, 2, 8, 32, 192),
}


@pytest.mark.parametrize("fixture", sorted(TINY))
def test_parameter_count_is_what_timm_saved(fixture):
    arch, width, depth, patch, image, hidden = TINY[fixture]
    tensors = load_file(FIXTURES / fixture / "model.safetensors")
    tiny = dataclasses.replace(ARCHS[arch], width=width, depth=depth, patch=patch, hidden=hidden)
    assert parameter_count(tiny, image, num_classes=5) == sum(t.size for t in tensors.values())


def test_parameter_counts_match_the_published_ones():
    # EVA-02: timm's results-imagenet.csv param_count (millions, two decimals) of each ImageNet-1k head.
    for name, (_, _, millions) in catalogue_families.EVA02_IN1K.items():
        assert f"{FAMILIES[name].params / 1e6:.2f}" == millions, name
    # SigLIP So400m/14 at 378 px with a 1000-class head: timm results-imagenet.csv @ 4e5207c7 lines 9 and 11.
    for arch, millions in (
        ("vit_so400m_patch14_siglip_378", "429.38"),
        ("vit_so400m_patch14_siglip_gap_378", "414.14"),
    ):
        assert f"{parameter_count(ARCHS[arch], 378, 1000) / 1e6:.2f}" == millions
    # DINOv3's README: 21M, 29M, 86M, 300M, 840M, 6,716M (rounded loosely: S is 21.59M, L 303.08M).
    for name, entry in FAMILIES.items():
        if entry.family == "dinov3":
            published = float(entry.params_published.rstrip("M").replace(",", "")) * 1e6
            assert abs(entry.params - published) / published < 0.03, name
    assert round(FAMILIES["vit_7b_patch16_dinov3.lvd1689m"].params / 1e6) == 6716
    # SigLIP 2's "ViT-B (86M), L (303M)": the encoder without the attention-pool head.
    assert round(FAMILIES["vit_base_patch16_siglip_gap_224.v2_webli"].params / 1e6) == 86
    assert round(FAMILIES["vit_large_patch16_siglip_gap_256.v2_webli"].params / 1e6) == 303


def test_entries_follow_timms_configs():
    families = {}
    for name, entry in FAMILIES.items():
        families[entry.family] = families.get(entry.family, 0) + 1
        assert entry.architecture in ARCHS and entry.hf_hub_id == f"timm/{name}"
        assert (entry.top1 is None) == (entry.top1_source is None) == (entry.top1_kind is None), name
        assert entry.params_source and entry.source
        if entry.family == "dinov3":  # _dinov3_cfg: 256 px, crop 1.0, no head; SAT-493M's own mean and std
            sat = name.endswith(".sat493m")
            assert (entry.image_size, entry.crop_pct, entry.num_classes, entry.eval_resize) == (256, 1.0, 0, 256)
            assert entry.mean == ((0.430, 0.411, 0.296) if sat else (0.485, 0.456, 0.406)), name
            assert entry.std == ((0.213, 0.156, 0.143) if sat else (0.229, 0.224, 0.225)), name
        if entry.family == "eva02":
            assert entry.num_classes == (21841 if name.endswith("_ft_in22k") else 1000) and entry.crop_pct == 1.0
            assert ("squash" in entry.note) == ("_ft_in22k" in name), name  # eva.py's crop_mode='squash'
        if entry.family == "siglip2":
            assert name.endswith(".v2_webli") and entry.num_classes == 0 and entry.crop_pct == 0.9  # ViT _cfg
            assert (entry.pooling == "map") == ("_gap_" not in name) == (entry.top1 is not None)
    assert families == {"dinov3": 14, "eva02": 11, "siglip2": 30}
    assert FAMILIES["eva02_large_patch14_448.mim_m38m_ft_in22k_in1k"].top1 == 90.052  # csv line 2
    assert FAMILIES["vit_giantopt_patch16_siglip_384.v2_webli"].top1 == 85.0


# `server`, `env`: the loopback Hub of tests/support/hosts.py (huggingface_hub's own client talks to it).
def test_a_name_loads_timms_hub_copy_in_one_line(server, env):
    """`from_pretrained(NAME)` fetches hf://timm/NAME: served here with the timm_dinov3_small fixture's files, it
    gives timm's own logits."""
    import numpy as np

    import keras_vit

    name = "vit_small_patch16_dinov3.lvd1689m"
    folder = FIXTURES / "timm_dinov3_small"
    hub_files(server, f"timm/{name}", "main", {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "io.npz"})
    model = keras_vit.from_pretrained(name)
    with np.load(folder / "io.npz") as io:
        np.testing.assert_allclose(model.predict(io["images"], verbose=0), io["logits"], rtol=0, atol=1e-5)
    assert ("GET", f"/timm/{name}/resolve/main/model.safetensors") in [m[:2] for m in server.state.requests]
    assert not set(FAMILIES) & set(catalogue.CATALOGUE)  # the released-file catalogue stays what it was


def test_list_and_info_show_the_hub_checkpoints(capsys):
    from keras_vit.weights.__main__ import main

    assert main(["list", "--family", "dinov3"]) == 0
    listed = capsys.readouterr().out
    assert all(f"`{n}`" in listed for n, e in FAMILIES.items() if e.family == "dinov3")
    assert main(["info", "eva02_large_patch14_448.mim_m38m_ft_in22k_in1k"]) == 0
    info = capsys.readouterr().out
    assert "hf://timm/eva02_large_patch14_448.mim_m38m_ft_in22k_in1k" in info and "90.052%" in info


def test_a_misspelt_name_is_answered_with_the_close_hub_names():
    from keras_vit.weights import sources

    with pytest.raises(FileNotFoundError, match=r"'vit_small_patch16_dinov3\.lvd1689m'"):
        sources.fetch("vit_small_patch16_dinov3.lvd1689")


def test_docs_section_is_the_generated_table():
    doc = (support.ROOT / "docs" / "pretrained_catalogue.md").read_text()
    for family in ("dinov3", "eva02", "siglip2"):
        entries = [e for e in FAMILIES.values() if e.family == family]
        assert catalogue_families.markdown_table(entries) in doc, family
