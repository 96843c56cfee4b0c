"""TFLite (LiteRT) conversion of every kind's file: a Keras model traced at batch 1 (or an open batch), its variables
frozen, converted with builtin ops only in one of `QUANTIZATION_MODES` (docs/export.md says why freezing matters)."""

import re
import warnings

from ..description import describe, to_model_space
from ..errors import ExportError, check_choices
from ..io import check_labels
from ..kinds import classifier, embedder
from ..runtime import named_call
from . import maintained
from . import metadata as tflite_metadata
from .flatbuffer import non_builtin_ops, read_ops

QUANTIZATION_MODES = ("float32", "float16", "dynamic_int8", "int8", "int8_matmul", "int8_int16", "int4_weights")
# What an export converts unless --quantize says otherwise; the last two (export/tflite/maintained.py) are opt-in.
DEFAULT_MODES = QUANTIZATION_MODES[:5]
# The modes whose activation ranges are calibrated on representative images.
CALIBRATED_MODES = ("int8", "int8_matmul", "int8_int16")
# What "int8_matmul" quantises: every matrix product with constant weights (the projections, the MLP, the
# patch embedding, the head) and the ops that only move data between them. LayerNorm, GELU, softmax, the
# residual adds and the attention's activation x activation BATCH_MATMULs stay float: XNNPACK runs them fast
# in float, has no int8 BATCH_MATMUL, and int8 versions of the others cost QUANTIZE/DEQUANTIZE pairs and
# accuracy for little speed. Measured with `python -m benchmarks` (ViT-Ti/16, 224 px, batch 1, 2 threads):
# 0.54x float32 latency on an AVX-512 VNNI CPU, where the full-integer model is no faster than float32.
INT8_MATMUL_OPS = ("FULLY_CONNECTED", "CONV_2D", "RESHAPE", "TRANSPOSE", "STRIDED_SLICE", "CONCATENATION", "GATHER")
INT8_IO_TYPES = ("float32", "uint8")
OUTPUTS = tflite_metadata.OUTPUT_KINDS  # ("probabilities", "logits"): what the model's output tensor holds
DEFAULT_CALIBRATION_STEPS = 512


def check_quantization(modes):
    """Validates a list (or comma-separated string) of quantization modes; returns a list."""
    return check_choices(modes, QUANTIZATION_MODES, "quantization mode(s)", "--quantize float32,int8")


def check_output(output):
    """Validates the TFLite output kind ("probabilities" or "logits")."""
    if output not in OUTPUTS:
        raise ExportError(
            f"Unknown TFLite output {output!r}. Choose from {', '.join(OUTPUTS)} (e.g. --tflite-output logits)."
        )
    return output


def frozen_function(model, dynamic_batch=False, output="logits"):
    """Traces `model` at its input size (batch 1, or dynamic) and freezes its variables into constants.

    `output="probabilities"` appends a softmax over the logits (one SOFTMAX op in the TFLite model). A keras_vit
    model built with `dynamic_image_size=True` is traced at its stored `image_size` (`fixed_size_model`).
    """
    import tensorflow as tf

    model = _fixed_size(model)
    if any(d is None for d in model.input_shape[1:]):
        raise ExportError(
            f"TFLite export needs a static image size; the model's input shape is {model.input_shape}. "
            "Build the model with a fixed image_size (a keras_vit model with dynamic_image_size=True is exported "
            "at its image_size)."
        )

    def outputs(images):
        logits = model(images, training=False)
        if output == "probabilities":
            return {"probabilities": tf.nn.softmax(logits, axis=-1)}
        return {"logits": logits}

    return freeze(model, outputs, dynamic_batch)


def freeze(model, outputs, dynamic_batch=False):
    """The one freeze of every kind's TFLite file: `outputs(images) -> {name: tensor}` traced at `model`'s input
    size (batch 1, or an open batch) with its input named `images`, variables frozen, outputs named (`freeze_named`).

    Freezing matters: converting the live function (or a SavedModel of it) keeps VAR_HANDLE/READ_VARIABLE ops whose
    buffers LiteRT 2.3 leaves uninitialised, and the model then returns NaN."""
    import tensorflow as tf

    shape = (None if dynamic_batch else 1, *model.input_shape[1:])

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="images")])
    def function(images):
        return outputs(images)

    return freeze_named(function)


