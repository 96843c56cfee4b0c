"""The `--set key=value` parser: each value's text converted by its option's annotation, then range-checked."""

import ast
import contextlib
import types
import typing
from typing import Literal, Union

from .config import TrainConfig
from .fields import MODEL_KEYS_SET_ELSEWHERE, matches, model_option_types, type_error
from .ranges import check_range


def field_types():
    """{field: type annotation} of `TrainConfig`, read from the dataclass (new fields are covered as added)."""
    return typing.get_type_hints(TrainConfig)


def _literal(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def parse_typed(text, annotation, name="value"):
    """A `--set` value's text converted to its field's type, or a `ValueError` naming the field and the type.

    Booleans take true/false in any case; integers take integer literals; floats take any number; strings take
    the text as it is (quotes optional); `Optional` fields take None; tuples and dicts take Python literals.
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    stripped = text.strip()
    if annotation in (object, typing.Any):
        return _literal(stripped)
    if origin in (Union, types.UnionType):
        return _parse_union(stripped, annotation, name)
    if origin is Literal:
        for option in args:
            if stripped == str(option) or _literal(stripped) == option:
                return option
        raise type_error(name, annotation, stripped)
    if annotation is bool:
        if stripped.lower() in ("true", "false"):
            return stripped.lower() == "true"
        raise type_error(name, annotation, stripped)
    if annotation is str:
        value = _literal(stripped)
        return value if isinstance(value, str) else stripped  # "'x'" -> x; 123 -> "123", a name like any other
    value = _literal(stripped)
    if annotation is float and isinstance(value, str):
        with contextlib.suppress(ValueError):  # float() also reads inf and nan, which literal_eval does not
            value = float(stripped)
    if not matches(value, annotation):
        raise type_error(name, annotation, stripped)
    if annotation is float:
        return float(value)
    if origin in (tuple,) or annotation is tuple:
        return tuple(value)
    return value


def _parse_union(stripped, annotation, name):
    args = typing.get_args(annotation)
    if type(None) in args and stripped.lower() in ("none", "null"):
        return None
    for member in args:
        if member is type(None):
            continue
        try:
            return parse_typed(stripped, member, name)
        except ValueError:
            continue
    raise type_error(name, annotation, stripped)


def parse_overrides(items):
    """["learning_rate=1e-3", "model.dropout_rate=0.1"] -> {"learning_rate": 0.001, "model.dropout_rate": 0.1}.

    Each value is converted to its `TrainConfig` field's type (`model.NAME`: its `keras_vit.ViTConfig` field's),
    so `jit_compile=false` is False and `epochs=ten` is an error that names the field and the type expected.
    """
    from keras_vit._names import did_you_mean

    hints = field_types()
    overrides = {}
    for item in items or ():
        if "=" not in item:
            raise ValueError(f"--set expects key=value. Received: {item!r} (e.g. --set learning_rate=3e-3)")
        key, value = (part.strip() for part in item.split("=", 1))
        if key.startswith("model."):
            overrides[key] = _parse_model_option(key, value, item)
        elif key in hints:
            overrides[key] = parse_typed(value, hints[key], key)
        else:
            raise ValueError(
                f"Unknown training option {key!r} in --set {item}.{did_you_mean(key, hints)} Known options: "
                f"{', '.join(sorted(hints))}, or model.NAME for a keras_vit.create_model override."
            )
    for key, value in overrides.items():  # at parse time: a bad value stops the run before any work
        check_range(key, value)
    return overrides


def _parse_model_option(key, value, item):
    from keras_vit._names import did_you_mean

    option = key[len("model.") :]
    if option in MODEL_KEYS_SET_ELSEWHERE:
        raise ValueError(f"--set {key}: {MODEL_KEYS_SET_ELSEWHERE[option]}.")
    model_hints = model_option_types()
    if option not in model_hints:
        hint = did_you_mean(key, [f"model.{k}" for k in model_hints])
        raise ValueError(
            f"Unknown model option {key!r} in --set {item}.{hint} Known model options: "
            f"{', '.join(sorted(model_hints))}."
        )
    return parse_typed(value, model_hints[option], key)
