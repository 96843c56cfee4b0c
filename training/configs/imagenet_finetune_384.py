"""The paper's ImageNet fine-tuning at 384 px from a pre-trained ViT-B/16 (e.g. its ImageNet-21k `.npz`).

    python -m training --config imagenet_finetune_384 --init ViT-B_16.npz \
        --data-dir gs://BUCKET/tensorflow_datasets --strategy tpu --workdir runs/b16_384

Paper: SGD momentum 0.9, no weight decay, global-norm clip 1, batch 512, cosine decay with 500 warm-up steps,
20k steps, lr from {0.003, 0.01, 0.03, 0.06}; position embeddings interpolated 14x14 -> 24x24 and a fresh
zero-initialised 1000-class head. Inception crop + flip for training, resize for evaluation.
"""

from training.config import TrainConfig


def get_config():
    return TrainConfig(
        dataset="tfds:imagenet2012",
        train_split="train",
        eval_split="validation",
        shuffle_buffer=250_000,
        variant="B/16",
        image_size=384,
        batch_size=512,
        steps_per_epoch=1000,
        epochs=20,  # 20k steps
        optimizer="sgd",
        momentum=0.9,
        learning_rate=0.03,
        schedule="cosine",
        warmup_steps=500,
        global_clipnorm=1.0,
        augment="inception",
        flip=True,
        precision="mixed_bfloat16",
        steps_per_execution=100,
        checkpoint_every=1000,
        eval_every=5,
    )
