"""The released ViT checkpoints by name (timm's `variant.tag` convention): what each file is, where it lives, and
what its publisher reports. docs/pretrained_catalogue.md#sources names the source of every figure."""

import dataclasses
import difflib
import math
import os
import urllib.parse

from keras_vit.weights import catalogue_extra as extra

GCS_HTTPS = "https://storage.googleapis.com"
# Tests (and mirrors) point the bucket's https form elsewhere; the gs:// form and the cache paths do not change.
GCS_ENDPOINT_ENV = "KERAS_VIT_GCS_ENDPOINT"

IMAGENET21K, IMAGENET1K = "imagenet21k", "imagenet1k"
LABEL_SPACES = {IMAGENET21K: 21843, IMAGENET1K: 1000}


@dataclasses.dataclass(frozen=True)
class Entry:
    """A catalogue entry: one released checkpoint file.

    Attributes:
        name: the catalogue name (`vit_base_patch16_224.orig_in21k`).
        variant: the keras_vit variant (`keras_vit.get_variant(variant)`), e.g. "B/16" or "R50+B/16".
        image_size: the resolution it was trained / fine-tuned at.
        label_space: "imagenet21k" (21843 classes) or "imagenet1k" (1000).
        num_classes: the head's width.
        representation_size: width of the `pre_logits` layer (tanh) before the head, None when there is none.
        pooling: "token" (class token) or "gap".
        position_embedding: "learned" or "sincos2d" (fixed, not stored in the file).
        bucket, object: where it lives: `gs://{bucket}/{object}`.
        top1: ImageNet-1k top-1 in % reported for it, None when not reported (e.g. pre-training only).
        top1_source: who reported `top1`, and how.
        size_mib, size_source: the publisher's rounded size in MiB, when given, and where it is published; a
            download whose size is more than 1 % off is refused (keras_vit/weights/content.py).
        size_bytes, sha256: exact size and hash when the publisher gives them (none does yet).
        mean, std: per-channel normalisation of inputs in [0, 1] ((x - 127.5) / 127.5 for 0.5, 0.5).
        crop_pct, interpolation: the evaluation resize (resize to image_size / crop_pct, centre crop).
        hf_hub_id: timm's copy of the weights on the Hugging Face Hub, in its layout, where timm publishes one (for
            the `orig_in21k` files without the 21k head and without `pre_logits`: see `note`).
        family: "vit_jax" (the paper's release), "augreg" ("How to train your ViT?") or "big_vision".
        note: anything a user should know before using it.
        aliases: other names that find it (file names, bucket paths).
    """

    name: str
    variant: str
    image_size: int
    label_space: str
    num_classes: int
    representation_size: int | None
    bucket: str
    object: str
    top1: float | None
    top1_source: str | None
    family: str
    pooling: str = "token"
    position_embedding: str = "learned"
    size_mib: float | None = None
    size_source: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    mean: tuple = (0.5, 0.5, 0.5)
    std: tuple = (0.5, 0.5, 0.5)
    crop_pct: float = 1.0
    interpolation: str = "bicubic"
    hf_hub_id: str | None = None
    note: str = ""
    aliases: tuple = ()

    @property
    def gs_url(self):
        return f"gs://{self.bucket}/{self.object}"

    @property
    def url(self):
        """The https download URL (KERAS_VIT_GCS_ENDPOINT replaces https://storage.googleapis.com when set)."""
        return gcs_https_url(self.bucket, self.object)

    @property
    def file_name(self):
        return self.object.rsplit("/", 1)[-1]

    @property
    def preprocessing(self):
        resize = eval_resize(self.image_size, self.crop_pct)
        crop = f"resize to {resize}, centre-crop {self.image_size}" if resize != self.image_size else None
        scale = "(x - 127.5) / 127.5" if self.mean == (0.5,) * 3 and self.std == (0.5,) * 3 else "mean/std"
        return f"{crop or f'resize to {self.image_size}x{self.image_size}'} ({self.interpolation}), {scale}"


def eval_resize(image_size, crop_pct):
    """The side an image is resized to before its centre crop: timm's `math.floor(img_size / crop_pct)`."""
    return math.floor(image_size / crop_pct)


def gcs_https_url(bucket, obj):
    """The public https URL of a bucket object; '+' and other reserved characters are percent-encoded."""
    endpoint = os.environ.get(GCS_ENDPOINT_ENV, "").rstrip("/") or GCS_HTTPS
    return f"{endpoint}/{bucket}/{urllib.parse.quote(obj, safe='/')}"


