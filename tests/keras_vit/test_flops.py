"""keras_vit.models.flops for the ViT family: extra tokens, the attention-pooling head, pre_logits, two heads.

Every expected number is worked out by hand below for one tiny shape: 32 px images, patch 8 (16 patches), 3
channels, D = 32, M = 128, 2 blocks, 10 classes. Patch embedding: 2 * 16 * (8 * 8 * 3) * 32 = 196,608. A block with
T tokens: 2*T*32*96 + 4*T*T*32 + 2*T*32*32 + 4*T*32*128, i.e. T=16: 425,984; 17: 454,784; 18: 483,840;
21: 572,544. A head: 2 * 32 * 10 = 640.
"""

import pytest

import keras_vit
from keras_vit.models import flops

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, mlp_dim=128, num_classes=10)


def test_plain_tiny_vit():
    # class token: T = 17; 196,608 + 2 * 454,784 + 640
    assert flops.vit_forward_flops(**TINY) == 1_106_816


def test_register_tokens_join_every_block():
    # class token + 4 registers: T = 21; 196,608 + 2 * 572,544 + 640
    assert flops.vit_forward_flops(**TINY, num_registers=4) == 1_342_336


def test_distillation_token_and_its_head():
    # class + distillation token: T = 18, two heads; 196,608 + 2 * 483,840 + 2 * 640
    assert flops.vit_forward_flops(**TINY, distillation_token=True) == 1_165_568


def test_attention_pooling_head():
    # no class token: T = 16. MAP head: query 2*32*32 = 2,048; keys and values 2*16*32*64 = 65,536; scores and
    # sum 4*16*32 = 2,048; output 2,048; MLP 4*32*128 = 16,384: 88,064. 196,608 + 2 * 425,984 + 88,064 + 640
    assert flops.vit_forward_flops(**TINY, class_token=False, pooling="map") == 1_137_280


def test_pre_logits_layer():
    # T = 17; pre_logits 2*32*24 = 1,536, head on 24 features 2*24*10 = 480: 196,608 + 909,568 + 1,536 + 480
    assert flops.vit_forward_flops(**TINY, representation_size=24) == 1_108_192


@pytest.mark.parametrize(
    "options, expected",
    [
        (dict(num_registers=4, no_embed_class=True, layer_scale=1e-5), 1_342_336),
        (dict(distillation_token=True), 1_165_568),
        (dict(class_token=False, pooling="map"), 1_137_280),
        # LayerNorms have no matmul: pre-norm (with a bias-free patch embedding) and fc_norm leave the plain count
        (dict(pre_norm=True, patch_bias=False), 1_106_816),
        (dict(pooling="gap", fc_norm=True), 1_106_816),
    ],
)
def test_config_counts_the_family_options(options, expected):
    config = keras_vit.get_variant("testing").replace(image_size=(32, 32), mlp_dim=128, num_classes=10, **options)
    assert flops.config_forward_flops(config) == expected
