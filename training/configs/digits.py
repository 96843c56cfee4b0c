"""The embedded default: a small ViT on scikit-learn's 8x8 digits, >= 98% top-1 on a fixed 20% held-out split.

python -m training                      # same as: python -m training --config digits --workdir runs/digits
"""

from ..options import TrainConfig


def get_config():
    return TrainConfig(
        dataset="digits",
        holdout_fraction=0.2,
        variant="testing",
        image_size=16,
        model=dict(
            patch_size=4, hidden_size=192, num_layers=2, num_heads=6, mlp_dim=384, class_token=False, pooling="gap"
        ),
        batch_size=64,
        epochs=28,
        optimizer="adamw",
        learning_rate=2e-3,
        weight_decay=0.01,
        schedule="cosine",
        warmup_steps=44,  # 2 epochs of 22 steps
        label_smoothing=0.1,
        global_clipnorm=1.0,
        augment="translate",
        translate=0.5,
        flip=False,
        eval_every=4,
        checkpoint_every=100,
        num_samples=512,
    )