# --- the table ---------------------------------------------------------------------------------------------------

_TIMM_NAMES = {
    "Ti/16": "vit_tiny_patch16",
    "S/16": "vit_small_patch16",
    "S/32": "vit_small_patch32",
    "B/8": "vit_base_patch8",
    "B/16": "vit_base_patch16",
    "B/32": "vit_base_patch32",
    "L/16": "vit_large_patch16",
    "L/32": "vit_large_patch32",
    "H/14": "vit_huge_patch14",
    "R50+B/16": "vit_base_r50_s16",
    "R26+S/32": "vit_small_r26_s32",
}
_HIDDEN = {"Ti": 192, "S": 384, "B": 768, "L": 1024, "H": 1280}

_VT_README = "vision_transformer README, update of 29.10.2020 (expected top-1 of the -224 fine-tunes)"
_VT_AUGREG = "vision_transformer README, recommended AugReg checkpoints"
_TIMM_CSV = "timm results-imagenet.csv @ 049b1332 (2023-05-24), timm's evaluation"
_TIMM_CSV_2021 = "timm results-imagenet.csv of 2021-04-17 (af647c10), timm's evaluation"


def _csv(line, source=_TIMM_CSV):
    return f"{source}, line {line}"  # the line in that revision's file (line 1 is the header)


_HUB_HEADLESS = (
    "timm's Hub copy (hf_hub_id) is not the whole file: it has neither the 21k head nor pre_logits (num_classes=0)"
)


def _name(variant, size, tag):
    return f"{_TIMM_NAMES[variant]}_{size}.{tag}"


def _crop(size):
    return 0.9 if size == 224 else 1.0  # timm's _cfg: crop_pct .9 at 224, 1.0 for the 384 fine-tunes


def _vit_jax():
    """The paper's release: ImageNet-21k pre-training (with pre_logits) and 21k + ImageNet-2012 fine-tunes."""
    return _vit_jax_in21k() + _vit_jax_fine_tunes() + _sam()


def _vit_jax_in21k():
    """The ImageNet-21k originals (`imagenet21k/`), with pre_logits where timm's builders say so."""
    out = []
    # (variant, file stem, hf_hub_id in timm, note)
    for variant, stem, hub in [
        ("B/16", "ViT-B_16", "timm/vit_base_patch16_224.orig_in21k"),
        ("B/32", "ViT-B_32", "timm/vit_base_patch32_224.orig_in21k"),
        ("L/16", "ViT-L_16", "timm/vit_large_patch16_224.orig_in21k"),
        ("L/32", "ViT-L_32", "timm/vit_large_patch32_224.orig_in21k"),
        ("H/14", "ViT-H_14", "timm/vit_huge_patch14_224.orig_in21k"),
        ("R50+B/16", "R50+ViT-B_16", "timm/vit_base_r50_s16_224.orig_in21k"),
        ("B/8", "ViT-B_8", None),
    ]:
        hidden = _HIDDEN[variant.split("+")[-1].split("/")[0]]
        zeroed = "the 21k head is all zeros in this file (timm's note); use it for fine-tuning. "
        note = (zeroed if stem in ("ViT-H_14", "ViT-L_32") else "") + (_HUB_HEADLESS if hub else extra.B8_NOTE)
        mib, size_source = extra.listed_size(f"imagenet21k/{stem}.npz")
        out.append(
            Entry(
                name=_name(variant, 224, "orig_in21k"),
                variant=variant,
                image_size=224,
                label_space=IMAGENET21K,
                num_classes=21843,
                representation_size=hidden if hub else None,  # timm's *_in21k builders state it for those it has
                bucket="vit_models",
                object=f"imagenet21k/{stem}.npz",
                top1=None,
                top1_source=None,
                family="vit_jax",
                size_mib=mib,
                size_source=size_source,
                crop_pct=0.9,
                hf_hub_id=hub,
                note=note,
                aliases=(stem, f"{stem}.npz", f"imagenet21k/{stem}", f"imagenet21k/{stem}.npz"),
            )
        )
    return out


