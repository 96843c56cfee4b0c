"""The paper's fine-tuning settings, shared by the fine-tuning recipes (appendix B.1.1 of the paper, vit_jax).

SGD with momentum 0.9, no weight decay, global-norm clipping at 1, cosine decay after a linear warm-up, learning
rate 0.03 (vit_jax's default; the paper sweeps {0.001, 0.003, 0.01, 0.03}); Inception crops (area 0.05-1) and
flips for training, a plain resize for evaluation. A recipe passes what differs (data, size, steps, precision).
"""

from ..options import TrainConfig

PAPER_FINETUNE = dict(
    optimizer="sgd",
    momentum=0.9,
    learning_rate=0.03,
    weight_decay=0.0,
    schedule="cosine",
    global_clipnorm=1.0,
    augment="inception",
    crop_area=(0.05, 1.0),
    flip=True,
)


def paper_finetune(**settings):
    """A `TrainConfig` with the paper's fine-tuning settings and `settings` on top."""
    return TrainConfig(**{**PAPER_FINETUNE, **settings})
