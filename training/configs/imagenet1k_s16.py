"""big_vision's plain ViT-S/16 ImageNet-1k baseline ("Better plain ViT baselines for ImageNet-1k", 2022).

    python -m training --config imagenet1k_s16 --data-dir gs://BUCKET/tensorflow_datasets --strategy tpu \
        --workdir runs/s16_i1k

Reference: big_vision `configs/vit_s16_i1k.py`. imagenet2012 `train[:99%]`, shuffle buffer 250k, batch 1024,
90 epochs, softmax cross-entropy; train `decode_jpeg_and_inception_crop(224)|flip_lr|randaug(2,10)`, then
`mixup(p=0.2)` on every batch; model S/16 with `rep_size=True` (pre_logits Dense 384 + tanh), `pool_type='gap'`
(no class token), `posemb='sincos2d'`, no dropout; `scale_by_adam` (b1 0.9, b2 0.999), lr 1e-3, decoupled wd
1e-4 times the schedule (= Keras AdamW weight_decay 1e-4 / 1e-3 = 0.1, kernels only), 10k warm-up steps then
cosine, gradient clip at global norm 1; eval `decode|resize_small(256)|central_crop(224)` on `validation`,
`train[99%:]` (minival), ImageNet-ReaL and ImageNet-v2.

Published: 76.5% top-1 on ImageNet `validation` after 90 epochs (about 7 h on a TPUv3-8), from the config's
docstring and the tech report. Evaluated here on `validation` with resize_small(256)|central_crop(224), as that
number; minival (`train[99%:]`, same protocol) is reported beside it in metrics.json under "evals".

Deviations (deliberate):
- Adam moments in float32 (Keras AdamW); big_vision keeps the first moment in bfloat16 (`mu_dtype`).
- Weights in `mixed_bfloat16` on TPU (big_vision trains float32 parameters with bf16 activations on TPU too).
- Mixup mixes on the host per global batch (per worker on multi-worker runs), big_vision per device batch.
- RandAugment's Contrast blends with the image's mean grey level (see training/augment.py).
- ImageNet-ReaL (multi-label 'real_label') and ImageNet-v2 evaluations are not run (not supported yet).
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