def freeze_named(function):
    """`function` (a tf.function of one input returning a dict) with its variables frozen into constants, its
    outputs still named by the dict's keys in the TFLite signature.

    Freezing flattens the dict into a list (the signature would call the outputs output_0, output_1, ...), so the
    frozen function is wrapped in one that names them again, in the order tf.nest flattens the dict.
    """
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    concrete = function.get_concrete_function()
    frozen = convert_variables_to_constants_v2(concrete)
    names = tf.nest.flatten({name: name for name in concrete.structured_outputs})

    @tf.function(input_signature=concrete.structured_input_signature[0])
    def named(images):
        return dict(zip(names, frozen(images)))

    return named.get_concrete_function()


def convert(
    model,
    quantize="float32",
    representative_images=None,
    dynamic_batch=False,
    int8_io="float32",
    calibration_steps=DEFAULT_CALIBRATION_STEPS,
    output="probabilities",
    labels=None,
    metadata=None,
):
    """Converts a Keras model to a TFLite flatbuffer with builtin ops only, with TFLite metadata embedded.

    Args:
        model: Keras model, NHWC float input in [-1, 1] at a static size, logits out; a keras_vit model built
            with `dynamic_image_size=True` is exported at its `image_size`.
        quantize: "float32", "float16" (float16 weights), "dynamic_int8" (int8 weights, float activations),
            "int8" (full integer: int8 weights and activations, calibrated on `representative_images`; for
            integer-only accelerators), "int8_matmul" (calibrated int8 matmuls and convolutions, float
            LayerNorm/GELU/softmax/attention products and float I/O: the fast int8 model on CPUs), or, built with
            ai-edge-quantizer (export/tflite/maintained.py), "int8_int16" (int8 weights, int16 activations and I/O,
            calibrated) and "int4_weights" (int4 weights, float activations).
        representative_images: for "int8" and "int8_matmul": raw uint8 images (N, H, W, 3) or a list of them, drawn
            from the training data; they are resized and scaled exactly like the model's inputs.
        dynamic_batch: leave the batch dimension open (-1) instead of fixing it to 1.
        int8_io: for "int8": "float32" (quantize/dequantize inside the model) or "uint8" (the caller feeds
            and reads quantized tensors, using the scale/zero-point of the input and output details).
        calibration_steps: at most this many representative images are used.
        output: "probabilities" (a softmax ends the model; what MediaPipe and the Task Library expect) or
            "logits".
        labels: class names for the metadata's labels file (default "0", "1", ...).
        metadata: descriptive metadata fields, a dict with any of name, description, version, license,
            author (see `export.tflite.metadata.render`); False writes the converter's flatbuffer as it is,
            without metadata.

    Returns:
        The flatbuffer as `bytes`: the model, its TFLITE_METADATA and the appended labels file.

    Raises:
        ExportError: unknown mode, missing representative data, or a graph that needs non-builtin ops.
    """
    # TFLite needs one input size, and the metadata states it: a dynamic-size model is exported at its image_size.
    model = _fixed_size(model)
    (quantize,) = check_quantization([quantize])
    check_output(output)
    labels = _metadata_labels(labels, int(model.output_shape[-1]))
    if int8_io not in INT8_IO_TYPES:
        raise ExportError(f"int8_io must be one of {INT8_IO_TYPES}. Received: {int8_io!r}")
    function = frozen_function(model, dynamic_batch, output)
    flatbuffer = convert_function(model, function, quantize, representative_images, int8_io, calibration_steps)
    if metadata is False:
        return flatbuffer
    described = describe(classifier, model, labels, tflite_output=output, metadata=metadata)
    return tflite_metadata.attach(flatbuffer, described, quantize)


def _metadata_labels(labels, num_classes):
    return [str(i) for i in range(num_classes)] if labels is None else check_labels(labels, num_classes)


def convert_function(model, function, quantize, representative_images=None, int8_io="float32",
                     calibration_steps=DEFAULT_CALIBRATION_STEPS):  # fmt: skip
    """Converts a frozen concrete function of `model` (`frozen_function`) to a flatbuffer without metadata, in one
    of QUANTIZATION_MODES (see `convert`), builtin ops only."""
    calibration = calibration_inputs(model, quantize, representative_images, calibration_steps)
    return convert_frozen(function, model, quantize, calibration, int8_io)


