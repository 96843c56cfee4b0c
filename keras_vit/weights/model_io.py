"""Pretrained weights of every format into and out of a model: the build behind `from_pretrained` (pretrained.py),
`load_weights`, `save_pretrained`; a checkpoint's own normalisation is folded into the patch embedding."""

import dataclasses
import os
import warnings

import numpy as np

from keras_vit import files, labels
from keras_vit.layers import deferred_init
from keras_vit.models import VisionTransformer, ViTConfig
from keras_vit.weights import config_precheck, keras_hub, naflex, quantized, sources, timm, transformers
from keras_vit.weights.checkpoint import CONTRACT_MEAN, Checkpoint, is_contract_normalisation
from keras_vit.weights.config_inference import infer_options
from keras_vit.weights.errors import unknown_folder
from keras_vit.weights.loading import POSEMB_KEY, CheckpointError, checkpoint_variables, load_params
from keras_vit.weights.npz import read_npz, to_original_layout
from keras_vit.weights.timm_architectures import is_extended

FORMATS = ("timm", "transformers", "keras_hub", "npz")
_LOAD_OPTIONS = ("resize_method",)


def read_checkpoint(source):
    """Reads any supported source into a `Checkpoint` (original layout, options, names, mean/std).

    `source` is a catalogue name, a URL (`https://`, `gs://`), a Hub id (`hf://ORG/NAME`), a local path (an
    `.npz`, a `.keras` model, a folder of another library's layout) or another `tf.io.gfile` URL; the
    first three are downloaded once into their caches (`keras_vit/weights/sources.py`). A catalogue entry adds
    what its file does not state: its label space's class names and its preprocessing. A `Checkpoint` already
    read is returned as it is.
    """
    if isinstance(source, Checkpoint):
        return source
    fetched = sources.fetch(source)
    ckpt = _read_local(fetched.path)
    entry = fetched.entry
    if entry is not None:
        ckpt.source = f"{entry.name} ({fetched.path})"
        ckpt.mean, ckpt.std = entry.mean, entry.std
        if ckpt.class_names is None and ckpt.options["num_classes"] == entry.num_classes:
            ckpt.class_names = labels.class_names_for(entry.num_classes)
    return ckpt


def _read_local(path):
    if files.is_remote(path) or os.path.isfile(path):  # a tf.io.gfile URL (ram://, s3://...) is read as a file
        if path.endswith(".npz"):
            return _read_npz(path)
        if path.endswith(".keras"):
            return _read_keras(path)
        raise CheckpointError(
            f"{path!r} is a file keras-vit does not read on its own; pass a .npz checkpoint, or the folder that "
            f"holds this file with its config.json (timm, transformers or keras-hub layout)."
        )
    config_precheck.check_folder(path)  # a config.json no reader could take, in one line naming its field
    if naflex.is_naflex_folder(path):
        return naflex.read(path)
    if keras_hub.is_keras_hub_folder(path):
        return keras_hub.read(path)
    if timm.is_timm_folder(path):
        return timm.read(path)
    if transformers.is_transformers_folder(path):
        return transformers.read(path)
    npz = sorted(f for f in os.listdir(path) if f.endswith(".npz"))
    if len(npz) == 1:
        return _read_npz(os.path.join(path, npz[0]))
    raise unknown_folder(path)


def _read_keras(path):
    """A keras-vit model saved as `.keras` (safe mode: no Lambda layers, no pickles) as a `Checkpoint`."""
    import keras

    from keras_vit.models import NaFlexViT, VisionTransformer

    model = keras.saving.load_model(path, compile=False, safe_mode=True)
    if isinstance(model, NaFlexViT):
        return naflex.checkpoint_of(model, model_params(model), path)
    if not isinstance(model, VisionTransformer):
        raise CheckpointError(f"{path!r} holds a {type(model).__name__}, not a keras_vit VisionTransformer.")
    if quantized.quantized_layers(model):  # model.quantize(...): codes and scales, read as the float kernels
        model = quantized.float_twin(model, source=path)
    options = model.config.to_dict()
    return Checkpoint(
        params=model_params(model), options=options, class_names=model.class_names, format="keras", source=path
    )


