"""The ranges of the training options: one table, checked when `--set` parses a value and by `TrainConfig`."""

import dataclasses
import math
import numbers


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric option takes: a finite number (or an integer, by the field's type) within bounds.

    Attributes:
        low, high: the bounds (None: unbounded on that side).
        low_open, high_open: whether the bound itself is excluded.
        none: what None means, for options that take it ("None for no clipping"); None values skip the check.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    none: str | None = None

    def words(self, integer):
        bounds = []
        if self.low is not None:
            bounds.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            bounds.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        text = ("an integer" if integer else "a finite number") + (" " + " and ".join(bounds) if bounds else "")
        return text + (f", or {self.none}" if self.none else "")

    def holds(self, value):
        if not math.isfinite(value):
            return False
        if self.low is not None and not (value > self.low if self.low_open else value >= self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)


_POSITIVE_INT, _NATURAL, _FRACTION = Range(1), Range(0), Range(0, 1, high_open=True)
_POSITIVE = Range(0, low_open=True)


def _crop_area(name, value):
    low, high = value if len(value) == 2 else (None, None)
    if not (isinstance(low, numbers.Real) and isinstance(high, numbers.Real) and 0 < low <= high <= 1):
        raise ValueError(
            f"{name} is (min, max) area fractions with 0 < min <= max <= 1, e.g. (0.05, 1.0). Received: "
            f"{name}={tuple(value)!r}"
        )


def _randaugment(name, value):
    if value is not None and not (
        len(value) == 2 and isinstance(value[0], int) and value[0] >= 1 and _NATURAL.holds(value[1])
    ):
        raise ValueError(
            f"{name} is (num_layers >= 1, magnitude >= 0) on big_vision's 0-10 level scale, e.g. (2, 10), or None. "
            f"Received: {name}={tuple(value)!r}"
        )


# The range of every numeric option, checked as `--set` parses it and again by `TrainConfig` (recipes, Python
# callers). A `Range`, or a function (name, value) that raises for a tuple option. A type error comes first.
RANGES = {
    "holdout_fraction": Range(0, 1, low_open=True, high_open=True),
    "shuffle_buffer": Range(1, none="None for the whole data set"),
    "max_image_bytes": _POSITIVE_INT,
    "image_size": Range(1, none="None for the --init checkpoint's resolution"),
    "batch_size": Range(1, none="None for 512 or the largest power of two the training split holds"),
    "accum_steps": _POSITIVE_INT,
    "max_num_patches": Range(1, none="None for the --init checkpoint's (256 where it states none)"),
    "lora_rank": Range(1, none="None for full fine-tuning"),
    "epochs": _POSITIVE_INT,
    "steps_per_epoch": Range(1, none="None for data set size // batch_size"),
    "learning_rate": _POSITIVE,
    "weight_decay": _NATURAL,
    "beta_1": _FRACTION,
    "beta_2": _FRACTION,
    "momentum": _FRACTION,
    "warmup_steps": Range(0, none="None for 5% of the run's steps"),
    "global_clipnorm": Range(0, low_open=True, none="None for no clipping"),
    "ema_decay": Range(0, 1, low_open=True, high_open=True, none="None for no moving average"),
    "label_smoothing": _FRACTION,
    "head_bias_init": Range(none="None for the variant's"),
    "translate": _NATURAL,
    "crop_area": _crop_area,
    "randaugment": _randaugment,
    "mixup_alpha": _NATURAL,
    "mixup_images": Range(2),
    "steps_per_execution": Range(1, none="None for the largest divisor of the steps per epoch up to 50"),
    "seed": _NATURAL,
    "checkpoint_every": _NATURAL,
    "join_timeout": _POSITIVE_INT,
    "eval_every": _NATURAL,
    "num_samples": _POSITIVE_INT,
    "num_calibration": Range(1, 512),  # calibration.npz: the TFLite converter needs no more
    "model.patch_size": _POSITIVE_INT,
    "model.hidden_size": _POSITIVE_INT,
    "model.num_layers": _POSITIVE_INT,
    "model.num_heads": _POSITIVE_INT,
    "model.mlp_dim": _POSITIVE_INT,
    "model.channels": _POSITIVE_INT,
    "model.representation_size": Range(1, none="None for no pre-logits layer"),
    "model.dropout_rate": _FRACTION,
    "model.attention_dropout_rate": _FRACTION,
    "model.stochastic_depth_rate": _FRACTION,
    "model.layer_norm_epsilon": _POSITIVE,
    "model.head_bias_init": Range(),
    "model.resnet_width": _POSITIVE_INT,
}


def check_range(name, value):
    """Raises a one-line `ValueError` (the option, what it takes, what was received) if `value` is out of its
    `RANGES` entry; options without one, and None, pass. `value` has its field's type already."""
    rule = RANGES.get(name)
    if rule is None or value is None:
        return
    if callable(rule) and not isinstance(rule, Range):
        rule(name, value)
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return  # a type error, reported by the type check
    if not rule.holds(value):
        raise ValueError(
            f"{name} must be {rule.words(isinstance(value, numbers.Integral))}. Received: {name}={value!r}"
        )
