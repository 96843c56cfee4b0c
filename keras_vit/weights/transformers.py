"""Hugging Face transformers' ViT folders (`ViTForImageClassification`, `ViTModel`), in and out; the relatives'
keys are `transformers_families.py`'s."""

import os
import re

import numpy as np

from keras_vit import files
from keras_vit.weights import transformers_families as families
from keras_vit.weights import transformers_families2 as families2
from keras_vit.weights.checkpoint import (
    CONTRACT_MEAN,
    CONTRACT_STD,
    Checkpoint,
    conv_to_hwio,
    hwio_to_conv,
    leftover_error,
    linear_to_kernel,
    read_json,
    read_safetensors,
    split_heads,
    write_json,
    write_safetensors,
)
from keras_vit.weights.config_inference import infer_options
from keras_vit.weights.loading import POSEMB_KEY, CheckpointError

# transformers' hidden_act names -> keras-vit's GELU forms.
_ACT = {
    "gelu": "exact",
    "gelu_python": "exact",
    "gelu_new": "tanh",
    "gelu_pytorch_tanh": "tanh",
    "gelu_fast": "tanh",
    "quick_gelu": "quick",
}
ATT = "MultiHeadDotProductAttention_1"
_BLOCK = {
    "layernorm_before": "LayerNorm_0",
    "layernorm_after": "LayerNorm_2",
    "attention.attention.query": f"{ATT}/query",
    "attention.attention.key": f"{ATT}/key",
    "attention.attention.value": f"{ATT}/value",
    "attention.output.dense": f"{ATT}/out",
    "intermediate.dense": "MlpBlock_3/Dense_0",
    "output.dense": "MlpBlock_3/Dense_1",
}


def is_transformers_folder(folder):
    """A config.json naming a `model_type`: transformers' mark, so `read` refuses a type it does not know by name
    (before anything else the folder holds, a stray `.npz` say, is taken for the checkpoint)."""
    path = os.path.join(folder, "config.json")
    return files.exists(path) and "model_type" in read_json(path)