def _read_npz(path):
    params = to_original_layout(read_npz(path))
    if naflex.is_big_vision_naflex(params):
        return naflex.read_big_vision(params, path)
    return Checkpoint(params=params, options=infer_options(params, source=path), format="npz", source=path)


def load_pretrained(source, **overrides):
    """`keras_vit.from_pretrained` once its source has passed the check that needs no Keras
    (keras_vit/weights/pretrained.py, which holds the public function and its documentation)."""
    ckpt = read_checkpoint(source)
    as_naflex = overrides.pop("naflex", None)
    if as_naflex or (as_naflex is None and ckpt.naflex is not None):
        return _naflex_model(ckpt, overrides)
    overrides.pop("max_num_patches", None)
    load_kwargs = {k: overrides.pop(k) for k in _LOAD_OPTIONS if k in overrides}
    name = overrides.pop("name", "vit")
    class_names = overrides.pop("class_names", None)
    if class_names is None and overrides.get("num_classes", ckpt.options["num_classes"]) == ckpt.options["num_classes"]:
        class_names = ckpt.class_names
    config = ViTConfig(**ckpt.options).replace(**overrides)
    with deferred_init.deferred() as notes:  # the checkpoint overwrites them: no random draw first
        model = VisionTransformer(**config.to_dict(), class_names=class_names, name=name)
    report = _load(model, ckpt, caller="from_pretrained", **load_kwargs)
    table = checkpoint_variables(model)
    deferred_init.draw_remaining(notes, [table[key] for key in report.loaded])  # a new head, a sin-cos table
    return model


def _naflex_model(ckpt, overrides):
    """The `NaFlexViT` of a NaFlex folder or of a fixed-resolution SigLIP checkpoint (the same weights; the
    position table's grid is the checkpoint's). Overrides: `max_num_patches`, `num_classes`, `name`, `class_names`."""
    from keras_vit.models.naflex import NaFlexViT

    options = naflex.naflex_options(ckpt, overrides.pop("max_num_patches", None))
    unknown = sorted(set(overrides) - {"num_classes", "name", "class_names"})
    if unknown:
        raise TypeError(f"A NaFlex model takes max_num_patches, num_classes, name and class_names; not {unknown}.")
    options["num_classes"] = overrides.get("num_classes", options["num_classes"])
    class_names = overrides.get("class_names")
    if class_names is None and options["num_classes"] == ckpt.options["num_classes"]:
        class_names = ckpt.class_names
    with deferred_init.deferred() as notes:
        model = NaFlexViT(**options, class_names=class_names, name=overrides.get("name", "naflex_vit"))
    report = _load_naflex(model, ckpt, caller="from_pretrained")
    table = checkpoint_variables(model)
    deferred_init.draw_remaining(notes, [table[key] for key in report.loaded])
    return model


def _load_naflex(model, ckpt, *, caller, new_head=False):
    """`load_params` into a `NaFlexViT`: the checkpoint's statistics folded, its patch kernel flattened; its table
    must have the model's grid (NaFlex resizes it per image, not when loading)."""
    grid = model.options["position_grid"]
    params = fold_normalisation(ckpt.params, ckpt.mean, ckpt.std, source=ckpt.source, num_patches=grid[0] * grid[1])
    return load_params(model, naflex.naflex_params(params), source=ckpt.source, caller=caller, new_head=new_head)


