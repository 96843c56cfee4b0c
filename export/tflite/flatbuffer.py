"""The operators of a TFLite flatbuffer, read from the file itself with TensorFlow's schema bindings."""

import collections


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