def read(folder):
    """A transformers ViT folder -> `Checkpoint`."""
    cfg = read_json(os.path.join(folder, "config.json"))
    model_type = cfg.get("model_type")
    known = (*families.FAMILIES, *families2.FAMILIES2)
    if model_type != "vit" and model_type not in known and model_type not in families.DUAL_ENCODERS:
        raise CheckpointError(
            f"{folder!r} is a transformers {model_type!r} model; keras-vit reads model_type 'vit', "
            f"{', '.join(repr(k) for k in known)} and the image towers of "
            f"{', '.join(repr(k) for k in families.DUAL_ENCODERS)}."
        )
    weights = os.path.join(folder, "model.safetensors")
    if not files.exists(weights):
        raise CheckpointError(
            f"transformers folder {folder!r} has no model.safetensors (only pytorch_model.bin?); keras-vit reads "
            f"safetensors only. Save it with save_pretrained(folder, safe_serialization=True)."
        )
    state = read_safetensors(weights)
    if model_type in families.DUAL_ENCODERS:
        cfg, state = families.vision_tower(cfg, state)
        model_type = cfg["model_type"]
    if model_type in families2.FAMILIES2:
        params = families2.to_original(state, model_type, int(cfg["num_attention_heads"]), source=folder)
        return _checkpoint(folder, params, families2.read_options(folder, cfg, params), cfg)
    act = cfg.get("hidden_act", "gelu")
    if act not in _ACT:
        raise CheckpointError(f"{folder!r} uses hidden_act={act!r}; keras-vit has GELU only ({sorted(_ACT)}).")
    heads = int(cfg.get("num_attention_heads", 12))
    if model_type in families.FAMILIES:
        params = families.to_original(state, model_type, heads, source=folder)
        options = families.read_options(folder, cfg, params)
        options["gelu"] = _ACT[act]
        return _checkpoint(folder, params, options, cfg)
    params = to_original(state, heads, source=folder)
    if "ViTForImageClassification" in cfg.get("architectures", []):
        # Its classifier reads the class token itself; a pooler some repos still carry is never applied there.
        for key in ("pre_logits/kernel", "pre_logits/bias"):
            params.pop(key, None)
    size = cfg.get("image_size", 224)
    size = (size, size) if isinstance(size, int) else tuple(size)
    patch = int(cfg.get("patch_size", 16))
    options = infer_options(params, source=folder, grid=(size[0] // patch, size[1] // patch))
    options.update(gelu=_ACT[act], layer_norm_epsilon=float(cfg.get("layer_norm_eps", 1e-12)))
    if options["representation_size"] and cfg.get("pooler_act", "tanh") != "tanh":
        raise CheckpointError(f"{folder!r}: pooler_act={cfg['pooler_act']!r}; keras-vit's pre_logits is tanh.")
    return _checkpoint(folder, params, options, cfg)


def _checkpoint(folder, params, options, cfg):
    """The `Checkpoint` with the processor's statistics and the config's class names."""
    processor_path = os.path.join(folder, "preprocessor_config.json")
    processor = read_json(processor_path) if files.exists(processor_path) else {}
    mean, std = processor.get("image_mean", CONTRACT_MEAN), processor.get("image_std", CONTRACT_STD)
    if processor.get("do_normalize", True) is False:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    return Checkpoint(
        params=params,
        options=options,
        class_names=_class_names(cfg.get("id2label"), options["num_classes"]),
        mean=tuple(mean),
        std=tuple(std),
        format="transformers",
        source=folder,
    )


def _class_names(id2label, num_classes):
    """id2label in index order, unless empty, of another size, or transformers' placeholders LABEL_0, LABEL_1..."""
    if not id2label or not num_classes or len(id2label) != num_classes:
        return None
    names = [id2label[k] for k in sorted(id2label, key=int)]
    if all(re.fullmatch(rf"LABEL_{i}", name) for i, name in enumerate(names)):
        return None
    return tuple(names)


def to_original(state, num_heads, *, source):
    """A transformers ViT state dict (either layout) -> original-layout params; leftovers raise."""
    state = {re.sub(r"^vit\.", "", k): v for k, v in state.items()}
    out = {}

    def take(key):
        return np.asarray(state.pop(key))

    def put(src, dst, kind):
        if kind == "norm":
            out[f"{dst}/scale"], out[f"{dst}/bias"] = take(f"{src}.weight"), take(f"{src}.bias")
            return
        kernel = linear_to_kernel(take(f"{src}.weight"))
        hidden = kernel.shape[0] if kind == "qkv" else kernel.shape[1]
        bias = state.pop(f"{src}.bias", np.zeros(kernel.shape[1], kernel.dtype))
        if kind == "qkv":
            kernel, bias = split_heads(kernel, num_heads), bias.reshape(num_heads, -1)
        elif kind == "out":
            kernel = kernel.reshape(num_heads, -1, hidden)
        out[f"{dst}/kernel"], out[f"{dst}/bias"] = kernel, bias

    try:
        out["embedding/kernel"] = conv_to_hwio(take("embeddings.patch_embeddings.projection.weight"))
        out["embedding/bias"] = take("embeddings.patch_embeddings.projection.bias")
        out["cls"] = take("embeddings.cls_token")
        out[POSEMB_KEY] = take("embeddings.position_embeddings")
        i = 0
        while f"encoder.layer.{i}.layernorm_before.weight" in state:
            for src, dst in _BLOCK.items():
                kind = "norm" if "layernorm" in src else "qkv" if src.startswith("attention.attention") else "dense"
                kind = "out" if src == "attention.output.dense" else kind
                put(f"encoder.layer.{i}.{src}", f"Transformer/encoderblock_{i}/{dst}", kind)
            i += 1
        put("layernorm", "Transformer/encoder_norm", "norm")
        if "pooler.dense.weight" in state:
            put("pooler.dense", "pre_logits", "dense")
        if "classifier.weight" in state:
            put("classifier", "head", "dense")
    except KeyError as err:
        raise CheckpointError(f"{os.fspath(source)!r} is not a transformers ViT: tensor {err} is missing.") from err
    if state:
        raise leftover_error(source, "transformers", state)
    return out


def from_original(params, num_heads):
    """Original-layout params -> a transformers state dict (with the `vit.` prefix when there is a head)."""
    prefix = "vit." if "head/kernel" in params else ""
    state = {}

    def put(src, dst, kind):
        if kind == "norm":
            state[f"{dst}.weight"], state[f"{dst}.bias"] = params[f"{src}/scale"], params[f"{src}/bias"]
            return
        kernel, bias = np.asarray(params[f"{src}/kernel"]), np.asarray(params[f"{src}/bias"])
        if kind == "qkv":
            kernel, bias = kernel.reshape(kernel.shape[0], -1), bias.reshape(-1)
        elif kind == "out":
            kernel = kernel.reshape(-1, kernel.shape[-1])
        state[f"{dst}.weight"], state[f"{dst}.bias"] = kernel.T, bias

    state[f"{prefix}embeddings.patch_embeddings.projection.weight"] = hwio_to_conv(params["embedding/kernel"])
    state[f"{prefix}embeddings.patch_embeddings.projection.bias"] = params["embedding/bias"]
    state[f"{prefix}embeddings.cls_token"] = params["cls"]
    state[f"{prefix}embeddings.position_embeddings"] = params[POSEMB_KEY]
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in params:
        for dst, src in _BLOCK.items():
            kind = "norm" if "layernorm" in dst else "qkv" if dst.startswith("attention.attention") else "dense"
            kind = "out" if dst == "attention.output.dense" else kind
            put(f"Transformer/encoderblock_{i}/{src}", f"{prefix}encoder.layer.{i}.{dst}", kind)
        i += 1
    put("Transformer/encoder_norm", f"{prefix}layernorm", "norm")
    if "pre_logits/kernel" in params:
        put("pre_logits", "pooler.dense", "dense")
    if "head/kernel" in params:
        put("head", "classifier", "dense")
    return state


def write(folder, params, config, class_names=None):
    """Writes a folder `ViTForImageClassification.from_pretrained(folder)` loads (with a head), or
    `ViTModel.from_pretrained(folder)` (without one; its pooler is the model's `pre_logits`, if any); a ViT
    relative goes to its family's layout (`Dinov2Model`, `CLIPVisionModel`, `SiglipVisionModel`,
    `DeiTForImageClassificationWithTeacher`)."""
    model_type = families2.model_type_for(config)
    if model_type is not None:
        families2.check_writable(model_type, config)
        state = families2.from_original(params, model_type, config)
        return _write_folder(
            folder, state, families2.hf_config(model_type, config), config, families2.PROCESSORS2[model_type]
        )
    model_type = families.model_type_for(config)
    if model_type is not None:
        families.check_writable(model_type, config)
        state = families.from_original(params, model_type, config)
        cfg = families.hf_config(model_type, config, class_names)
        return _write_folder(folder, state, cfg, config, families.PROCESSORS[model_type])
    if config.resnet_layers is not None or not config.class_token or config.pooling != "token":
        raise CheckpointError(
            "transformers' ViT classifies the class token of a plain ViT; this model (hybrid, GAP or no class "
            "token) has no transformers equivalent. Save it as 'npz' (or 'timm' for GAP models)."
        )
    if config.representation_size and config.num_classes:
        raise CheckpointError(
            "transformers' ViTForImageClassification has no pre_logits layer before its head; save this model "
            "as 'npz', or drop the representation layer (fine-tuning replaces it anyway)."
        )
    head = bool(config.num_classes)
    names = list(class_names) if class_names else [f"LABEL_{i}" for i in range(config.num_classes)]
    height, width = config.image_size
    cfg = dict(
        architectures=["ViTForImageClassification" if head else "ViTModel"],
        model_type="vit",
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        intermediate_size=config.mlp_dim,
        hidden_act="gelu" if config.gelu == "exact" else "gelu_pytorch_tanh",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.02,
        layer_norm_eps=config.layer_norm_epsilon,
        image_size=height if height == width else [height, width],
        patch_size=config.patch_size,
        num_channels=config.channels,
        qkv_bias=True,
        encoder_stride=config.patch_size,
        pooler_output_size=config.representation_size or config.hidden_size,
        pooler_act="tanh",
        dtype="float32",
    )
    if head:
        cfg["id2label"] = {str(i): name for i, name in enumerate(names)}
        cfg["label2id"] = {name: i for i, name in enumerate(names)}
    return _write_folder(folder, from_original(params, config.num_heads), cfg, config)


def _write_folder(folder, state, cfg, config, processor_type="ViTImageProcessor"):
    height, width = config.image_size
    processor = dict(
        do_normalize=True,
        do_rescale=True,
        do_resize=True,
        image_mean=list(CONTRACT_MEAN),
        image_std=list(CONTRACT_STD),
        image_processor_type=processor_type,
        resample=2,  # PIL bilinear, keras-vit's resize
        rescale_factor=1 / 255,
        size={"height": height, "width": width},
    )
    files.makedirs(folder)
    write_safetensors(os.path.join(folder, "model.safetensors"), state)
    write_json(os.path.join(folder, "config.json"), cfg)
    write_json(os.path.join(folder, "preprocessor_config.json"), processor)
    return folder
