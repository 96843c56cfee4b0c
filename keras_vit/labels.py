"""Class names for predictions: the ImageNet label spaces of the released heads (read on first use), made unique
within each (docs/pretrained_labels.md), and `decode_predictions`."""

import collections
import functools
import importlib.resources

import numpy as np

# Output count of the released heads -> their label space. Every released ImageNet-1k head orders its 1,000
# classes by sorted WordNet id; the ImageNet-21k heads (vit_jax, AugReg, timm's `in21k` tags) have 21,843 outputs.
LABEL_SPACES = {"imagenet1k": 1000, "imagenet21k": 21843}


@functools.cache
def _rows(label_space):
    if label_space not in LABEL_SPACES:
        raise ValueError(f"Unknown label space {label_space!r}. Use one of {sorted(LABEL_SPACES)}.")
    text = importlib.resources.files("keras_vit").joinpath("data", f"{label_space}_labels.tsv").read_text("utf-8")
    rows = []
    for line in text.splitlines():
        synset, lemmas = line.split("\t")
        rows.append((synset, tuple(lemma.strip() for lemma in lemmas.split(","))))
    if len(rows) != LABEL_SPACES[label_space]:  # a damaged install: say so rather than mislabel every output
        raise ValueError(
            f"keras_vit/data/{label_space}_labels.tsv has {len(rows)} classes, expected {LABEL_SPACES[label_space]}; "
            "reinstall keras-vit."
        )
    return tuple(rows)


def imagenet_synsets(label_space="imagenet1k"):
    """The WordNet ids of a label space in output order, e.g. `imagenet_synsets()[0] == "n01440764"`.

    Args:
        label_space: "imagenet1k" (1,000 classes) or "imagenet21k" (21,843 classes).

    Returns:
        A tuple of strings, one per output.
    """
    return tuple(synset for synset, _ in _rows(label_space))


def imagenet_lemmas(label_space="imagenet1k"):
    """Every WordNet lemma of each class in output order, e.g. `("tench", "Tinca tinca")` for output 0.

    Args:
        label_space: "imagenet1k" or "imagenet21k".

    Returns:
        A tuple (one entry per output) of tuples of strings.
    """
    return tuple(lemmas for _, lemmas in _rows(label_space))


@functools.cache
def imagenet_class_names(label_space="imagenet1k"):
    """Short, unique display names of a label space in output order (see the module docstring for the rule).

    Args:
        label_space: "imagenet1k" (1,000 classes) or "imagenet21k" (21,843 classes).

    Returns:
        A tuple of strings, one per output: `imagenet_class_names()[0] == "tench"`.

    Example:
    ```python
    model = keras_vit.create_model("B/16", class_names=keras_vit.imagenet_class_names("imagenet1k"))
    ```
    """
    rows = _rows(label_space)
    first = collections.Counter(lemmas[0] for _, lemmas in rows)
    names = []
    for synset, lemmas in rows:
        name = lemmas[0]
        if first[name] > 1:
            other = next((lemma for lemma in lemmas[1:] if lemma not in first), None)
            name = f"{name} ({other})" if other else f"{name} ({synset})"
        names.append(name)
    # Two synsets sharing both their first and their second lemma would still collide: the WordNet id decides.
    taken = collections.Counter(names)
    names = [f"{lemmas[0]} ({synset})" if taken[n] > 1 else n for n, (synset, lemmas) in zip(names, rows)]
    return tuple(names)


def label_space_for(num_classes):
    """The label space of a released head with `num_classes` outputs ("imagenet1k", "imagenet21k"), or None."""
    return next((space for space, count in LABEL_SPACES.items() if count == num_classes), None)


def class_names_for(num_classes):
    """The display names of the released heads with `num_classes` outputs (1,000 or 21,843), or None.

    What the pretrained loaders use when a checkpoint carries no names of its own.
    """
    space = label_space_for(num_classes)
    return None if space is None else imagenet_class_names(space)


class Prediction(collections.namedtuple("Prediction", ["index", "name", "score"])):
    """One of an image's top classes: its output `index` (int), its `name` (str) and its `score` (float)."""

    __slots__ = ()


def decode_predictions(outputs, top_k=5, class_names=None, from_logits=True):
    """The `top_k` classes of each image, best first, with their names and scores.

    Like `keras.applications.imagenet_utils.decode_predictions`, but for any label space, and its tuples start
    with the output index instead of a WordNet id (`keras_vit.imagenet_synsets(space)[index]` gives that).

    Args:
        outputs: (batch, classes) or (classes,) logits or probabilities (numpy or a backend tensor).
        top_k: classes returned per image (at most the number of classes).
        class_names: a list of names (one per class), a Keras model (its `class_names`), a label space
            ("imagenet1k", "imagenet21k"), or None: the ImageNet names when there are 1,000 or 21,843 classes
            (as for a model without names of its own); any other class count then needs names.
        from_logits: True (the default; keras-vit models output logits): scores are softmax probabilities.
            False: `outputs` are probabilities already (e.g. a TFLite export's output) and are returned as given.

    Returns:
        One list per image of `Prediction(index, name, score)` named tuples, highest score first (ties in index
        order).

    Example:
    ```python
    for index, name, probability in keras_vit.decode_predictions(model(images), 3, model)[0]:
        print(f"{index:5d}  {probability:.3f}  {name}")
    ```
    """
    scores = _as_numpy(outputs)
    if scores.ndim == 1:
        scores = scores[None]
    if scores.ndim != 2 or scores.shape[-1] == 0:
        raise ValueError(
            f"decode_predictions expects outputs shaped (batch, classes) or (classes,). Received shape {scores.shape}."
        )
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer. Received: {top_k!r}")
    num_classes = scores.shape[-1]
    names = _names(class_names, num_classes)
    if from_logits:
        scores = softmax(scores)
    k = min(int(top_k), num_classes)
    results = []
    for row in scores:
        top = np.argsort(-row, kind="stable")[:k]
        results.append([Prediction(int(i), names[i], float(row[i])) for i in top])
    return results


def softmax(logits):
    """The softmax over the last axis of a numpy array (float64), shifted by the maximum so it cannot overflow."""
    z = np.asarray(logits, np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _as_numpy(outputs):
    import keras

    if keras.ops.is_tensor(outputs):
        outputs = keras.ops.convert_to_numpy(outputs)
    scores = np.asarray(outputs, dtype=np.float64)
    if not np.isfinite(scores).all():
        raise ValueError("decode_predictions got NaN or infinite outputs; check the model's inputs and weights.")
    return scores


def _names(class_names, num_classes):
    import keras

    source = "class_names"
    if isinstance(class_names, keras.Model):
        source = f"model {class_names.name!r}'s class_names"
        class_names = getattr(class_names, "class_names", None)
    if isinstance(class_names, str):
        space = class_names
        names = imagenet_class_names(space)
        if len(names) != num_classes:
            raise ValueError(f"{space!r} has {len(names)} classes; the outputs have {num_classes}.")
        return names
    if class_names is None:
        names = class_names_for(num_classes)
        if names is None:
            raise ValueError(
                f"No class names for {num_classes} classes (only 1,000 and 21,843 outputs default to ImageNet's). "
                "Pass class_names=model (one built with class_names=...) or a list of names."
            )
        return names
    names = [str(name) for name in class_names]
    if len(names) != num_classes:
        raise ValueError(f"{source} has {len(names)} names for outputs of {num_classes} classes; they must match.")
    return names
