"""Checks of a `VisionTransformer`'s options and inputs: one line naming the problem and the fix."""

import keras

from keras_vit.layers.position_embedding import RESIZE_METHODS
from keras_vit.layers.resnet import RESNET_NORMS

POOLINGS = ("token", "gap", "map")


def check_images(images, config, name):
    """Fails early, with the fix, on images the model would reject deep inside (or silently misread)."""
    shape = tuple(images.shape)
    want = (*config.image_size, config.channels)
    step = config.feature_stride * config.patch_size
    if config.dynamic_image_size:
        expected = f"images shaped (batch, height, width, {want[2]}), height and width multiples of {step}"
    else:
        expected = f"images shaped (batch, {want[0]}, {want[1]}, {want[2]})"
    expected += ", NHWC float in [-1, 1]"
    if len(shape) != 4:
        raise ValueError(f"Model '{name}' expects {expected}. Received a tensor of rank {len(shape)}: {shape}.")
    if shape[3] is not None and shape[3] != want[2]:
        fix = " (grey images: repeat the channel 3 times)" if shape[3] == 1 else ""
        raise ValueError(
            f"Model '{name}' expects {want[2]} channels but received {shape[3]}: shape {shape}{fix}. "
            f"Expected {expected}."
        )
    if config.dynamic_image_size:
        bad = [s for s in shape[1:3] if s is not None and (s <= 0 or s % step)]
        if bad:
            near = [max(step, s // step * step) for s in shape[1:3]]
            raise ValueError(
                f"Model '{name}' (dynamic_image_size=True) takes images whose height and width are multiples of "
                f"{step} ({_step_reason(config)}), but received {shape[1]}x{shape[2]} (shape {shape}). "
                f"Resize or crop them, e.g. to {near[0]}x{near[1]}."
            )
    elif shape[1:3] != want[:2] and None not in shape[1:3]:
        raise ValueError(
            f"Model '{name}' was built for {want[0]}x{want[1]} images but received {shape[1]}x{shape[2]} "
            f"(shape {shape}). Resize the images, or build a model for this size "
            f"(create_model(..., image_size={shape[1:3]}) and load_npz, which interpolates position embeddings), "
            f"or one that takes any size (create_model(..., dynamic_image_size=True))."
        )
    dtype = keras.backend.standardize_dtype(images.dtype)
    if "int" in dtype or dtype == "bool":
        raise ValueError(
            f"Model '{name}' received {dtype} images; it expects float images scaled to [-1, 1]. "
            f"Convert first: images = (images.astype('float32') - 127.5) / 127.5."
        )


def _step_reason(config):
    if config.feature_stride == 1:
        return f"patch_size={config.patch_size}"
    return f"the hybrid's ResNet output stride {config.feature_stride} x patch_size {config.patch_size}"


def validate(config):
    def positive(name):
        value = getattr(config, name)
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer. Received: {name}={value!r}")

    for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "channels"):
        positive(name)
    if config.num_classes < 0:
        raise ValueError(f"num_classes must be >= 0 (0 returns the pooled features). Received: {config.num_classes}")
    if config.hidden_size % config.num_heads:
        raise ValueError(
            f"hidden_size must be divisible by num_heads. Received: hidden_size={config.hidden_size}, "
            f"num_heads={config.num_heads}"
        )
    step = config.feature_stride * config.patch_size
    for size, what in zip(config.image_size, ("height", "width")):
        if size <= 0 or size % step:
            raise ValueError(
                f"The image {what} must be a positive multiple of {step} ({_step_reason(config)}). Received: "
                f"image_size={config.image_size}. Nearest valid sizes: {max(step, size // step * step)} "
                f"or {(size // step + 1) * step}."
            )
    for name in ("dropout_rate", "attention_dropout_rate", "stochastic_depth_rate"):
        value = getattr(config, name)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1). Received: {name}={value}")
    rates = {n: getattr(config, n) for n in ("dropout_rate", "attention_dropout_rate", "stochastic_depth_rate")}
    if config.remat is True and any(rates.values()):
        received = ", ".join(f"{n}={v}" for n, v in rates.items())
        raise ValueError(
            f"remat=True needs zero dropout and stochastic-depth rates: the backward pass recomputes each block and "
            f"would draw new random masks. Received: {received}; set them to 0, or use remat='elementwise' (it "
            f"recomputes no dropout) or remat=False."
        )
    validate_family(config)
    validate_extended(config)
    if config.pooling == "token" and not config.class_token:
        raise ValueError("pooling='token' needs class_token=True; use pooling='gap' for a model without one.")
    if config.dynamic_resize_method not in RESIZE_METHODS:
        raise ValueError(
            f"dynamic_resize_method must be one of {RESIZE_METHODS}. Received: {config.dynamic_resize_method!r}"
        )
    if config.dynamic_image_size and config.position_embedding not in ("learned", "none"):
        raise ValueError(
            f"dynamic_image_size=True interpolates learned position embeddings; position_embedding="
            f"{config.position_embedding!r} is a fixed table. Build a model per image size "
            f"(create_model(..., image_size=(h, w))) instead."
        )


