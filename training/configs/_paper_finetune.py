"""The paper's fine-tuning settings (appendix B.1.1, vit_jax), shared by the fine-tuning recipes: SGD momentum 0.9,
no weight decay, clip 1, cosine after a warm-up, lr 0.03, Inception crop + flip; a recipe passes what differs."""

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
