"""The paper's ImageNet fine-tuning at 384 px from a pre-trained ViT-B/16 (e.g. its ImageNet-21k `.npz`).

    python -m training --config imagenet_finetune_384 --init ViT-B_16.npz \
        --data-dir gs://BUCKET/tensorflow_datasets --strategy tpu --workdir runs/b16_384

Reference: vision_transformer `vit_jax/configs/common.py` (imagenet2012 preset: `train[:99%]`, test
`validation`, crop 384, 20k steps) and the paper's appendix B.1.1: SGD momentum 0.9, no weight decay,
global-norm clip 1, batch 512, cosine decay with 500 warm-up steps, lr 0.03 (vit_jax's default; the paper sweeps
{0.003, 0.01, 0.03, 0.06}); position embeddings interpolated 14x14 -> 24x24, the 21k head and `pre_logits`
dropped, a fresh zero-initialised 1000-class head; inception crop + flip for training, a plain resize to 384 for
evaluation.

Published: 84.62% and 84.61% (two runs) top-1 on ImageNet `validation` from the ImageNet-21k ViT-B/16, vit_jax's
README, with this protocol (plain resize, `validation`).

Deviations (deliberate): mixed_bfloat16 weights (vit_jax: float32 with bfloat16 momentum), one batch of 512 per
step instead of accumulated micro-batches (`--set accum_steps=8` accumulates 8 of 64, as vit_jax does).
"""

from ._paper_finetune import paper_finetune


def get_config():
    return paper_finetune(
        dataset="tfds:imagenet2012",
        train_split="train[:99%]",
        eval_split="validation",
        shuffle_buffer=50_000,  # vit_jax: min(split size, 50k)
        variant="B/16",
        image_size=384,
        batch_size=512,
        steps_per_epoch=1000,
        epochs=20,  # 20k steps
        warmup_steps=500,
        precision="mixed_bfloat16",
        steps_per_execution=100,
        checkpoint_every=1000,
        eval_every=5,
    )
