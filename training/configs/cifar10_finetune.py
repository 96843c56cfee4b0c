"""The paper's fine-tuning recipe on CIFAR-10: ViT-B/16 from an ImageNet-21k `.npz`, at 384 px, SGD momentum.

python -m training --config cifar10_finetune --init ViT-B_16.npz --data-dir ~/tensorflow_datasets
"""

from ._paper_finetune import paper_finetune


def get_config():
    return paper_finetune(
        dataset="tfds:cifar10",
        train_split="train[:98%]",
        eval_split="test",
        shuffle_buffer=50_000,
        variant="B/16",
        image_size=384,
        batch_size=512,
        steps_per_epoch=500,
        epochs=20,  # 10k steps
        warmup_steps=500,
        precision="mixed_bfloat16",
        steps_per_execution=50,
        checkpoint_every=500,
    )