def _vit_jax_fine_tunes():
    """The ImageNet-21k + ImageNet-2012 fine-tunes (`imagenet21k+imagenet2012/`)."""
    out = []
    # (variant, size, file stem, top-1, source, hf_hub_id)
    for variant, size, stem, top1, source, hub in [
        ("B/16", 384, "ViT-B_16", 84.200, _csv(275), "timm/vit_base_patch16_384.orig_in21k_ft_in1k"),
        ("B/16", 224, "ViT-B_16-224", 81.2, _VT_README, "timm/vit_base_patch16_224.orig_in21k_ft_in1k"),
        ("B/32", 384, "ViT-B_32", 81.652, _csv(83, _TIMM_CSV_2021), None),
        ("L/16", 384, "ViT-L_16", 85.158, _csv(20, _TIMM_CSV_2021), None),
        ("L/16", 224, "ViT-L_16-224", 82.7, _VT_README, None),
        ("L/32", 384, "ViT-L_32", 81.510, _csv(545), "timm/vit_large_patch32_384.orig_in21k_ft_in1k"),
        ("R50+B/16", 384, "R50+ViT-B_16", 84.976, _csv(206), "timm/vit_base_r50_s16_384.orig_in21k_ft_in1k"),
        ("B/8", 384, "ViT-B_8", None, None, None),
    ]:
        folder = "imagenet21k+imagenet2012"
        aliases = (f"{folder}/{stem}", f"{folder}/{stem}.npz") + ((stem, f"{stem}.npz") if "-224" in stem else ())
        mib, size_source = extra.listed_size(f"{folder}/{stem}.npz")
        out.append(
            Entry(
                name=_name(variant, size, "orig_in21k_ft_in1k"),
                variant=variant,
                image_size=size,
                label_space=IMAGENET1K,
                num_classes=1000,
                representation_size=None,
                bucket="vit_models",
                object=f"{folder}/{stem}.npz",
                top1=top1,
                top1_source=source,
                family="vit_jax",
                size_mib=mib,
                size_source=size_source,
                crop_pct=_crop(size),
                hf_hub_id=hub,
                note=extra.B8_FT_NOTE if stem == "ViT-B_8" else "",
                aliases=aliases,
            )
        )
    return out


def _sam():
    """The SAM checkpoints (arXiv 2106.01548) a source names, trained on ImageNet-1k (two of them in timm)."""
    out = []
    for variant, obj, in_timm, source, top1, line in extra.SAM:
        name = _name(variant, 224, "sam_in1k")
        stem = obj.rsplit("/", 1)[-1][: -len(".npz")]
        note = extra.SAM_NOTE + ("" if in_timm else f"; {extra.SAM_NOT_TIMM}") + f" [{source}]"
        out.append(
            Entry(
                name=name, variant=variant, image_size=224, label_space=IMAGENET1K, num_classes=1000,
                representation_size=None, bucket="vit_models", object=obj, top1=top1,
                top1_source=_csv(line) if top1 else None,
                family="vit_jax", crop_pct=0.9, hf_hub_id=f"timm/{name}" if in_timm else None, note=note,
                aliases=(f"sam/{stem}", obj),
            )
        )  # fmt: skip
    return out


def _augreg(name, variant, size, stem, *, top1=None, source=None, mib=None, hub=False):
    fine_tuned = "--imagenet2012" in stem
    aliases = (f"augreg/{stem}", f"augreg/{stem}.npz", stem, f"{stem}.npz")
    return Entry(
        name=name,
        variant=variant,
        image_size=size,
        label_space=IMAGENET1K if fine_tuned else IMAGENET21K,
        num_classes=1000 if fine_tuned else 21843,
        representation_size=None,
        bucket="vit_models",
        object=f"augreg/{stem}.npz",
        top1=top1,
        top1_source=source,
        family="augreg",
        size_mib=mib,
        size_source=_VT_AUGREG if mib else None,
        crop_pct=_crop(size),
        hf_hub_id=f"timm/{name}" if hub else None,
        aliases=aliases,
    )


_FT = "--imagenet2012-steps_20k-lr_{lr}-res_{res}"


def _rows(table):
    return [line.split() for line in table.strip().splitlines()]


