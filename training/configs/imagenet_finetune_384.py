"""The paper's ImageNet fine-tuning at 384 px from a pre-trained ViT-B/16 (e.g. its ImageNet-21k `.npz`).

python -m training --config imagenet_finetune_384 --init ViT-B_16.npz --data-dir gs://BUCKET/tfds --strategy tpu
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
