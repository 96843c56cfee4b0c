"""benchmarks.commits: the per-form measurement, the program comparison and the ratios over rounds."""

import argparse

import keras
import pytest

from benchmarks import commits


@pytest.mark.slow
def test_a_measurement_times_the_form_it_names():
    assert commits.measure("infer", "testing", 32, 2, 1) > 0
    assert commits.measure("train", "testing", 32, 2, 1) > 0


@pytest.mark.slow
@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="the graphs are TensorFlow's")
def test_the_programs_count_the_graphs_ops():
    counts = commits.programs("testing", 32, 2)
    train, infer = counts["tf_train_graph"], counts["tf_infer_graph"]
    # testing: 2 blocks; every block has at least the attention's 4 projections and 2 products and 2 MLP matmuls.
    products = sum(infer.get(op, 0) for op in ("MatMul", "BatchMatMulV2", "Einsum"))
    assert products >= 2 * 8
    assert sum(train.values()) > sum(infer.values())  # the backward pass and the loss


def test_ratios_are_new_over_old_per_round_and_rounds_alternate(monkeypatch):
    calls = []

    def child(tree, backend, argv, python):
        calls.append((tree, backend, argv[1] if argv[0] == "--measure" else argv[0]))
        if argv[0] == "--programs":
            return {"g": {"MatMul": 2, "Add": 1}} if tree == "old" else {"g": {"MatMul": 2, "BiasAdd": 1}}
        return {"img_s": 10.0 if tree == "old" else 11.0 + len(calls) % 2}

    monkeypatch.setattr(commits, "_child", child)
    args = argparse.Namespace(rounds=2, steps=1, variant="testing", image_size=32, batch=2, torch_python=None)
    report = commits.compare(args, {"old": "old", "new": "new"})
    # Round 1 runs OLD first, round 2 NEW first.
    assert [c[0] for c in calls if c[1:] == ("tensorflow", "train")] == ["old", "new", "new", "old"]
    assert not any(c[1] == "torch" for c in calls)  # no torch Python given: no torch rows
    entry = report["speed"]["tensorflow/train"]
    assert entry["ratios"] == [n / o for n, o in zip(entry["new"], entry["old"])]
    assert entry["min"] <= entry["median"] <= entry["max"]
    assert report["programs"]["g"] == {"ops": [3, 3], "differ": {"Add": [1, 0], "BiasAdd": [0, 1]}}
