"""What each training option accepts, read from `TrainConfig`'s annotations (and `ViTConfig`'s for `model.NAME`):
the one checker of types and choices."""

import dataclasses
import functools
import numbers
import os
import types
import typing
from typing import Literal, Union

# `model.NAME` keys that `build_model` passes to `create_model` itself, from the top-level fields.
MODEL_KEYS_SET_ELSEWHERE = {
    "image_size": "set image_size itself (--set image_size=224), not model.image_size",
    "num_classes": "the class count comes from the dataset; it cannot be overridden",
    "variant": "set variant itself (--set variant=Ti/16), not model.variant",
}


@functools.cache
def model_option_types():
    """{option: type annotation} of the `model.NAME` overrides: `keras_vit.ViTConfig`'s fields, plus `name`."""
    from keras_vit.models.configs import ViTConfig  # late: importing keras is slow, and --help should not wait

    hints = dict(typing.get_type_hints(ViTConfig))
    hints["name"] = str
    for key in MODEL_KEYS_SET_ELSEWHERE:
        hints.pop(key, None)
    return hints


def choices(annotation):
    """The values a `Literal` annotation (or a union holding `Literal`s, None or bool) lists, in order; () if none.

    `Literal["a", "b"]` -> ("a", "b"); `Literal["a"] | None` -> ("a", None); `bool | Literal["auto"]` ->
    (True, False, "auto"); `int` -> ().
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return args
    if origin not in (Union, types.UnionType) or not any(typing.get_origin(a) is Literal for a in args):
        return ()
    found = []
    for member in args:
        found += [True, False] if member is bool else [None] if member is type(None) else list(choices(member))
    return tuple(found)


def describe_type(annotation):
    """Words for what a field accepts: `Optional[int]` -> "an integer or None"."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        words = [describe_type(a) for a in args if a is not type(None)]
        return " or ".join(words + (["None"] if type(None) in args else []))
    if origin is Literal:
        return " or ".join(repr(a) for a in args)
    if origin in (tuple, list) or annotation in (tuple, list):
        return "a tuple such as (2, 10)"
    if origin is dict or annotation is dict:
        return "a dict such as {'dropout_rate': 0.1}"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def matches(value, annotation):
    """Whether a Python value fits a field's annotation (ints fit floats; lists fit tuples; bools fit only bool)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (object, typing.Any):
        return True
    if annotation is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if annotation is bool:
        return isinstance(value, (bool, _numpy_bool()))
    if annotation is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, (bool, _numpy_bool()))
    if annotation is float:
        return isinstance(value, numbers.Real) and not isinstance(value, (bool, _numpy_bool()))
    if annotation is str:
        return isinstance(value, (str, os.PathLike))
    if origin in (tuple, list) or annotation in (tuple, list):
        if not isinstance(value, (tuple, list)):
            return False
        if args and not (len(args) == 2 and args[1] is Ellipsis):
            return len(args) == len(value) and all(matches(v, a) for v, a in zip(value, args))
        return not args or all(matches(v, args[0]) for v in value)
    if origin is dict or annotation is dict:
        return isinstance(value, dict)
    return isinstance(value, origin or annotation) if isinstance(origin or annotation, type) else True


def _numpy_bool():
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with keras
        return ()
    return np.bool_


def type_error(name, annotation, received):
    """The one-line error of a value (or `--set` text) that does not fit its option's annotation."""
    return ValueError(
        f"{name} expects {describe_type(annotation)}. Received: {name}={received!r}"
        + (f" ({type(received).__name__})" if not isinstance(received, str) else "")
    )


def choice_error(name, annotation, received):
    """The one-line error of a value outside an option's choices (a `Literal`, with None or bool beside it)."""
    options = choices(annotation)
    if any(isinstance(option, bool) for option in options):  # jit_compile: True, False or 'auto'
        words = [repr(option) for option in options]
        return ValueError(f"{name} must be {', '.join(words[:-1])} or {words[-1]}. Received: {name}={received!r}")
    options = sorted(options, key=lambda option: option is not None)  # "Use one of: None, default, ..."
    return ValueError(f"Unknown {name} {received!r}. Use one of: {', '.join(map(str, options))}.")


def check_fields(config):
    """Raises the one-line error of the first field of a dataclass instance that does not fit its annotation.

    A field with choices (`choices`) gets `choice_error`, any other `type_error`; a `model` dict is checked
    against `model_option_types`. A path (`os.PathLike`) given for a string field is kept as the string it names.
    """
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        annotation = hints[field.name]
        if not matches(value, annotation):
            raise (choice_error if choices(annotation) else type_error)(field.name, annotation, value)
        if isinstance(value, os.PathLike):  # a pathlib.Path for init or data_dir: kept as the string it names
            object.__setattr__(config, field.name, os.fspath(value))
    _check_model_options(getattr(config, "model", {}))


def _check_model_options(model):
    from keras_vit._names import did_you_mean

    model_hints = model_option_types()
    for key, value in model.items():
        if key in MODEL_KEYS_SET_ELSEWHERE:
            raise ValueError(f"model.{key} cannot be overridden: {MODEL_KEYS_SET_ELSEWHERE[key]}.")
        if key not in model_hints:
            raise ValueError(
                f"Unknown model option model.{key}.{did_you_mean(key, model_hints)} Known model options: "
                f"{', '.join(sorted(model_hints))} "
                f"(keras_vit.create_model's overrides)."
            )
        if not matches(value, model_hints[key]):
            raise type_error(f"model.{key}", model_hints[key], value)
