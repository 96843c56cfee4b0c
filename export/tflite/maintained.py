"""The TFLite modes built with ai-edge-quantizer from the float32 flatbuffer: `int8_int16` (int16 activations,
calibrated) and `int4_weights`; both opt-in (docs/export.md has their figures)."""

from ..errors import ExportError

MODES = ("int8_int16", "int4_weights")
CALIBRATED = ("int8_int16",)
SIGNATURE, INPUT = "serving_default", "images"  # what export.tflite's frozen function is converted with


def _recipe(mode):
    from ai_edge_quantizer import recipe

    if mode == "int8_int16":
        return recipe.static_wi8_ai16()
    return recipe.weight_only_wi4_afp32()


def quantize(float_flatbuffer, mode, calibration=None):
    """The `mode` flatbuffer (bytes) of a float32 TFLite model; `calibration`: model-space float32 images
    (N, H, W, 3) for the calibrated mode."""
    from ai_edge_quantizer import quantizer

    if mode not in MODES:
        raise ExportError(f"Unknown ai-edge-quantizer mode {mode!r}. Choose from {', '.join(MODES)}.")
    q = quantizer.Quantizer(bytes(float_flatbuffer), _recipe(mode))
    result = None
    if q.need_calibration:
        if calibration is None or len(calibration) == 0:
            raise ExportError(f"{mode} needs representative images to calibrate (--representative-data PATH).")
        result = q.calibrate({SIGNATURE: [{INPUT: image[None]} for image in calibration]})
    return _inline_buffers(q.quantize(result, enable_progress_report=False).quantized_model)


def _inline_buffers(flatbuffer):
    """The model with every weight inside the flatbuffer. ai-edge-quantizer 0.10 stores weights after it (buffers
    with an offset and size into the file); the metadata writer (export/tflite/metadata.py) re-packs the model from its
    tables, which keeps inline data only, and LiteRT then refuses the file ("Constant buffer 1 specified an out of
    range offset")."""
    import flatbuffers
    import numpy as np
    from tensorflow.lite.python import schema_py_generated as schema

    data = bytes(flatbuffer)
    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    outside = [b for b in model.buffers or [] if (getattr(b, "offset", 0) or 0) > 1]
    if not outside:
        return data
    for buffer in outside:
        buffer.data = np.frombuffer(data[buffer.offset : buffer.offset + buffer.size], np.uint8)
        buffer.offset = buffer.size = 0
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
