"""Reads a TFLite flatbuffer's operators and checks them against the GPU delegate's documented limits.

The op list comes from the flatbuffer itself (TFLite's schema reader shipped with TensorFlow), not from the
converter's word. The GPU check is static: it applies the rules of TensorFlow's GPU-compatibility checker
(`tensorflow/lite/tools/versioning/gpu_compatibility.cc`: the supported builtin ops and their shape and
constant-input conditions) plus the delegate's BHWC layout (at most 4-D tensors) and its need for static
shapes. It predicts which ops the delegate would leave on the CPU; it does not run a GPU.
"""

import collections

# Builtin ops the GPU delegate accepts (gpu_compatibility.cc, TF 2.21), subject to the checks below.
GPU_SUPPORTED_OPS = frozenset(
    [
        "ABS",
        "ADD",
        "ADD_N",
        "AVERAGE_POOL_2D",
        "BATCH_MATMUL",
        "CAST",
        "CONCATENATION",
        "CONV_2D",
        "COS",
        "CUMSUM",
        "DENSIFY",
        "DEPTHWISE_CONV_2D",
        "DEPTH_TO_SPACE",
        "DEQUANTIZE",
        "DIV",
        "ELU",
        "EQUAL",
        "EXP",
        "FLOOR",
        "FLOOR_DIV",
        "FLOOR_MOD",
        "FULLY_CONNECTED",
        "GATHER",
        "GELU",
        "GREATER",
        "GREATER_EQUAL",
        "HARD_SWISH",
        "LEAKY_RELU",
        "LESS",
        "LESS_EQUAL",
        "LOG",
        "LOGICAL_AND",
        "LOGISTIC",
        "LSTM",
        "MAXIMUM",
        "MAX_POOL_2D",
        "MEAN",
        "MINIMUM",
        "MIRROR_PAD",
        "MUL",
        "NEG",
        "NOT_EQUAL",
        "ONE_HOT",
        "PACK",
        "PAD",
        "PADV2",
        "POW",
        "PRELU",
        "QUANTIZE",
        "REDUCE_MAX",
        "REDUCE_MIN",
        "REDUCE_PROD",
        "RELU",
        "RELU6",
        "RELU_N1_TO_1",
        "RESHAPE",
        "RESIZE_BILINEAR",
        "RESIZE_NEAREST_NEIGHBOR",
        "RSQRT",
        "SELECT",
        "SELECT_V2",
        "SIGN",
        "SIN",
        "SLICE",
        "SOFTMAX",
        "SPACE_TO_DEPTH",
        "SPLIT",
        "SPLIT_V",
        "SQRT",
        "SQUARE",
        "SQUARED_DIFFERENCE",
        "STRIDED_SLICE",
        "SUB",
        "SUM",
        "TANH",
        "TILE",
        "TRANSPOSE",
        "TRANSPOSE_CONV",
    ]
)
_AXES_MUST_BE_CONST = {"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"}
_ONE_RUNTIME_INPUT = {"RESHAPE", "TRANSPOSE", "TILE", "QUANTIZE"}


def _schema():
    from tensorflow.lite.python import schema_py_generated as schema

    return schema


def _op_names():
    schema = _schema()
    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def parse(flatbuffer):
    """Unpacks a flatbuffer into TFLite's object API (`ModelT`)."""
    return _schema().ModelT.InitFromPackedBuf(bytearray(flatbuffer), 0)


def _op_name(model, op, names):
    code = model.operatorCodes[op.opcodeIndex]
    # Old files keep small codes in deprecatedBuiltinCode; new ones in builtinCode (the larger of the two wins).
    builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
    if builtin == _schema().BuiltinOperator.CUSTOM:
        custom = code.customCode.decode() if isinstance(code.customCode, bytes) else str(code.customCode)
        return f"CUSTOM:{custom}"
    return names.get(builtin, f"UNKNOWN_{builtin}")


def read_ops(flatbuffer):
    """Returns `{op_name: count}` over all subgraphs; custom ops appear as `CUSTOM:<name>` (Flex ops too)."""
    model, names = parse(flatbuffer), _op_names()
    counts = collections.Counter(_op_name(model, op, names) for sg in model.subgraphs for op in sg.operators)
    return dict(sorted(counts.items()))


def non_builtin_ops(ops):
    """Names in an op list that are not TFLite builtins (custom ops, which includes every Flex/TF op)."""
    return sorted(name for name in ops if name.startswith(("CUSTOM", "UNKNOWN", "Flex")))


def gpu_delegate_issues(flatbuffer):
    """Predicts which ops the TFLite GPU delegate would reject, with the reason.

    Returns:
        `{op_name: [reason, ...]}` for the rejected ops (an empty dict means every op passes the checks).
    """
    schema = _schema()
    model, names = parse(flatbuffer), _op_names()
    issues = collections.defaultdict(set)
    for sg in model.subgraphs:
        tensors = sg.tensors

        def is_const(i, tensors=tensors):  # bound now: called within this iteration only
            buffer = model.buffers[tensors[i].buffer] if tensors[i].buffer < len(model.buffers) else None
            return buffer is not None and (
                (buffer.data is not None and len(buffer.data) > 0) or bool(getattr(buffer, "size", 0))
            )

        def shape(i, tensors=tensors):
            t = tensors[i]
            sig = t.shapeSignature if t.shapeSignature is not None else t.shape
            return [] if sig is None else [int(d) for d in sig]

        for op in sg.operators:
            name = _op_name(model, op, names)
            inputs = [i for i in (op.inputs if op.inputs is not None else []) if i >= 0]
            outputs = list(op.outputs if op.outputs is not None else [])
            runtime = [i for i in inputs if not is_const(i)]
            if name.startswith("CUSTOM") or name not in GPU_SUPPORTED_OPS:
                issues[name].add("not supported by the GPU delegate")
                continue
            ranks = [len(shape(i)) for i in runtime + outputs]
            if any(r > 4 for r in ranks):
                issues[name].add(f"{max(ranks)}-D tensor (the GPU delegate works on at most 4-D BHWC tensors)")
            if any(d < 0 for i in runtime + outputs for d in shape(i)):
                issues[name].add("dynamic shape (the GPU delegate needs static shapes; export with batch 1)")
            if name in _ONE_RUNTIME_INPUT and len(runtime) != 1:
                issues[name].add(f"{len(runtime)} runtime inputs (needs 1: e.g. a reshape to a computed shape)")
            if name in _AXES_MUST_BE_CONST and len(inputs) > 1 and not is_const(inputs[1]):
                issues[name].add("axes computed at run time (must be constant)")
            if name in ("STRIDED_SLICE", "SLICE"):
                if len(shape(inputs[0])) not in (3, 4):
                    issues[name].add(f"{len(shape(inputs[0]))}-D input (only 3-D or 4-D inputs are supported)")
                options = op.builtinOptions
                masks = options is not None and (options.shrinkAxisMask or options.ellipsisMask or options.newAxisMask)
                if name == "STRIDED_SLICE" and masks:
                    issues[name].add("shrink/ellipsis/new-axis mask (unsupported)")
            if name == "GATHER" and tensors[inputs[0]].type == schema.TensorType.INT32:
                issues[name].add("int32 data input (unsupported)")
            if name == "FULLY_CONNECTED" and inputs and is_const(inputs[0]):
                issues[name].add("constant data input (unsupported)")
            if name == "SOFTMAX" and op.builtinOptions is not None and op.builtinOptions.beta != 1:
                issues[name].add("beta != 1 (unsupported)")
    return {name: sorted(reasons) for name, reasons in sorted(issues.items())}
