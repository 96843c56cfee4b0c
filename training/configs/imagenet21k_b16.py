"""The paper's ImageNet-21k pre-training of ViT-B/16 (Table 3): Adam, lr 1e-3, weight decay 0.03, linear decay.

python -m training --config imagenet21k_b16 --data-dir gs://BUCKET/tensorflow_datasets --strategy tpu
"""

from ..options import TrainConfig


def get_config():
    return TrainConfig(
        dataset="tfds:imagenet21k",
        train_split="full[51200:]",
        eval_split="full[:25600]",
        extra_evals={"val": "full[25600:51200]"},
        eval_resize_small=256,
        shuffle_buffer=250_000,
        variant="B/16",
        image_size=224,
        model=dict(representation_size=768, dropout_rate=0.1),
        batch_size=4096,
        epochs=90,
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=0.03,
        schedule="linear",
        warmup_steps=10_000,
        global_clipnorm=1.0,
        loss="sigmoid",
        head_bias_init=-10.0,
        augment="inception",
        flip=True,
        precision="mixed_bfloat16",
        steps_per_execution=100,
        checkpoint_every=1000,
        eval_every=5,
    )
