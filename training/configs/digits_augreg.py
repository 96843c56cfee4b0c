"""The ImageNet pre-training recipe's shape on a data set that fits a laptop: the 8x8 digits at 32 px.

python -m training --config digits_augreg --workdir runs/digits_augreg
"""

from ..optim import keras_weight_decay
from ..options import TrainConfig


def get_config():
    return TrainConfig(
        dataset="digits",
        holdout_fraction=0.2,
        variant="testing",
        image_size=32,
        model=dict(
            patch_size=8,
            hidden_size=192,
            num_layers=3,
            num_heads=6,
            mlp_dim=384,
            pooling="gap",
            class_token=False,
            position_embedding="sincos2d",
            representation_size=192,
        ),
        batch_size=64,
        epochs=40,
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=keras_weight_decay(1e-4, 1e-3),
        schedule="cosine",
        warmup_steps=44,
        global_clipnorm=1.0,
        loss="softmax",
        augment="inception",
        crop_area=(0.35, 1.0),
        flip=False,
        randaugment=(2, 10),
        randaugment_scale_pixels=True,
        mixup_alpha=0.2,
        eval_every=10,
        checkpoint_every=200,
        num_samples=64,
    )
