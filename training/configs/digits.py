"""The embedded default: a small ViT on scikit-learn's 8x8 digits, >= 98% top-1 on a fixed 20% held-out split.

    python -m training                      # same as: python -m training --config digits --workdir runs/digits

The 8x8 images are upsampled to 16 px and cut into 4x4 patches: a 4x4 grid of 16 patch tokens, so that the
attention rollout, the position-embedding similarity and the attention distances in plots/ have a grid to show
(8 px patches, the previous recipe's 2x2 grid, gave them four cells). The model averages the patch tokens (the
paper's "GAP" classifier, no class token): the rollout shows the mean over all tokens, which is what the head reads.

16 tokens instead of 5 make each block ~3x as costly, so the model is shallow and the run short: 2 blocks of width
192 (6 heads, MLP 384), 28 epochs at learning rate 2e-3, shifts of up to half an original pixel. Held-out top-1
measured on the shared 2-core machine: 99.44% (seed 0, the default), 98.61% (seed 1), 99.17% (seed 2). The same
model for 28 epochs with one-pixel shifts reached 98.1% at lr 2e-3 and 97.5% at 1e-3; with half-pixel shifts at
3e-3, 97.5%. Against the previous recipe (2x2 grid, 3 blocks, class token, 60 epochs, 99.4%), 3 interleaved runs
of `python -m training` each: 0.71x its wall time (0.51-0.88x), 0.70x its CPU time (0.68-0.74x). The 4x4-grid
recipe tried before this one (3 blocks of width 128, MLP 768, 60 epochs: 99.4%) took 202-210 s of training in
CI's main job, beyond the 180 s the digits test allows.

Small random shifts are the only augmentation: flips would turn some digits into others. Two blocks of width 192
rather than three narrower ones on purpose: the model is also the export stage's full-int8 test case, and a
.tflite file carries ~50 KB per block beyond the int8 weights (quantization parameters, int32 biases, tensor
records), which keeps the int8 file above 30% of the float32 one for small models. Measured int8 / float32: 29.0%
here (the trained default: 711,234 of 2,451,182 bytes; the same on random weights); on random weights 29.2% at
width 128 with MLP 1024 (2 blocks), 29.5% for the earlier 3 x 128 with MLP 768, 30.1% with MLP 512.
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