def load_weights(model, source, *, resize_method="zoom", new_head=False):
    """Loads any supported checkpoint into a model the caller built (`create_model` / `VisionTransformer`).

    Warns when the model's GELU form or LayerNorm epsilon differ from what the checkpoint's config states (the
    outputs then differ slightly from the original library's); an `.npz` states neither. `new_head=True` leaves
    the model's own head in place of the checkpoint's, without the warning a head of another class count gets
    otherwise (fine-tuning asks for one). Returns the `LoadReport` of `load_params`.
    """
    ckpt = read_checkpoint(source)
    if "max_num_patches" in (getattr(model, "options", None) or {}):  # a NaFlexViT
        return _load_naflex(model, ckpt, caller="load_weights", new_head=new_head)
    config = model.config
    for field in ("gelu", "layer_norm_epsilon") if ckpt.format != "npz" else ():
        want = ckpt.options[field]
        if getattr(config, field) != want:
            warnings.warn(
                f"load_weights: {ckpt.source!r} was trained with {field}={want!r} but the model has "
                f"{field}={getattr(config, field)!r}; outputs will differ slightly. Build the model with "
                f"{field}={want!r}, or use from_pretrained.",
                stacklevel=2,
            )
    return _load(model, ckpt, caller="load_weights", resize_method=resize_method, new_head=new_head)


def _load(model, ckpt, *, caller, resize_method="zoom", new_head=False):
    grid = ViTConfig(**ckpt.options).grid_size  # the checkpoint's own grid, which may not be square
    params = fold_normalisation(ckpt.params, ckpt.mean, ckpt.std, source=ckpt.source, num_patches=grid[0] * grid[1])
    return load_params(
        model,
        params,
        source=ckpt.source,
        resize_method=resize_method,
        checkpoint_grid=grid,
        caller=caller,
        new_head=new_head,
    )


def fold_normalisation(params, mean, std, *, source="checkpoint", num_patches=None):
    """Makes weights trained on `(p - mean) / std` (p in 0..1) take keras-vit's `(p - 0.5) / 0.5` instead.

    With x = (p - 0.5) / 0.5 the checkpoint's input is x * (0.5 / std) + (0.5 - mean) / std per channel; a VALID
    patch embedding (a linear map of each patch plus a bias) absorbs that exactly: its kernel is scaled per input
    channel, and the constant term, summed over the patch, moves into its bias. A patch embedding without a bias
    (CLIP's) adds that constant to every patch token, as the patch rows of the learned position embedding do: it
    moves there instead (`num_patches`, the last rows of the table), and the model keeps no patch bias.
    """
    mean = np.asarray(mean, np.float64)
    std = np.asarray(std, np.float64)
    if is_contract_normalisation(mean, std):
        return params
    if "conv_root/kernel" in params:
        raise CheckpointError(
            f"{source!r} is a hybrid ViT trained with mean={mean.tolist()}, std={std.tolist()}: its ResNet stem "
            f"(SAME padding, weight standardisation) cannot absorb the change to keras-vit's [-1, 1] inputs. "
            f"Normalise its inputs as it was trained instead."
        )
    kernel = np.asarray(params["embedding/kernel"], np.float64)  # (P, P, C, D)
    gain = np.asarray(CONTRACT_MEAN) / std  # 0.5 / std
    shift = (np.asarray(CONTRACT_MEAN) - mean) / std
    out = dict(params)
    out["embedding/kernel"] = (kernel * gain[None, None, :, None]).astype(np.float32)
    constant = np.einsum("hwcd,c->d", kernel, shift)
    if "embedding/bias" in params:
        out["embedding/bias"] = (np.asarray(params["embedding/bias"], np.float64) + constant).astype(np.float32)
        return out
    if POSEMB_KEY not in params or not num_patches:
        raise CheckpointError(
            f"{source!r} has no patch-embedding bias and no learned position embedding to absorb the change from "
            f"mean={mean.tolist()}, std={std.tolist()} to keras-vit's [-1, 1] inputs; normalise its inputs instead."
        )
    posemb = np.array(params[POSEMB_KEY], np.float64)
    posemb[:, -num_patches:] += constant
    out[POSEMB_KEY] = posemb.astype(np.float32)
    return out


