"""Published facts the catalogue (catalogue.py) is built from: timm's AugReg tags, the vit_jax files' sizes, ViT-B/8's
ImageNet-21k original and the SAM checkpoints (each with the source it was read from; see catalogue.py's sources)."""

# timm's augreg tags (its default_cfgs), named VARIANT_SIZE.augreg_in21k[_ft_in1k]: variant, size, pre-training run,
# and for the fine-tunes the fine-tuning learning rate and timm's top-1 (results-imagenet.csv).
TIMM_AUGREG = """
Ti/16     224  Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0
S/16      224  S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0
S/32      224  S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0
B/32      224  B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0
B/16      224  B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0
B/8       224  B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0
L/16      224  L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1
R26+S/32  224  R26_S_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.03-do_0.0-sd_0.0
"""
TIMM_AUGREG_FT = """
Ti/16     224  Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0          0.03  75.454  918
Ti/16     384  Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0          0.03  78.424  797
S/32      224  S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0        0.03  75.994  903
S/32      384  S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0        0.03  80.486  644
S/16      224  S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0        0.03  81.384  559
S/16      384  S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0        0.03  83.802  312
B/32      224  B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0       0.03  80.716  625
B/32      384  B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0         0.03  83.350  357
B/16      224  B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0        0.01  84.532  235
B/16      384  B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0        0.01  85.996  129
B/8       224  B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0         0.01  85.798  141
L/16      224  L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1        0.01  85.834  138
L/16      384  L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1        0.01  87.084   67
R26+S/32  384  R26_S_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.03-do_0.0-sd_0.0   0.03  84.048  290
"""
# timm's other fine-tunes, in TIMM_AUGREG_FT's columns: the R26+S/32 fine-tune at 224 (another pre-training run than
# the 384 one) and the AugReg runs pre-trained on ImageNet-1k only (timm's `augreg_in1k`).
TIMM_AUGREG_FT_ONLY = """
R26+S/32  224  R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1     0.03  81.864  515
S/16      224  S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0          0.01  78.846  764
S/16      384  S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0          0.01  81.116  585
B/32      224  B_32-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1          0.01  74.894  928
B/32      384  B_32-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1          0.01  78.752  772
B/16      224  B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1          0.01  79.154  746
B/16      384  B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1          0.01  81.102  587
"""

# vision_transformer `vit_jax.ipynb` at revision fa9697fc: the output of its `gsutil ls -lh gs://vit_models/imagenet*`
# cell, object -> the size as listed (MiB, or GiB for the large files).
NOTEBOOK = "vision_transformer vit_jax.ipynb @ fa9697fc, output of `gsutil ls -lh gs://vit_models/imagenet*`"
_LISTED = {
    "imagenet21k+imagenet2012/R50+ViT-B_16.npz": "377.57 MiB",
    "imagenet21k+imagenet2012/ViT-B_16-224.npz": "330.29 MiB",
    "imagenet21k+imagenet2012/ViT-B_16.npz": "331.4 MiB",
    "imagenet21k+imagenet2012/ViT-B_32.npz": "336.89 MiB",
    "imagenet21k+imagenet2012/ViT-B_8.npz": "334.78 MiB",
    "imagenet21k+imagenet2012/ViT-L_16-224.npz": "1.13 GiB",
    "imagenet21k+imagenet2012/ViT-L_16.npz": "1.14 GiB",
    "imagenet21k+imagenet2012/ViT-L_32.npz": "1.14 GiB",
    "imagenet21k/R50+ViT-B_16.npz": "439.85 MiB",
    "imagenet21k/ViT-B_16.npz": "393.69 MiB",
    "imagenet21k/ViT-B_32.npz": "400.01 MiB",
    "imagenet21k/ViT-B_8.npz": "393.72 MiB",
    "imagenet21k/ViT-H_14.npz": "2.46 GiB",
    "imagenet21k/ViT-L_16.npz": "1.22 GiB",
    "imagenet21k/ViT-L_32.npz": "1.23 GiB",
}


def listed_size(obj):
    """(size in MiB, its source) of a vit_jax object as the notebook lists it, or (None, None)."""
    text = _LISTED.get(obj)
    if text is None:
        return None, None
    value, unit = text.split()
    if unit == "MiB":
        return float(value), NOTEBOOK
    # GiB with two decimals: within 0.5 % of the file, inside the download's 1 % size check.
    return round(float(value) * 1024, 2), f"{NOTEBOOK} (listed as {text})"


