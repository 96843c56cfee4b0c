"""Errors raised by the export package."""

import numbers


class ExportError(Exception):
    """A request the export package cannot carry out: bad input, unknown option, missing data."""


class VerificationError(ExportError):
    """An exported artifact disagrees with the Keras model beyond its stated tolerance."""


def check_choices(values, allowed, what, example):
    """A list (or comma-separated string) of option values, each one of `allowed`; a clear error otherwise."""
    if isinstance(values, str):
        values = [v.strip() for v in values.split(",") if v.strip()]
    values = list(values)
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
        from keras_vit._names import did_you_mean

        hints = "".join(did_you_mean(v, allowed) for v in unknown)
        raise ExportError(
            f"Unknown {what} {unknown or values}.{hints} Choose from {', '.join(allowed)} (e.g. {example})."
        )
    return values


def check_count(name, value, minimum, flag=None):
    """An integer option at least `minimum` (`--latency-runs 0` would give a NaN median); a clear error otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        how = f" ({flag})" if flag else ""
        raise ExportError(f"{name}{how} must be an integer >= {minimum}. Received: {value!r}.")
    return int(value)
