"""Fine-tune any checkpoint on your data: the model the checkpoint describes, the paper's fine-tuning settings.

python -m training --config finetune --init vit_tiny_patch16_224.augreg_in21k_ft_in1k --dataset folder:photos

A SigLIP 2 NaFlex folder (transformers siglip2, timm naflexvit) fine-tunes as NaFlex, every image at its own shape:
python -m training --config finetune --init path/to/siglip2_naflex --dataset folder:photos --set max_num_patches=256
"""

from ._paper_finetune import paper_finetune


def get_config():
    return paper_finetune(
        dataset="digits",  # runs anywhere; pass yours: --dataset folder:PATH or tfds:NAME
        variant=None,  # the --init checkpoint's
        image_size=None,  # the --init checkpoint's
        batch_size=None,  # 512, or what the training split holds
        warmup_steps=None,  # 5% of the steps
        steps_per_execution=None,
        epochs=10,
        precision="float32",
        checkpoint_every=0,  # at each epoch's end
    )
