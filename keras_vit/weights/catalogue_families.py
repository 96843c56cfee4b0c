"""timm's Hub checkpoints of the next ViT families (DINOv3, EVA-02 fine-tunes, SigLIP 2 towers) by name, as data:
each lives at hf://timm/NAME, apart from `catalogue.CATALOGUE`'s released files."""

import dataclasses

from keras_vit.weights.catalogue import eval_resize

# Sources (read late 2026; nothing was downloaded):
TIMM_EVA = "timm models/eva.py @ aa4b5850 (default_cfgs and architecture functions)"
TIMM_VIT = "timm models/vision_transformer.py @ aa4b5850 (default_cfgs and architecture functions)"
TIMM_CSV = "timm results-imagenet.csv @ 049b1332 (2023-05-24), timm's evaluation, line {}"
TIMM_CSV_NOW = "timm results-imagenet.csv @ 4e5207c7 (2025-10-30), line {}"
DINOV3_README = "facebookresearch/dinov3 README.md @ 6876159, pretrained backbones table (Parameters)"
SIGLIP2_README = "big_vision configs/proj/image_text/README_siglip2.md @ 3325653"
SIGLIP2_SIZES = f"{SIGLIP2_README}: checkpoints 'at four sizes: ViT-B (86M), L (303M), So400m (400M), and g (1B)'"
SIGLIP2_ZERO_SHOT = f"{SIGLIP2_README}, table 'INet 0-shot'"

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SAT493M_MEAN, SAT493M_STD = (0.430, 0.411, 0.296), (0.213, 0.156, 0.143)  # eva.py's sat493m cfgs, dinov3 README
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)  # OPENAI_CLIP_*


@dataclasses.dataclass(frozen=True)
class Arch:
    """What fixes a timm architecture's parameter count.

    mlp: "gelu" (fc1, fc2), "glu" (packed fc1 [2H, D]), "swiglu" (fc1_g, fc1_x, fc2), "swiglu_norm" (and a
    LayerNorm on the hidden units). qkv_bias: "all", "qv" (no k bias) or "none". prefix: class and register tokens.
    pos: learned position table "none", "patches" or "patches+cls". pool: "avg", "map" (an attention-pool head).
    """

    width: int
    depth: int
    patch: int
    hidden: int
    mlp: str = "gelu"
    qkv_bias: str = "all"
    layer_scale: bool = False
    prefix: int = 1
    pos: str = "patches+cls"
    pool: str = "avg"


