"""Model configurations: one frozen dataclass and one variant table."""

import dataclasses
import re
from typing import Literal

from keras_vit._names import did_you_mean
from keras_vit._remat import remat_setting

# name: (hidden size D, layers L, heads H, MLP width M), from the paper's Table 1 plus DeiT's Ti and S.
_SIZES = {
    "Ti": (192, 12, 3, 768),
    "S": (384, 12, 6, 1536),
    "B": (768, 12, 12, 3072),
    "L": (1024, 24, 16, 4096),
    "H": (1280, 32, 16, 5120),
}
_PATCHES = (8, 14, 16, 32)
# Hybrid stems: ResNet stage depths of the CNN whose feature map is tokenised with 1x1 patches.
_HYBRIDS = {"R50+B/16": ("B", (3, 4, 9)), "R26+S/32": ("S", (2, 2, 2, 2))}
# The options of the paper's relatives (DeiT, DeiT-III, DINOv2, CLIP, SigLIP) and their plain-ViT values.
FAMILY_DEFAULTS = dict(
    layer_scale=None,
    num_registers=0,
    distillation_token=False,
    no_embed_class=False,
    pre_norm=False,
    patch_bias=True,
    fc_norm=False,
    resnet_norm="vit_jax",
    rope=None,
    rope_ref_grid=None,
    rope_offset=None,
    rope_base=None,
    rope_rescale=None,
    mlp_type="gelu",
    mlp_norm=False,
    attention_norm=False,
    qkv_bias="qkv",
    proj_bias=True,
    mlp_bias=True,
    norm="layer",
    patch_norm=False,
    encoder_norm=True,
    map_heads=None,
    map_mlp_dim=None,
)


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Everything that defines a Vision Transformer; the fields are `VisionTransformer`'s arguments.

    Attributes:
        image_size: (height, width) of the input in pixels.
        patch_size: side of a square patch, in pixels (in feature-map cells for a hybrid: 1).
        hidden_size, num_layers, num_heads, mlp_dim: D, L, H, M of the transformer.
        num_classes: size of the linear head; 0 returns the pooled features.
        channels: input channels.
        pooling: "token" (class token), "gap" (mean of the patch tokens) or "map" (an attention-pooling head,
            `MAPHead`: a learned query attending over every token, as SigLIP and big_vision's `map` pool).
        class_token: prepend a class token (big_vision's GAP models have none).
        position_embedding: "learned" (the paper) or "sincos2d" (fixed, big_vision's plain baseline).
        representation_size: width of the `pre_logits` Dense + tanh layer used in pre-training; None for none.
        dropout_rate, attention_dropout_rate: dropout rates (training only).
        stochastic_depth_rate: drop-path rate of the last block, growing linearly from 0 at the first.
        layer_norm_epsilon: 1e-6 as in the reference code.
        gelu: "tanh" (as the released models were trained), "exact" or "quick" (QuickGELU, x * sigmoid(1.702 x),
            OpenAI CLIP's).
        head_bias_init: initial bias of the head (-6.9 for sigmoid cross-entropy, AugReg).
        resnet_layers: stage depths of a hybrid's ResNet stem, e.g. (3, 4, 9); None for a plain ViT.
        resnet_width: width factor of the ResNet stem.
        resnet_norm: the stem's normalisation constants, as each library computes them: "vit_jax" (the
            released `.npz` code: kernels divided by their std + 1e-5, GroupNorm epsilon 1e-6) or "timm"
            (timm's hybrids: kernels divided by sqrt(variance + 1e-8), GroupNorm epsilon 1e-5).
        dtype: a Keras dtype policy name such as "mixed_bfloat16"; None for the global policy.
        dynamic_image_size: take images of any size whose sides are multiples of the patch (the input is
            (None, None, C)); the position embeddings, stored for `image_size`, are interpolated to each input's
            patch grid inside the graph. Learned position embeddings only.
        dynamic_resize_method: the interpolation used then: "zoom" (corner-aligned linear, what the original
            code and `load_npz` use when fine-tuning at another size), "bilinear" or "bicubic" (half-pixel).
        remat: what the backward pass recomputes instead of keeping (see `EncoderBlock`): False (nothing), True
            or "block" (each encoder block from its input: least memory, about one more forward pass; needs zero
            dropout and stochastic-depth rates) or "elementwise" (LayerNorm, GELU and the attention softmax, from
            the matmul outputs around them, which stay kept; any dropout).
        layer_scale: initial gain of a LayerScale on both residual branches of every block (DeiT-III, DINOv2:
            timm `init_values`); None for none.
        num_registers: register tokens inserted after the class (and distillation) token, after the position
            embedding, so with none of their own (DINOv2 with registers); dropped by every pooling but "map".
        distillation_token: DeiT's distillation token after the class token (with its own position row) and its
            own head `head_dist`; the output is the mean of both heads' logits (or of both tokens when
            `num_classes == 0`), as DeiT does at inference.
        no_embed_class: the position embedding covers the patch tokens only and is added before the class
            (distillation, register) tokens are prepended (timm's `no_embed_class`, DeiT-III and DINOv2 with
            registers).
        pre_norm: a LayerNorm `norm_pre` after the position embedding, before the first block (CLIP).
        patch_bias: the patch embedding has a bias (CLIP's has none).
        fc_norm: normalise after pooling (a LayerNorm `fc_norm`) instead of the tokens before it (timm's
            `global_pool='avg'` default); the encoder then has no `encoder_norm`.
        rope: rotary position embeddings on the patch tokens' queries and keys (`RotaryEmbedding`): None,
            "dinov3", "eva" or "pe". Combine with position_embedding="none" (DINOv3) or "learned" (EVA-02, PE).
        rope_ref_grid: EVA-02 / PE's reference grid (timm's `ref_feat_shape`, e.g. (16, 16)), or None.
        rope_offset, rope_base: override the variant's grid offset (PE: 1) and frequency base (100 / 10000).
        rope_rescale: DINOv3's coordinate augmentation in training (a factor > 1: coordinates times a log-uniform
            draw in [1 / f, f] per step; DINOv3 pre-trained with 2), or None (off, the default).
        mlp_type: "gelu" or "swiglu" (silu(gate) * up).
        mlp_norm: a norm before the SwiGLU's last projection (EVA-02 base/large: timm `scale_mlp`).
        attention_norm: a norm before the attention's output projection (EVA-02 CLIP: `scale_attn_inner`).
        qkv_bias: which of query, key, value have a bias: "qkv", "qv" (DINOv3 `_qkvb`, EVA-02) or "none".
        proj_bias, mlp_bias: biases on the attention's output projection and in the SwiGLU (AIMv2: none).
        norm: "layer" (LayerNorm) or "rms" (RMSNorm, AIMv2) for every norm of the model.
        patch_norm: a norm right after the patch embedding (AIMv2).
        encoder_norm: the final norm of the tokens (False with fc_norm=False: none, as PE Spatial).
        map_heads, map_mlp_dim: the MAP head's heads and MLP width when they differ from the blocks' (PE Core).
    """

    image_size: tuple = (224, 224)
    patch_size: int = 16
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    num_classes: int = 1000
    channels: int = 3
    pooling: str = "token"
    class_token: bool = True
    position_embedding: str = "learned"
    representation_size: int | None = None
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.0
    layer_norm_epsilon: float = 1e-6
    gelu: str = "tanh"
    head_bias_init: float = 0.0
    resnet_layers: tuple | None = None
    resnet_width: int = 1
    dtype: str | None = None
    dynamic_image_size: bool = False
    dynamic_resize_method: str = "zoom"
    remat: bool | Literal["elementwise", "block"] = False
    layer_scale: float | None = None
    num_registers: int = 0
    distillation_token: bool = False
    no_embed_class: bool = False
    pre_norm: bool = False
    patch_bias: bool = True
    fc_norm: bool = False
    resnet_norm: str = "vit_jax"
    rope: str | None = None
    rope_ref_grid: tuple | None = None
    rope_offset: float | None = None
    rope_base: float | None = None
    rope_rescale: float | None = None
    mlp_type: str = "gelu"
    mlp_norm: bool = False
    attention_norm: bool = False
    qkv_bias: str = "qkv"
    proj_bias: bool = True
    mlp_bias: bool = True
    norm: str = "layer"
    patch_norm: bool = False
    encoder_norm: bool = True
    map_heads: int | None = None
    map_mlp_dim: int | None = None

    def __post_init__(self):
        size = self.image_size
        size = (size, size) if isinstance(size, int) else tuple(int(s) for s in size)
        object.__setattr__(self, "image_size", size)
        object.__setattr__(self, "remat", remat_setting(self.remat))
        if self.resnet_layers is not None:
            object.__setattr__(self, "resnet_layers", tuple(int(n) for n in self.resnet_layers))
        if self.rope_ref_grid is not None:
            ref = self.rope_ref_grid
            object.__setattr__(
                self, "rope_ref_grid", tuple(float(r) for r in ((ref, ref) if isinstance(ref, int | float) else ref))
            )

    def replace(self, **overrides):
        """A copy with some fields changed; unknown field names raise a clear error."""
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            hints = "".join(did_you_mean(name, fields) for name in unknown)
            raise TypeError(f"Unknown model option(s) {unknown}.{hints} Known options: {sorted(fields)}")
        return dataclasses.replace(self, **overrides)

    def to_dict(self):
        """The fields as a dict; the ViT-family options are left out while they hold their defaults, so the
        configs (and run identities) of plain ViTs read as they did before those options existed."""
        fields = dataclasses.asdict(self)
        return {k: v for k, v in fields.items() if k not in FAMILY_DEFAULTS or v != FAMILY_DEFAULTS[k]}

    @property
    def attention_biases(self):
        """The attention projections with a bias, as `RotaryAttention` names them."""
        parts = {"qkv": ("query", "key", "value"), "qv": ("query", "value"), "none": ()}[self.qkv_bias]
        return (*parts, "out") if self.proj_bias else parts

    @property
    def num_prefix_tokens(self):
        """Tokens before the patch tokens in every block's output: class, distillation and register tokens."""
        return int(self.class_token) + int(self.distillation_token) + int(self.num_registers)

    @property
    def feature_stride(self):
        """Pixels per feature-map cell before patching: 1 for a plain ViT, the ResNet's output stride for a hybrid."""
        if self.resnet_layers is None:
            return 1
        return 4 * 2 ** max(len(self.resnet_layers) - 1, 0)  # the root's conv and pool: 4; stages after the first: 2

    @property
    def grid_size(self):
        step = self.feature_stride * self.patch_size
        return (self.image_size[0] // step, self.image_size[1] // step)


def _table():
    variants = {}
    for size, (d, layers, heads, mlp) in _SIZES.items():
        for patch in _PATCHES:
            variants[f"{size}/{patch}"] = ViTConfig(
                patch_size=patch, hidden_size=d, num_layers=layers, num_heads=heads, mlp_dim=mlp
            )
    for name, (size, stages) in _HYBRIDS.items():
        d, layers, heads, mlp = _SIZES[size]
        variants[name] = ViTConfig(
            patch_size=1, hidden_size=d, num_layers=layers, num_heads=heads, mlp_dim=mlp, resnet_layers=stages
        )
    # A tiny model for tests and smoke runs (the shape of the shared reference fixture).
    variants["testing"] = ViTConfig(
        image_size=(32, 32), patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=128, num_classes=10
    )
    return variants


VARIANTS = _table()


def get_variant(name):
    """The `ViTConfig` of a variant name: "B/16", "ViT-B_16", "vit-b/16", "R50+B/16", "testing"."""
    if isinstance(name, ViTConfig):
        return name
    key = str(name).strip()
    key = re.sub(r"^vit[-_]", "", key, flags=re.IGNORECASE).replace("_", "/")
    lookup = {k.lower(): k for k in VARIANTS}
    if key.lower() not in lookup:
        raise ValueError(
            f"Unknown ViT variant {name!r}.{did_you_mean(key, VARIANTS)} Known variants: Ti, S, B, L, H with patch "
            f"8, 14, 16 or 32 "
            f"(e.g. 'B/16'), {', '.join(repr(h) for h in _HYBRIDS)} and 'testing'."
        )
    return VARIANTS[lookup[key.lower()]]
