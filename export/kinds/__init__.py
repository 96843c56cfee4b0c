"""The kinds of model export/ exports, each a module with the same names (docs/export.md lists them): a classifier,
an image embedder, feature maps. A model's kind is the first of `KINDS` whose `matches(model)` holds."""

from . import classifier, embedder, feature_maps

KINDS = (feature_maps, embedder, classifier)  # most specific first: every model is a classifier to the last


def kind_of(model):
    """The kind module of `model`."""
    return next(kind for kind in KINDS if kind.matches(model))


def named(name):
    """The kind module whose NAME is `name` (a report's "kind")."""
    return next(kind for kind in KINDS if name == kind.NAME)
