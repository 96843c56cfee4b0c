"""keras_vit.labels: the shipped ImageNet class lists, checked against reference copies in tests/fixtures/labels
read independently, and decode_predictions on hand-made logits."""

import collections
import csv
import hashlib
import importlib.resources
import runpy
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import labels
from tests import support

REFERENCE = support.FIXTURES / "labels"  # see its README.md
PACKAGE_DATA = Path(keras_vit.__file__).parent / "data"
# The shared reference files' sha256 (tests/fixtures/labels/README.md): the 21k list is pinned by it, not copied.
REFERENCE_SHA256 = {
    "imagenet1k": "c98cf8e050b2f67f824762ebdb5bcf683adc7955382b9ff8b1c0f49548bb449b",
    "imagenet21k": "bae06dbf80f6412857650ac93e33b651724a48b2813fe964733e9567ddc08a80",
}


def _parse(lines):
    return [
        (synset, [lemma.strip() for lemma in lemmas.split(",")]) for synset, lemmas in csv.reader(lines, delimiter="\t")
    ]


def _reference_rows(space):
    """The reference list's rows: the 1k copy itself; for 21k, the shipped file once its bytes are shown to be the
    reference's (sha256), with the kept sample rows checked against it."""
    if space == "imagenet1k":
        data = (REFERENCE / "imagenet1k_labels.tsv").read_bytes()
        assert hashlib.sha256(data).hexdigest() == REFERENCE_SHA256[space]
        return _parse(data.decode("utf-8").splitlines())
    data = (PACKAGE_DATA / "imagenet21k_labels.tsv").read_bytes()
    assert hashlib.sha256(data).hexdigest() == REFERENCE_SHA256[space]
    rows = _parse(data.decode("utf-8").splitlines())
    with open(REFERENCE / "imagenet21k_labels_sample.tsv", newline="", encoding="utf-8") as f:
        sample = list(csv.reader(f, delimiter="\t"))
    assert len(sample) == 228 and int(sample[-1][0]) == len(rows) - 1
    for index, synset, lemmas in sample:
        assert rows[int(index)] == (synset, [lemma.strip() for lemma in lemmas.split(",")]), index
    return rows


@pytest.mark.parametrize("space, count", [("imagenet1k", 1000), ("imagenet21k", 21843)])
def test_class_lists_match_the_reference_files(space, count):
    rows = _reference_rows(space)
    assert len(rows) == count
    assert hashlib.sha256((PACKAGE_DATA / f"{space}_labels.tsv").read_bytes()).hexdigest() == REFERENCE_SHA256[space]
    assert list(keras_vit.imagenet_synsets(space)) == [synset for synset, _ in rows]
    assert [list(lemmas) for lemmas in labels.imagenet_lemmas(space)] == [lemmas for _, lemmas in rows]
    names = keras_vit.imagenet_class_names(space)
    assert len(names) == count and len(set(names)) == count  # every output has its own name
    firsts = collections.Counter(lemmas[0] for _, lemmas in rows)
    for name, (synset, lemmas) in zip(names, rows):
        if firsts[lemmas[0]] == 1:
            assert name == lemmas[0]
        else:  # a shared first lemma, told apart by another of its lemmas or its WordNet id
            assert name.startswith(f"{lemmas[0]} (") and name[len(lemmas[0]) + 2 : -1] in [*lemmas[1:], synset]
    assert labels.LABEL_SPACES[space] == count and labels.label_space_for(count) == space
    assert labels.class_names_for(count) == names


def test_known_rows():
    names1k, synsets1k = keras_vit.imagenet_class_names("imagenet1k"), keras_vit.imagenet_synsets("imagenet1k")
    assert (synsets1k[0], names1k[0]) == ("n01440764", "tench")
    assert (synsets1k[1], names1k[1]) == ("n01443537", "goldfish")
    assert (synsets1k[999], names1k[999]) == ("n15075141", "toilet tissue")
    # ImageNet-1k's two cranes (bird, machine) and two maillots; the second maillot has a free second lemma.
    assert (names1k[134], names1k[517]) == ("crane (n02012849)", "crane (n03126707)")
    assert (names1k[638], names1k[639]) == ("maillot (n03710637)", "maillot (tank suit)")
    names21k, synsets21k = keras_vit.imagenet_class_names("imagenet21k"), keras_vit.imagenet_synsets("imagenet21k")
    assert (synsets21k[0], names21k[0]) == ("n00004475", "organism")
    assert (synsets21k[359], names21k[359]) == ("n01440764", "tench")
    assert (synsets21k[21842], names21k[21842]) == ("n15102894", "knothole")
    assert labels.label_space_for(10) is None and labels.class_names_for(10) is None
    with pytest.raises(ValueError, match="Unknown label space 'imagenet'"):
        keras_vit.imagenet_class_names("imagenet")