def model_params(model):
    """The model's weights as {original key: numpy array}."""
    # float32 whatever the dtype policy: every format here stores float32 (bfloat16 has no numpy/.npz type).
    return {key: np.asarray(variable.numpy(), np.float32) for key, variable in checkpoint_variables(model).items()}


def save_pretrained(model, folder, format="timm"):
    """Writes the model in another library's published layout.

    Args:
        model: a `VisionTransformer`.
        folder: the output folder (created); for "npz", a path ending in `.npz` is the file itself, else the
            file is `folder/model.npz`.
        format: "timm" (config.json + model.safetensors), "transformers" (config.json + model.safetensors +
            preprocessor_config.json), "keras_hub" (a preset folder: config.json, model.weights.h5, metadata.json,
            and task.json + task.weights.h5 with a head) or "npz" (the original vit_jax layout, which `load_npz`
            reads).

    The written configs state mean = std = 0.5, keras-vit's contract, which the weights already fit.

    Returns:
        The path written (the folder, or the `.npz` file).

    Raises:
        CheckpointError: a model the chosen layout cannot hold (e.g. "npz" for a hybrid with resnet_norm="timm").
    """
    if format not in FORMATS:
        raise ValueError(f"Unknown format {format!r}; use one of {FORMATS}.")
    options = getattr(model, "options", None)
    if options is not None and "max_num_patches" in options:  # a NaFlexViT
        params = naflex.fixed_params(model_params(model), options["patch_size"], options["channels"])
        return naflex.write(os.fspath(folder), params, options, format, getattr(model, "class_names", None))
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(f"save_pretrained needs a keras_vit VisionTransformer; received {type(model).__name__}.")
    if format == "npz":
        _check_npz_writable(config)
    if format != "timm" and is_extended(config) and not _holds_extended(format, config):
        raise CheckpointError(
            f"The {format} layout keras-vit writes cannot hold this model's rotary embeddings, SwiGLU, bias or norm "
            f"options (a DINOv3 / EVA-02 / PE / AIMv2 model): save it with format='timm' or model.save('m.keras')."
        )
    params = model_params(model)
    folder = os.fspath(folder)
    class_names = getattr(model, "class_names", None)
    if format == "timm":
        return timm.write(folder, params, config, class_names)
    if format == "transformers":
        return transformers.write(folder, params, config, class_names)
    if format == "keras_hub":
        return keras_hub.write(folder, params, config, class_names)
    path = folder if folder.endswith(".npz") else os.path.join(folder, "model.npz")

    def write(f):
        np.savez(f, **params)

    return files.atomic_write(path, write)


def _holds_extended(format, config):
    """Whether `format`'s writer has a layout for this DINOv3 / EVA-02 / PE / AIMv2 model: transformers for the
    families it has (DINOv3, AIMv2, Dinov2 with SwiGLU), keras-hub for DINOv3; the npz layout for none."""
    if format == "transformers":
        if transformers.families2.model_type_for(config) is not None:
            return True  # that family's check_writable refuses what its class cannot hold exactly
        # Dinov2 (LayerScale) whose only second-generation part is its SwiGLU MLP: dinov2-giant, Web-SSL.
        plain_mlp = dataclasses.replace(config, mlp_type="gelu")
        return config.layer_scale is not None and config.mlp_type == "swiglu" and not is_extended(plain_mlp)
    return format == "keras_hub" and config.rope == "dinov3"


def _check_npz_writable(config):
    """One line for a model whose options the original `.npz` layout cannot record."""
    if config.resnet_layers is not None and config.resnet_norm == "timm":
        # The file holds arrays only: load_npz (and vit_jax itself) would build the stem with vit_jax's constants.
        raise CheckpointError(
            "The .npz layout cannot record resnet_norm='timm': read back (by load_npz or vit_jax), its ResNet stem "
            "would use vit_jax's constants (kernels / (std + 1e-5), GroupNorm epsilon 1e-6) instead of timm's "
            "(sqrt(var + 1e-8), 1e-5). Save it in timm's layout: save_pretrained(model, folder, format='timm')."
        )
