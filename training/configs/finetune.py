"""Fine-tune any checkpoint on your data: the model the checkpoint describes, the paper's fine-tuning settings.

    python -m training --config finetune --init vit_tiny_patch16_224.augreg_in21k_ft_in1k --dataset folder:photos
    python -m training --config finetune --init hf://timm/vit_base_patch16_224.augreg2_in21k_ft_in1k \
        --dataset tfds:cifar10 --data-dir ~/tensorflow_datasets --set image_size=384
    python -m export runs/finetune                     # then export and verify it, as the main job does

`--init` is required: any source `keras_vit.from_pretrained` reads (a catalogue name, `hf://ORG/NAME`, a URL, a
`.npz`, `.keras` or timm / transformers / keras-hub folder). The model is the one the checkpoint describes
(variant, patch, pooling, class token, representation layer, GELU, LayerNorm epsilon) at the checkpoint's
resolution, with a fresh zero-initialised head for the data set's classes (`training.options.resolve`); `--set
image_size=384` fine-tunes at a higher resolution (position embeddings interpolated, as in the paper), `--set
model.dropout_rate=0.1` or any other `model.NAME` adds to it.

Reference: the paper's appendix B.1.1 and vit_jax `vit_jax/configs/common.py` (`_paper_finetune.py`): SGD momentum
0.9, no weight decay, global-norm clip 1, cosine decay after a linear warm-up, lr 0.03, Inception crop + flip for
training and a plain resize for evaluation, a fresh zero-initialised head.

Published: none for this recipe, which runs on the user's data; the paper's fine-tuning numbers belong to
`cifar10_finetune` and `imagenet_finetune_384`, which fix the data set and the step counts.

Deviations (deliberate), so that one command fits any data set: the step counts scale to it
(`training.options.resolve`): the batch is the paper's 512 or the largest power of two the training split holds, the
warm-up 5% of the steps (the paper's 500 of 10k), `steps_per_execution` the largest divisor of the epoch up to 50; 10
epochs (`--epochs`) instead of a fixed 10k steps; float32, which every device runs (`--set precision=mixed_bfloat16` on
TPUs and recent GPUs). `folder:PATH` (one sub-folder per class; 20% held out, stratified), `tfds:NAME` and `digits` (the
default) all work.
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
