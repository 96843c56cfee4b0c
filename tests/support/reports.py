"""A benchmark report as `python -m benchmarks` writes it, cut down to what the summary reads."""


def fake_report(rounds):
    """A report of `rounds` ({measurement: {implementation: figure}} per round) and fixed spec and FLOPs."""
    return {
        "spec": {"batch": 32},
        "flops": {"forward_per_image": 2.5e9, "train_per_image": 7.5e9},
        "implementations": {"keras-vit": {"tflite": {"full_int8": {"top1_agreement": 1.0}}}},
        "rounds": rounds,
    }