def convert_described(model, description, mode, representative_images=None, dynamic_batch=False, int8_io="float32"):
    """`model` as a flatbuffer without metadata whose outputs are `description`'s (export/description.py): scores
    with labels (probabilities or logits, as its `tflite_output` says), else every output by its name, a vector
    L2-normalised where the description says so."""
    if description.labels is not None:
        function = frozen_function(model, dynamic_batch, description.tflite_output)
    else:
        function = freeze(model, _named_outputs(model, description), dynamic_batch)
    return convert_function(model, function, mode, representative_images, int8_io)


def _named_outputs(model, description):
    import tensorflow as tf

    call = named_call(model, [o.name for o in description.outputs])

    def outputs(images):
        out = call(images)
        return {n: tf.math.l2_normalize(v, axis=-1) for n, v in out.items()} if description.l2_normalized else out

    return outputs


def convert_embedder(model, quantize="float32", representative_images=None, l2_normalize=False, metadata=None):
    """A head-less model as a TFLite image embedder (bytes) at batch 1 with the embedder metadata MediaPipe's
    ImageEmbedder reads (`metadata`: descriptive fields, or False for none); see `convert` for the modes."""
    model = _fixed_size(model)
    (quantize,) = check_quantization([quantize])
    if len(model.output_shape) != 2:
        raise ExportError(
            f"An embedder outputs one vector per image, (batch, features); this one {model.output_shape}."
        )
    described = describe(embedder, model, l2_normalize=l2_normalize, metadata=metadata)
    flatbuffer = convert_described(model, described, quantize, representative_images)
    return flatbuffer if metadata is False else tflite_metadata.attach(flatbuffer, described, quantize)


def calibration_inputs(model, quantize, representative_images, calibration_steps=DEFAULT_CALIBRATION_STEPS):
    """The model-space calibration images (float32 in [-1, 1] at the model's size) a calibrated mode needs, from
    at most `calibration_steps` raw uint8 `representative_images`; None for a mode that calibrates nothing.

    Raises:
        ExportError: a calibrated mode without representative images.
    """
    if quantize not in CALIBRATED_MODES:
        return None
    if representative_images is None or len(representative_images) == 0:
        raise ExportError(
            f"{quantize} needs representative images to calibrate activation ranges, and none were "
            "given. Pass --representative-data PATH (an .npz with a uint8 'images' array, or a folder of "
            "images from the training data), export a training workdir (it has samples/calibration.npz), "
            "or choose --quantize dynamic_int8, which needs no data."
        )
    chosen = representative_images[: int(calibration_steps)]
    return to_model_space(chosen, model.input_shape[1:3])


def convert_frozen(function, trackable, quantize, calibration=None, int8_io="float32", int8_ops=INT8_MATMUL_OPS):
    """The one TFLite conversion of this project: a frozen concrete function to a flatbuffer without metadata, in
    one of QUANTIZATION_MODES (see `convert`), builtin ops only. `python -m export` and `python -m benchmarks`
    (benchmarks/tflite.py) both convert through it.

    Args:
        function: a frozen concrete function (`frozen_function`), one float32 input.
        trackable: the Keras model it was traced from (selects the converter's current path).
        quantize: the mode. calibration: model-space inputs (N, ...) for the calibrated modes
            (`calibration_inputs`). int8_io: "float32" or "uint8" for "int8". int8_ops: the op types
            "int8_matmul" quantises (`benchmarks/int8_ops.py` tries more).

    Raises:
        ExportError: the conversion failed (naming the ops without a builtin kernel), or left non-builtin ops.
    """
    representative = None if calibration is None else (lambda: ([x[None]] for x in calibration))
    converter = _converter(function, trackable, quantize, representative, int8_io)
    try:
        with warnings.catch_warnings():
            # Emitted for every full-integer conversion with float I/O; the calibration covers the input.
            warnings.filterwarnings("ignore", message="Statistics for quantized inputs were expected")
            # The quantization debugger (int8_matmul) runs TF's own deprecated interpreter internally.
            warnings.filterwarnings("ignore", message=r"\s*Warning: tf.lite.Interpreter is deprecated")
            if quantize == "int8_matmul":
                plain = _converter(function, trackable, "float32")
                flatbuffer = quantize_matmuls_only(converter, plain.convert(), representative, int8_ops)
            elif quantize in maintained.MODES:  # ai-edge-quantizer, from the float32 flatbuffer
                flatbuffer = maintained.quantize(converter.convert(), quantize, calibration)
            else:
                flatbuffer = converter.convert()
    except OSError:
        raise  # a full or read-only disk, named as such by the CLIs
    except Exception as exc:
        raise _conversion_error(exc, quantize) from exc
    bad = non_builtin_ops(read_ops(flatbuffer))
    if bad:
        raise ExportError(f"The {quantize} TFLite model contains non-builtin ops {bad}; refusing to write it.")
    return flatbuffer


