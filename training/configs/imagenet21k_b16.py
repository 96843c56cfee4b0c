"""The paper's ImageNet-21k pre-training of ViT-B/16 (Table 3): Adam, lr 1e-3, weight decay 0.03, linear decay.

    python -m training --config imagenet21k_b16 --data-dir gs://BUCKET/tensorflow_datasets --strategy tpu \
        --workdir runs/b16_i21k

Reference: the ViT paper (arXiv 2010.11929), section 4.1 and Table 3: batch 4096, Adam b1 0.9 b2 0.999,
10k linear warm-up steps, 224 px, 90 epochs, base lr 1e-3 with linear decay, weight decay 0.03, dropout 0.1, and
a `pre_logits` layer (representation size 768) in pre-training. The paper's weight decay is in the
"multiplied by the learning rate" convention of Keras' AdamW (see training/optim.py). No code for it was
released; data handling follows big_vision `configs/vit_i21k.py`: imagenet21k `full[51200:]` for training (the
first 51,200 images held out), `full[:25600]` evaluated as "test" and `full[25600:51200]` as "val", with
`resize_small(256)|central_crop(224)`; sigmoid cross-entropy with head bias -10.

Published: no ImageNet-21k top-1 is published for this run; the paper reports what it transfers to (e.g. ViT-B/16
fine-tuned on ImageNet at 384 px: 84.6% with vit_jax's code, its README). The held-out numbers here are a
sanity check, not a comparison.

Deviations (deliberate):
- Global-norm clipping at 1: Table 3 clips for ImageNet-1k; big_vision's i21k config clips at 1 too.
- Sigmoid loss with head bias -10 from big_vision's vit_i21k.py (the paper does not state its i21k loss).
- Inception crop + flip as big_vision (the paper does not describe its pre-training augmentation); no
  RandAugment or Mixup (big_vision's AugReg setting for B/16 adds randaug(2,10) + mixup 0.2; the paper had none).
- mixed_bfloat16 weights and float32 Adam moments.
The dataset is not public: it must be prepared as the TFDS dataset imagenet21k in --data-dir.
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
