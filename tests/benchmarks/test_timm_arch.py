"""`python -m benchmarks --timm-arch NAME`: the keras_vit model a timm architecture name resolves to, and the
names refused in one line (no torch or timm needed)."""

import pytest

from benchmarks import coordinator
from benchmarks.__main__ import parse_args
from benchmarks.keras_impl import model_config
from keras_vit.models import flops

QUICK = ["--no-step-split", "--input-wait-steps", "0", "--pipeline-batches", "0"]


def _config(tmp_path, name):
    args = parse_args(["--timm-arch", name, "--out", str(tmp_path), *QUICK])
    report = coordinator._new_report(args)
    return args, report, model_config(report["spec"])


def test_dinov3_small_resolves_to_keras_vits_dinov3(tmp_path):
    args, report, config = _config(tmp_path, "vit_small_patch16_dinov3")
    assert args.variant == "vit_small_patch16_dinov3" and "keras-hub" not in args.impls and "timm" in args.impls
    assert report["spec"]["timm_architecture"] == "vit_small_patch16_dinov3"
    assert (config.patch_size, config.hidden_size, config.num_layers, config.num_heads, config.mlp_dim) == (
        16, 384, 12, 6, 1536)  # fmt: skip
    assert (config.rope, config.num_registers, config.layer_scale, config.qkv_bias) == ("dinov3", 4, 1e-5, "none")
    assert config.position_embedding == "none" and config.pooling == "gap" and config.image_size == (224, 224)
    assert config.layer_norm_epsilon == 1e-5 and config.num_classes == 1000


def test_eva02_small_resolves_with_its_swiglu_counted_in_the_flops(tmp_path):
    _, report, config = _config(tmp_path, "eva02_small_patch14_224")
    assert (config.patch_size, config.hidden_size, config.mlp_dim, config.mlp_type) == (14, 384, 1024, "swiglu")
    assert (config.rope, config.rope_ref_grid, config.qkv_bias) == ("eva", (16.0, 16.0), "qv")
    assert config.position_embedding == "learned" and config.class_token
    gelu = flops.vit_forward_flops(224, 14, 384, 12, 1024, 1000)
    t, d, m = 257, 384, 1024  # 16 x 16 patches and the class token: SwiGLU's gate is one more D x M product
    assert report["flops"]["forward_per_image"] == gelu + 12 * 2 * t * d * m


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--timm-arch", "resnet50"], "'resnet50' is not one of the Eva architectures keras-vit builds"),
        (["--timm-arch", "vit_base_patch16_rope_224"], "rotary embeddings of timm's RoPE-ViT models"),
        (["--timm-arch", "eva02_small_patch14_224", "--impls", "keras-vit,keras-hub,timm"], "plain ViTs only"),
        (["--timm-arch", "eva02_small_patch14_224", "--recipe", "digits"], "both name the model"),
    ],
)
def test_what_the_option_cannot_measure_is_refused_in_one_line(capsys, argv, words):
    with pytest.raises(SystemExit):
        parse_args([*argv, *QUICK])
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("python -m benchmarks: error:")]
    assert words in line