def check_class_names(class_names, num_classes):
    if class_names is None:
        return None
    if isinstance(class_names, str):
        raise ValueError("class_names must be a list of names, one per output, not one string.")
    names = [str(n) for n in class_names]
    if len(names) != num_classes:
        raise ValueError(
            f"class_names has {len(names)} names for a head of {num_classes} classes. Pass one name per output "
            f"class, or class_names=None."
        )
    return tuple(names)


def validate_family(config):
    """The ViT-family options (LayerScale, registers, distillation token, pre-norm, fc_norm, MAP pooling)."""
    if config.pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}. Received: pooling={config.pooling!r}")
    if config.gelu not in ("tanh", "exact", "quick"):
        raise ValueError(f"gelu must be 'tanh', 'exact' or 'quick'. Received: gelu={config.gelu!r}")
    if not isinstance(config.num_registers, int) or config.num_registers < 0:
        raise ValueError(f"num_registers must be an integer >= 0. Received: num_registers={config.num_registers!r}")
    if config.layer_scale is not None and not config.layer_scale > 0:
        raise ValueError(f"layer_scale must be a positive gain or None. Received: layer_scale={config.layer_scale!r}")
    if config.distillation_token and (not config.class_token or config.pooling != "token"):
        raise ValueError(
            "distillation_token=True needs class_token=True and pooling='token' (DeiT classifies the class and the "
            f"distillation token). Received: class_token={config.class_token}, pooling={config.pooling!r}"
        )
    if config.distillation_token and config.representation_size:
        raise ValueError("distillation_token=True has no pre_logits layer; set representation_size=None.")
    if config.pooling == "map" and (config.fc_norm or config.representation_size):
        raise ValueError(
            "pooling='map' ends in its own LayerNorm and MLP; set fc_norm=False and representation_size=None."
        )
    if config.no_embed_class and config.position_embedding != "learned":
        raise ValueError(
            "no_embed_class=True applies to learned position embeddings; use position_embedding='learned'."
        )
    if config.resnet_norm not in RESNET_NORMS:
        raise ValueError(
            f"resnet_norm must be one of {tuple(RESNET_NORMS)}. Received: resnet_norm={config.resnet_norm!r}"
        )
    if not config.patch_bias and config.resnet_layers is not None:
        raise ValueError("patch_bias=False is for plain ViTs (CLIP); a hybrid's patch embedding has a bias.")


def validate_extended(config):
    """The second generation's options (rotary embeddings, SwiGLU, sub-LN, bias flags, RMSNorm, MAP heads)."""
    from keras_vit.layers.rotary_embedding import VARIANTS

    if config.position_embedding not in ("learned", "sincos2d", "none"):
        raise ValueError(
            f"position_embedding must be 'learned', 'sincos2d' or 'none'. Received: {config.position_embedding!r}"
        )
    if config.rope is not None and config.rope not in VARIANTS:
        raise ValueError(f"rope must be None or one of {tuple(VARIANTS)}. Received: rope={config.rope!r}")
    if config.rope is not None and (config.hidden_size // config.num_heads) % 4:
        raise ValueError(
            f"rope needs a head width (hidden_size / num_heads) divisible by 4. Received: hidden_size="
            f"{config.hidden_size}, num_heads={config.num_heads}"
        )
    if config.rope_rescale is not None and (config.rope != "dinov3" or not float(config.rope_rescale) > 1.0):
        raise ValueError(
            f"rope_rescale is DINOv3's coordinate augmentation: a factor > 1 with rope='dinov3'. Received: "
            f"rope_rescale={config.rope_rescale!r}, rope={config.rope!r}"
        )
    if config.position_embedding == "none" and config.no_embed_class:
        raise ValueError("no_embed_class=True needs a position embedding; use position_embedding='learned'.")
    choices = dict(mlp_type=("gelu", "swiglu"), qkv_bias=("qkv", "qv", "none"), norm=("layer", "rms"))
    for name, allowed in choices.items():
        if getattr(config, name) not in allowed:
            raise ValueError(f"{name} must be one of {allowed}. Received: {name}={getattr(config, name)!r}")
    if config.mlp_type == "gelu" and (config.mlp_norm or not config.mlp_bias):
        raise ValueError("mlp_norm=True and mlp_bias=False are SwiGLU options; set mlp_type='swiglu'.")
    for name in ("map_heads", "map_mlp_dim"):
        value = getattr(config, name)
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"{name} must be a positive integer or None. Received: {name}={value!r}")
    if config.map_heads and config.hidden_size % config.map_heads:
        raise ValueError(
            f"hidden_size must be divisible by map_heads. Received: hidden_size={config.hidden_size}, "
            f"map_heads={config.map_heads}"
        )