def test_importing_the_module_reads_no_class_list(monkeypatch):
    """The lists are read on first use: running the module's top level (what an import does) opens none."""
    reads = []
    real = importlib.resources.files
    monkeypatch.setattr(importlib.resources, "files", lambda package: reads.append(package) or real(package))
    fresh = runpy.run_path(labels.__file__)  # a new module namespace, so no cached list
    assert reads == []
    assert fresh["imagenet_class_names"]("imagenet1k")[0] == "tench" and reads == ["keras_vit"]


def test_decode_predictions_on_hand_made_logits():
    # softmax(log p) = p: the probabilities are known exactly.
    logits = np.log([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.4, 0.1]])
    decoded = keras_vit.decode_predictions(logits, top_k=2, class_names=["a", "b", "c", "d"])
    assert [[(i, n) for i, n, _ in image] for image in decoded] == [[(3, "d"), (2, "c")], [(2, "c"), (0, "a")]]
    np.testing.assert_allclose([[s for *_, s in image] for image in decoded], [[0.4, 0.3], [0.4, 0.25]], rtol=1e-12)
    assert decoded[0][0].index == 3 and decoded[0][0].name == "d"  # named fields as well as a tuple
    # Ties keep index order; top_k is capped at the class count; a 1-D vector is one image.
    (tied,) = keras_vit.decode_predictions(np.zeros(3), top_k=9, class_names=["x", "y", "z"])
    assert [p.index for p in tied] == [0, 1, 2] and all(p.score == pytest.approx(1 / 3) for p in tied)
    # Probabilities pass through as given; a backend tensor works as numpy does.
    probs = keras.ops.convert_to_tensor([[0.7, 0.2, 0.1]])
    (top,) = keras_vit.decode_predictions(probs, top_k=1, class_names=["x", "y", "z"], from_logits=False)
    assert top[0].index == 0 and top[0].score == pytest.approx(0.7)
    # Large logits do not overflow.
    (big,) = keras_vit.decode_predictions([[1000.0, 1000.0 + np.log(3.0)]], 1, ["p", "q"])
    assert big[0] == (1, "q", pytest.approx(0.75))


def test_decode_predictions_names_from_a_model_or_imagenet():
    names = [f"kind {i}" for i in range(10)]
    model = keras_vit.create_model("testing", class_names=names)
    logits = np.arange(10.0)[None]
    assert [p.name for p in keras_vit.decode_predictions(logits, 3, model)[0]] == ["kind 9", "kind 8", "kind 7"]
    with pytest.raises(ValueError, match="No class names for 10 classes"):
        keras_vit.decode_predictions(logits, 3, keras_vit.create_model("testing"))
    one_hot = np.zeros((1, 1000))
    one_hot[0, 1] = 20.0
    ((index, name, score),) = keras_vit.decode_predictions(one_hot, 1)[0]  # 1,000 outputs: ImageNet-1k by default
    assert (index, name) == (1, "goldfish") and score == pytest.approx(1 / (1 + 999 * np.exp(-20.0)))
    assert keras_vit.decode_predictions(np.zeros((1, 21843)), 1, "imagenet21k")[0][0].name == "organism"


def test_decode_predictions_bad_input():
    with pytest.raises(ValueError, match="class_names has 2 names for outputs of 3 classes"):
        keras_vit.decode_predictions(np.zeros((1, 3)), 1, ["a", "b"])
    with pytest.raises(ValueError, match="'imagenet1k' has 1000 classes; the outputs have 3"):
        keras_vit.decode_predictions(np.zeros((1, 3)), 1, "imagenet1k")
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        keras_vit.decode_predictions(np.zeros((1, 3)), 0, ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"shaped \(batch, classes\).*\(1, 2, 3\)"):
        keras_vit.decode_predictions(np.zeros((1, 2, 3)), 1, ["a", "b", "c"])
    with pytest.raises(ValueError, match="NaN or infinite"):
        keras_vit.decode_predictions([[np.nan, 0.0]], 1, ["a", "b"])


def test_package_data_is_shipped():
    import tomllib
    from fnmatch import fnmatch

    pyproject = tomllib.loads((support.ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["keras_vit"]
    for space in labels.LABEL_SPACES:
        assert any(fnmatch(f"data/{space}_labels.tsv", pattern) for pattern in patterns), patterns