def _augreg_all():
    by_stem = {}
    for variant, size, stem in _rows(extra.TIMM_AUGREG):
        by_stem[stem] = _augreg(_name(variant, size, "augreg_in21k"), variant, int(size), stem, hub=True)
    for variant, size, pre, lr, top1, line in _rows(extra.TIMM_AUGREG_FT):
        stem = pre + _FT.format(lr=lr, res=size)
        name = _name(variant, size, "augreg_in21k_ft_in1k")
        by_stem[stem] = _augreg(name, variant, int(size), stem, top1=float(top1), source=_csv(line), hub=True)
    for variant, size, pre, lr, top1, line in _rows(extra.TIMM_AUGREG_FT_ONLY):
        stem = pre + _FT.format(lr=lr, res=size)
        name = _name(variant, size, "augreg_in1k" if "-i1k-" in stem else "augreg_in21k_ft_in1k")
        by_stem[stem] = _augreg(name, variant, int(size), stem, top1=float(top1), source=_csv(line), hub=True)
    recommended = [(v, row, _VT_AUGREG) for v, row in extra.RECOMMENDED.items()]
    recommended += [(v, row, extra.AUGREG_NOTEBOOK) for v, row in extra.RECOMMENDED_NB.items()]
    for variant, (pre, mib, lr, res, top1), source in recommended:
        pre_name = _name(variant, 224, "augreg_rec_in21k")
        ft_stem = pre + _FT.format(lr=lr, res=res)
        ft_name = _name(variant, res, "augreg_rec_in21k_ft_in1k")
        if pre in by_stem:  # timm publishes the recommended run: keep its name, add ours as an alias
            old = by_stem[pre]
            by_stem[pre] = dataclasses.replace(
                old, size_mib=mib, size_source=_VT_AUGREG, aliases=(*old.aliases, pre_name)
            )
        else:
            by_stem[pre] = _augreg(pre_name, variant, 224, pre, mib=mib)
        if ft_stem in by_stem:  # the publisher's top-1 replaces timm's own measurement
            old = by_stem[ft_stem]
            by_stem[ft_stem] = dataclasses.replace(old, top1=top1, top1_source=source, aliases=(*old.aliases, ft_name))
        else:
            by_stem[ft_stem] = _augreg(ft_name, variant, res, ft_stem, top1=top1, source=source)
    return list(by_stem.values())


def _big_vision():
    out = []
    for epochs, top1 in [(90, 76.5), (150, None), (300, None)]:
        stem = f"vit_s16_i1k_{epochs}ep"
        out.append(
            Entry(
                name=f"vit_small_patch16_224.big_vision_in1k_{epochs}ep",
                variant="S/16",
                image_size=224,
                label_space=IMAGENET1K,
                num_classes=1000,
                representation_size=384,
                bucket="big_vision",
                object=f"{stem}.npz",
                top1=top1,
                top1_source="big_vision configs/vit_s16_i1k.py" if top1 else None,
                family="big_vision",
                pooling="gap",
                position_embedding="sincos2d",
                crop_pct=224 / 256,
                interpolation="area",  # big_vision's resize_small: tf.image.resize(method="area")
                note="plain ViT baseline trained on ImageNet-1k only (arXiv 2205.01580)",
                aliases=(stem, f"{stem}.npz", f"big_vision/{stem}.npz", f"i1k-s16-{epochs}ep"),
            )
        )
    return out


CATALOGUE = {c.name: c for c in [*_vit_jax(), *_augreg_all(), *_big_vision()]}
_ALIASES = {alias: c.name for c in CATALOGUE.values() for alias in (*c.aliases, f"{c.bucket}/{c.object}")}


def names():
    """Every catalogue name, sorted."""
    return sorted(CATALOGUE)


def find(name):
    """The `Entry` of a name, alias (file name, bucket path) or gs:// URL; None when nothing matches."""
    key = str(name).strip()
    if key.startswith("gs://"):
        key = key[len("gs://") :]
    for table in (CATALOGUE, _ALIASES):
        if key in table:
            return CATALOGUE[table[key]] if table is _ALIASES else table[key]
    lower = {k.lower(): v for k, v in _ALIASES.items()} | {k.lower(): k for k in CATALOGUE}
    return CATALOGUE[lower[key.lower()]] if key.lower() in lower else None


def get(name):
    """The `Entry` of a name or alias; a `KeyError` naming the closest names otherwise."""
    entry = find(name)
    if entry is None:
        close = difflib.get_close_matches(str(name), [*CATALOGUE, *_ALIASES], n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise KeyError(
            f"{name!r} is not in the catalogue.{hint} `python -m keras_vit.weights list` shows every name; a path, "
            f"https:// or gs:// URL, or hf://ORG/NAME works too."
        )
    return entry
