"""LoRA fine-tuning on the digits: a digits model's backbone frozen, rank-8 factors on its attention and a new head.

python -m training --config digits_lora --init runs/digits/model.keras --workdir runs/digits_lora
"""

from .digits import get_config as digits


def get_config():
    return digits().replace(
        lora_rank=8,
        epochs=6,
        learning_rate=5e-3,
        weight_decay=0.0,
        warmup_steps=22,  # 1 epoch of 22 steps
        eval_every=0,
    )
