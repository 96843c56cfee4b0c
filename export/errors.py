"""Errors raised by the export package."""


class ExportError(Exception):
    """A request the export package cannot carry out: bad input, unknown option, missing data."""


class VerificationError(ExportError):
    """An exported artifact disagrees with the Keras model beyond its stated tolerance."""
