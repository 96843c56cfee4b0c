"""The embedded default: a small ViT on scikit-learn's 8x8 digits, >= 98% top-1 on a fixed 20% held-out split.

    python -m training                      # same as: python -m training --config digits --workdir runs/digits

The 8x8 images are upsampled to 16 px and cut into 8x8 patches (a 2x2 grid: 4 patch tokens + the class token).
Small random shifts (up to one original pixel) are the only augmentation: flips would turn some digits into
others. Width 192 rather than something tinier on purpose: the model is also the export stage's full-int8 test
case, and below ~0.5M parameters the per-tensor overhead of a .tflite file (quantization scales, tensor names)
keeps the int8 file above 30% of the float32 one. About 1.5-2.5 minutes on two CPU cores.
"""

from training.config import TrainConfig


def get_config():
    return TrainConfig(
        dataset="digits",
        holdout_fraction=0.2,
        variant="testing",
        image_size=16,
        model=dict(patch_size=8, hidden_size=192, num_layers=3, num_heads=6, mlp_dim=384),
        batch_size=64,
        epochs=60,
        optimizer="adamw",
        learning_rate=7e-4,
        weight_decay=0.01,
        schedule="cosine",
        warmup_steps=66,  # 3 epochs of 22 steps
        label_smoothing=0.1,
        global_clipnorm=1.0,
        augment="translate",
        translate=1.0,
        flip=False,
        eval_every=4,
        checkpoint_every=100,
        num_samples=512,
    )
