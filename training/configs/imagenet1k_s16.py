"""big_vision's plain ViT-S/16 ImageNet-1k baseline (76.5% top-1 in 90 epochs, about 7 h on a TPUv3-8).

    python -m training --config imagenet1k_s16 --data-dir gs://BUCKET/tensorflow_datasets --strategy tpu \
        --workdir runs/s16_i1k

Batch 1024, Adam with decoupled weight decay 1e-4 (big_vision's convention, multiplied by the schedule:
Keras AdamW weight_decay 1e-4 / 1e-3 = 0.1), lr 1e-3, 10k warm-up steps then cosine, global-norm clip 1, GAP
head, 2-D sin-cos position embeddings, no class token, RandAugment(2, 10), Mixup p=0.2, no dropout. ImageNet
must be prepared as the TFDS dataset imagenet2012; 1% of train is held out as minival, as big_vision does.
"""

from training.config import TrainConfig
from training.optim import keras_weight_decay


def get_config():
    return TrainConfig(
        dataset="tfds:imagenet2012",
        train_split="train[:99%]",
        eval_split="train[99%:]",
        shuffle_buffer=250_000,
        variant="S/16",
        image_size=224,
        model=dict(pooling="gap", class_token=False, position_embedding="sincos2d"),
        batch_size=1024,
        epochs=90,
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=keras_weight_decay(1e-4, 1e-3),
        schedule="cosine",
        warmup_steps=10_000,
        global_clipnorm=1.0,
        augment="inception",
        crop_area=(0.05, 1.0),
        flip=True,
        randaugment=(2, 10),
        mixup_alpha=0.2,
        precision="mixed_bfloat16",
        steps_per_execution=100,
        checkpoint_every=1000,
        eval_every=5,
    )