TIMM_SAM = (
    "timm vision_transformer.py default_cfgs (`vit_base_patch{16,32}_224.sam_in1k`: url gs://vit_models/sam/..., "
    "hf_hub_id timm/, timm's ViT _cfg otherwise: 1000 classes, 224 px, crop_pct 0.9, bicubic, mean = std = 0.5)"
)
# The SAM checkpoints (arXiv 2106.01548) a source read here names: (variant, object, timm publishes it, source, and
# for timm's two their top-1 and its line in timm's results-imagenet.csv @ 049b1332).
# vision_transformer's README says only that gs://vit_models/sam holds "Models pre-trained on ImageNet with SAM".
SAM_LOW_RANK = (
    "tml-epfl/sam-low-rank-features README.md (Andriushchenko et al. 2023, arXiv 2305.16292): its ImageNet-1k "
    "evaluation commands read gs://vit_models/sam/ViT-{B_16,B_32,L_16,L_32}.npz"
)
DCMM = "Shawey94/DCMM-Transformer README.md: downloads storage.googleapis.com/vit_models/sam/ViT-S_16.npz"
SAM = (
    ("B/16", "sam/ViT-B_16.npz", True, TIMM_SAM, 80.244, 669),
    ("B/32", "sam/ViT-B_32.npz", True, TIMM_SAM, 73.694, 947),
    ("S/16", "sam/ViT-S_16.npz", False, DCMM, None, None),
    ("L/16", "sam/ViT-L_16.npz", False, SAM_LOW_RANK, None, None),
    ("L/32", "sam/ViT-L_32.npz", False, SAM_LOW_RANK, None, None),
)
SAM_NOTE = (
    "trained from scratch on ImageNet-1k with SAM (arXiv 2106.01548); whether the file holds pre_logits is not "
    "published: from_pretrained builds what the file holds"
)
SAM_NOT_TIMM = (
    "timm does not publish this one (no hf_hub_id); 224 px and crop_pct 0.9 follow timm's two SAM entries, "
    "the resolution the SAM paper trains at"
)
B8_NOTE = (
    "listed in vit_jax.ipynb's bucket listing (2021-03-10); whether it holds pre_logits is not published: "
    "from_pretrained builds what the file holds"
)
# The B/8 ImageNet fine-tune's resolution is published by no source read here; the two listed sizes give it. The
# 21k file minus the fine-tune is 58.94 MiB; at equal resolution the difference would be pre_logits (768 x 768 + 768)
# plus the 21843-class head less the 1000-class one, 16,618,859 float32 = 63.40 MiB (B/16's listed 21k and -224
# files differ by exactly that, 63.40 MiB). The fine-tune's position embedding is therefore 4.46 MiB (1521 +- 4
# tokens of 768 float32) longer than the 785 tokens at 224 px: 2306 +- 4 tokens, and the only 1 + (n / 8)^2 in that
# range is 2305, n = 384 (B/16's listed 384 px and -224 fine-tunes differ by 1.11 MiB, its 380 extra tokens).
B8_FT_NOTE = (
    "its resolution, 384 px, is derived from the sizes vit_jax.ipynb lists (catalogue_extra.py shows the "
    "arithmetic), not published; from_pretrained reads the image size from the file's position embedding"
)

# The recommended AugReg checkpoints (models keras_vit builds): variant -> (pre-training run, its MiB, fine-tuning lr
# and resolution of the ImageNet fine-tune, its top-1), from the README's table (R50+L/32 and R+Ti/16 are left out:
# no keras_vit variant) and, for B/8, from vit_jax_augreg.ipynb (the same selection: best final_val, then best test).
RECOMMENDED = {
    "L/16": ("L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", 1243, "0.01", 384, 85.59),
    "B/16": ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", 391, "0.03", 384, 85.49),
    "S/16": ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", 115, "0.03", 384, 83.73),
    "R26+S/32": ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", 170, "0.01", 384, 83.85),
    "Ti/16": ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", 37, "0.03", 384, 78.22),
    "B/32": ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", 398, "0.01", 384, 83.59),
    "S/32": ("S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", 118, "0.01", 384, 79.58),
}
RECOMMENDED_NB = {"B/8": ("B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0", None, "0.03", 224, 85.578)}
AUGREG_NOTEBOOK = (
    "vision_transformer vit_jax_augreg.ipynb @ 62a446f, output of its cell of each model's recommended run and best "
    "ImageNet fine-tune (adapt_final_test 0.85578; B/8 is not in the README's table)"
)