def parameter_count(arch, image_size, num_classes=0):
    """Parameters of a timm model of `arch` at `image_size` with a `num_classes` head (0: none), as its file holds
    them (timm's non-persistent buffers, such as the rotary periods and the zero k bias, are not in the file)."""
    d, h = arch.width, arch.hidden
    grid = (image_size // arch.patch) ** 2
    total = 3 * arch.patch**2 * d + d + arch.prefix * d  # patch embedding, class and register tokens
    total += {"none": 0, "patches": grid, "patches+cls": grid + 1}[arch.pos] * d
    mlp = {
        "gelu": d * h + h + h * d + d,
        "glu": d * 2 * h + 2 * h + h * d + d,
        "swiglu": 2 * (d * h + h) + h * d + d,
        "swiglu_norm": 2 * (d * h + h) + 2 * h + h * d + d,
    }[arch.mlp]
    attention = 3 * d * d + {"all": 3, "qv": 2, "none": 0}[arch.qkv_bias] * d + d * d + d
    total += arch.depth * (2 * 2 * d + attention + mlp + 2 * d * arch.layer_scale) + 2 * d  # blocks, final norm
    if arch.pool == "map":  # latent, q, kv, proj, its norm and MLP (the blocks' width)
        total += d + (d * d + d) + (2 * d * d + 2 * d) + (d * d + d) + 2 * d + (d * h + h + h * d + d)
    return total + (d * num_classes + num_classes if num_classes else 0)


def _dinov3(width, depth, hidden, mlp="gelu", qkv_bias="none"):
    return Arch(width, depth, 16, hidden, mlp, qkv_bias, layer_scale=True, prefix=5, pos="none")


def _siglip(width, depth, patch, hidden, pool="map"):
    return Arch(width, depth, patch, hidden, "gelu", "all", prefix=0, pos="patches", pool=pool)


# timm's architecture functions (the `_qkvb` ones add q and v biases, zero in these checkpoints).
ARCHS = {
    "vit_small_patch16_dinov3": _dinov3(384, 12, 1536),
    "vit_small_plus_patch16_dinov3": _dinov3(384, 12, 1536, "swiglu"),  # mlp_ratio 4, swiglu_align_to 8
    "vit_base_patch16_dinov3": _dinov3(768, 12, 3072),
    "vit_large_patch16_dinov3": _dinov3(1024, 24, 4096),
    "vit_huge_plus_patch16_dinov3": _dinov3(1280, 32, 5120, "swiglu"),
    "vit_7b_patch16_dinov3": _dinov3(4096, 40, 8192, "swiglu"),  # mlp_ratio 2, swiglu_align_to 64
    # EVA-02: hidden int(width * 4 * 2 / 3); tiny and small pack the SwiGLU, base and large split it with a norm.
    "eva02_tiny_patch14_336": Arch(192, 12, 14, 512, "glu", "qv"),
    "eva02_small_patch14_336": Arch(384, 12, 14, 1024, "glu", "qv"),
    "eva02_base_patch14_448": Arch(768, 12, 14, 2048, "swiglu_norm", "qv"),
    "eva02_large_patch14_448": Arch(1024, 24, 14, 2730, "swiglu_norm", "qv"),
}
for _name in [n for n in ARCHS if n.endswith("_dinov3") and not n.startswith("vit_7b")]:
    ARCHS[f"{_name}_qkvb"] = dataclasses.replace(ARCHS[_name], qkv_bias="qv")
_SIGLIP = {"base_patch32": (768, 12, 32, 3072), "base_patch16": (768, 12, 16, 3072)}
_SIGLIP |= {"large_patch16": (1024, 24, 16, 4096), "giantopt_patch16": (1536, 40, 16, 6144)}
_SIGLIP |= {"so400m_patch14": (1152, 27, 14, 4304), "so400m_patch16": (1152, 27, 16, 4304)}  # mlp_ratio 3.7362
# SigLIP 2's fixed-resolution towers in timm (`*.v2_webli`): size -> resolutions, and big_vision's zero-shot top-1
# of each (README_siglip2.md; its So400m/14 at "384" is timm's 378, 27 x 27 patches of 14).
SIGLIP2_ZERO_SHOT_TOP1 = {
    "base_patch32": {256: 74.0},
    "base_patch16": {224: 78.2, 256: 79.1, 384: 80.6, 512: 81.2},
    "large_patch16": {256: 82.5, 384: 83.1, 512: 83.5},
    "so400m_patch14": {224: 83.2, 378: 84.1},
    "so400m_patch16": {256: 83.4, 384: 84.1, 512: 84.3},
    "giantopt_patch16": {256: 84.5, 384: 85.0},
}
for _size, _res in SIGLIP2_ZERO_SHOT_TOP1.items():
    for _r in _res:
        ARCHS[f"vit_{_size}_siglip_{_r}"] = _siglip(*_SIGLIP[_size])
        ARCHS[f"vit_{_size}_siglip_gap_{_r}"] = _siglip(*_SIGLIP[_size], pool="avg")


@dataclasses.dataclass(frozen=True)
class HubEntry:
    """One checkpoint of timm's on the Hub (`hf://{hf_hub_id}`), with its settings and published figures.

    top1 is ImageNet-1k top-1 in % of the kind `top1_kind` says ("fine-tuned", "zero-shot (two towers)"), None when
    none is published; params_published is the publisher's rounded count as written, for the computed `params`.
    """

    name: str
    family: str
    image_size: int
    num_classes: int
    mean: tuple
    std: tuple
    crop_pct: float
    params_published: str
    params_source: str
    source: str
    top1: float | None = None
    top1_kind: str | None = None
    top1_source: str | None = None
    pooling: str = "avg"
    interpolation: str = "bicubic"
    note: str = ""

    @property
    def architecture(self):
        return self.name.split(".")[0]

    @property
    def hf_hub_id(self):
        return f"timm/{self.name}"

    @property
    def params(self):
        return parameter_count(ARCHS[self.architecture], self.image_size, self.num_classes)

    @property
    def eval_resize(self):
        return eval_resize(self.image_size, self.crop_pct)


DINOV3_POOLING = (
    "timm's default pooling is the mean of the patch tokens (global_pool='avg'); DINOv3 and transformers use the "
    "normed class token (global_pool='token')"
)
_DINOV3_PARAMS = {
    "small": "21M",
    "small_plus": "29M",
    "base": "86M",
    "large": "300M",
    "huge_plus": "840M",
    "7b": "6,716M",
}


def _dinov3_entries():
    out = []
    for size, published in _DINOV3_PARAMS.items():
        for qkvb in ("", "_qkvb"):
            for tag in ("lvd1689m", "sat493m"):
                sat = tag == "sat493m"
                if (qkvb and size == "7b") or (sat and size not in ("large", "7b")):  # timm has no others
                    continue
                note = DINOV3_POOLING + ("; q and v biases present and zero" if qkvb else "")
                out.append(
                    HubEntry(
                        name=f"vit_{size}_patch16_dinov3{qkvb}.{tag}", family="dinov3", image_size=256, num_classes=0,
                        mean=SAT493M_MEAN if sat else IMAGENET_MEAN, std=SAT493M_STD if sat else IMAGENET_STD,
                        crop_pct=1.0, params_published=published, params_source=DINOV3_README, source=TIMM_EVA,
                        note=note,
                    )
                )  # fmt: skip
    return out


# EVA-02's ImageNet heads in timm: name -> (top-1, line in results-imagenet.csv @ 049b1332, timm's param_count in M
# from that line). The ImageNet-22k heads (21841 classes) have no ImageNet-1k figure.
EVA02_IN1K = {
    "eva02_tiny_patch14_336.mim_in22k_ft_in1k": (80.630, 633, "5.76"),
    "eva02_small_patch14_336.mim_in22k_ft_in1k": (85.716, 148, "22.13"),
    "eva02_base_patch14_448.mim_in22k_ft_in1k": (88.250, 27, "87.12"),
    "eva02_large_patch14_448.mim_in22k_ft_in1k": (89.624, 5, "305.08"),
    "eva02_large_patch14_448.mim_m38m_ft_in1k": (89.570, 6, "305.08"),
    "eva02_base_patch14_448.mim_in22k_ft_in22k_in1k": (88.692, 12, "87.12"),
    "eva02_large_patch14_448.mim_in22k_ft_in22k_in1k": (89.966, 3, "305.08"),
    "eva02_large_patch14_448.mim_m38m_ft_in22k_in1k": (90.052, 2, "305.08"),
}
EVA02_IN22K = (
    "eva02_base_patch14_448.mim_in22k_ft_in22k",
    "eva02_large_patch14_448.mim_in22k_ft_in22k",
    "eva02_large_patch14_448.mim_m38m_ft_in22k",
)
EVA02_SQUASH = "timm evaluates it with crop_mode='squash' (the whole image resized to a square, no crop)"


def _eva02_entries():
    out = []
    for name in [*EVA02_IN1K, *EVA02_IN22K]:
        top1, line, millions = EVA02_IN1K.get(name, (None, None, None))
        size = int(name.split(".")[0].rsplit("_", 1)[1])
        squash = "_ft_in22k" in name  # eva.py gives the in22k-fine-tuned ones crop_mode='squash'
        out.append(
            HubEntry(
                name=name, family="eva02", image_size=size, num_classes=1000 if top1 else 21841, mean=CLIP_MEAN,
                std=CLIP_STD, crop_pct=1.0, params_published=f"{millions}M" if millions else "-",
                params_source=TIMM_CSV.format(line) + " (param_count)" if line else "-", source=TIMM_EVA, top1=top1,
                top1_kind="fine-tuned" if top1 else None, top1_source=TIMM_CSV.format(line) if line else None,
                note=EVA02_SQUASH if squash else "",
            )
        )  # fmt: skip
    return out


SIGLIP2_NOTE = "an image tower of a two-tower model (num_classes=0); timm's config keeps its ViT default crop_pct 0.9"
SIGLIP2_GAP = "the same tower without the attention-pool head, averaged over the patch tokens (timm's `_gap` variant)"


def _siglip2_entries():
    out = []
    for size, by_res in SIGLIP2_ZERO_SHOT_TOP1.items():
        published = {"base": "86M", "large": "303M", "so400m": "400M", "giantopt": "1B"}[size.split("_")[0]]
        for res, top1 in by_res.items():
            for gap in ("", "_gap"):
                out.append(
                    HubEntry(
                        name=f"vit_{size}_siglip{gap}_{res}.v2_webli", family="siglip2", image_size=res, num_classes=0,
                        mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), crop_pct=0.9, params_published=published,
                        params_source=SIGLIP2_SIZES, source=TIMM_VIT, top1=None if gap else top1,
                        top1_kind=None if gap else "zero-shot (two towers)",
                        top1_source=None if gap else SIGLIP2_ZERO_SHOT, pooling="avg" if gap else "map",
                        note=SIGLIP2_NOTE + (f"; {SIGLIP2_GAP}" if gap else ""),
                    )
                )  # fmt: skip
    return out


_NORMALISATION = {IMAGENET_MEAN: "ImageNet", SAT493M_MEAN: "SAT-493M", CLIP_MEAN: "OpenAI CLIP", (0.5,) * 3: "0.5"}
FAMILIES = {e.name: e for e in [*_dinov3_entries(), *_eva02_entries(), *_siglip2_entries()]}


def markdown_table(entries):
    """The entries as a Markdown table (docs/pretrained_catalogue.md's next-families section is this output)."""
    lines = [
        "| name | res | classes | mean/std | parameters (published) | top-1 | top-1 kind, source |",
        "| :--- | ---: | ---: | :--- | ---: | ---: | :--- |",
    ]
    for e in entries:
        top1 = f"{e.top1:g}" if e.top1 else "-"
        kind = f"{e.top1_kind}: {e.top1_source}" if e.top1 else "-"
        norm = _NORMALISATION[e.mean]
        cells = [f"`{e.name}`", e.image_size, e.num_classes, norm, f"{e.params:,} ({e.params_published})", top1, kind]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)
