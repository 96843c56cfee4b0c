"""big_vision's plain ViT-S/16 ImageNet-1k baseline ("Better plain ViT baselines for ImageNet-1k", 2022).

python -m training --config imagenet1k_s16 --data-dir gs://BUCKET/tensorflow_datasets --strategy tpu
"""

from ..optim import keras_weight_decay
from ..options import TrainConfig


def get_config():
    return TrainConfig(
        dataset="tfds:imagenet2012",
        train_split="train[:99%]",
        eval_split="validation",
        extra_evals={"minival": "train[99%:]"},
        eval_resize_small=256,
        shuffle_buffer=250_000,
        variant="S/16",
        image_size=224,
        model=dict(pooling="gap", class_token=False, position_embedding="sincos2d", representation_size=384),
        batch_size=1024,
        epochs=90,
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=keras_weight_decay(1e-4, 1e-3),
        schedule="cosine",
        warmup_steps=10_000,
        global_clipnorm=1.0,
        loss="softmax",
        augment="inception",
        crop_area=(0.05, 1.0),
        flip=True,
        randaugment=(2, 10),
        mixup_alpha=0.2,
        precision="mixed_bfloat16",
        # 1238 steps per epoch (1,268,355 images // 1024) = 2 x 619: 619 is the divisor closest to a typical
        # 100-step execution that keeps Keras' epochs on the schedule (training.options.config.steps_per_execution_for).
        steps_per_execution=619,
        checkpoint_every=1000,
        eval_every=5,
    )