def _converter(function, trackable, quantize, representative=None, int8_io="float32"):
    """A TFLiteConverter of `function` set up for `quantize` (for "int8_matmul": the calibrated int8 converter the
    quantization debugger starts from)."""
    import tensorflow as tf

    # Passing the model as the trackable object selects the converter's current path (without it TF warns and
    # falls back to a deprecated one); the frozen function has no variables left for it to track.
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function], trackable)
    # Builtins only: SELECT_TF_OPS would need the Flex delegate, which mobile runtimes do not ship.
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize in ("float16", "dynamic_int8", "int8", "int8_matmul"):
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    elif quantize == "int8":
        # INT8 builtins only: conversion fails instead of silently leaving float islands in the graph.
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.representative_dataset = representative
        if int8_io == "uint8":
            converter.inference_input_type = tf.uint8
            converter.inference_output_type = tf.uint8
    elif quantize == "int8_matmul":
        converter.representative_dataset = representative
    return converter


def _conversion_error(exc, quantize):
    text = str(exc).strip()
    ops = _ops_without_builtins(exc)
    if ops:
        return ExportError(
            f"TFLite conversion ({quantize}) failed with builtin ops only: the TensorFlow op(s) {', '.join(ops)} "
            "have no TFLite builtin kernel (for example Erf from gelu='exact' in older TensorFlow). Replace the "
            "layer that uses them; this exporter never falls back to SELECT_TF_OPS because mobile runtimes "
            "cannot load them."
        )
    return ExportError(
        f"TFLite conversion ({quantize}) failed: {type(exc).__name__}: "
        f"{text.splitlines()[-1] if text else '(no message)'}"
    )


def _ops_without_builtins(exc):
    """The TensorFlow ops a converter error says have no builtin kernel (it needs Flex or custom ops); [] for any
    other failure, which then is reported as what it is."""
    names = []
    for data in getattr(exc, "errors", None) or []:  # convert_phase.ConverterError: one ConverterErrorData per op
        try:
            code = type(data).ErrorCode.Name(data.error_code)
        except (AttributeError, ValueError):
            continue
        if code in ("ERROR_NEEDS_FLEX_OPS", "ERROR_NEEDS_CUSTOM_OPS"):
            names.append(data.operator.name.removeprefix("tf.") or "?")
    if not names and type(exc).__name__ == "ConverterError":  # a converter that fills no error data
        names = re.findall(r"'tf\.(\w+)' op is neither a custom op nor a flex op", str(exc))
    return sorted(set(names))


def quantize_matmuls_only(converter, float_flatbuffer, representative, int8_ops=INT8_MATMUL_OPS):
    """The "int8_matmul" flatbuffer: calibrated int8 for the op types in INT8_MATMUL_OPS, float for the rest.

    Args:
        converter: a TFLiteConverter of the model with `optimizations` and `representative_dataset` set.
        float_flatbuffer: the same model converted to float32; its op types are the ones to consider.
        representative: the calibration generator function (as `converter.representative_dataset`).
        int8_ops: the op types to quantise (`benchmarks/int8_ops.py` tries more than the recipe's).

    The converter's way to keep op types float is the quantization debugger's deny list; the op types to deny
    are read from the model's own float conversion, so a new layer's ops stay float until they are listed.
    """
    import tensorflow as tf

    float_ops = set(read_ops(float_flatbuffer))
    options = tf.lite.experimental.QuantizationDebugOptions(denylisted_ops=sorted(float_ops - set(int8_ops)))
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=converter, debug_dataset=representative, debug_options=options
    )
    return debugger.get_nondebug_quantized_model()


def _fixed_size(model):
    # Imported here: `python -m export` checks --quantize with this module before Keras loads (keras_vit/_startup.py).
    from keras_vit.models.vision_transformer import fixed_size_model

    return fixed_size_model(model)
