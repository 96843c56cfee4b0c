"""Per-round measurements into medians, per-round ratios with their min and max, MFU and the targets (a target is met
only when every round meets it)."""

import statistics

from benchmarks.worker import IMPLS

# keras-vit on each Keras backend, in its own worker. JAX always compiles (its rows are the "+xla" settings);
# Keras' torch backend runs eagerly (torch.compile is not measured), so its rows are the plain settings.
KERAS_VIT_FORMS = ("keras-vit", "keras-vit-jax", "keras-vit-torch")
FORM_NAMES = {("keras-vit", False): "TensorFlow", ("keras-vit", True): "TensorFlow+XLA",
              ("keras-vit-jax", True): "JAX", ("keras-vit-torch", False): "PyTorch"}  # fmt: skip


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _forms(round_values, prefix, impls):
    """{(impl, xla): value} of `impls` in the settings of `prefix` (with and without XLA) in one round."""
    impls = (impls,) if isinstance(impls, str) else impls
    found = {}
    for xla in (False, True):
        values = round_values.get(prefix + ("+xla" if xla else ""), {})
        found.update({(i, xla): values[i] for i in impls if i in values})
    return found


def _best(round_values, prefix, impls, higher=True):
    """Best value of `impls` (one name or several) over the settings of `prefix` in one round."""
    found = list(_forms(round_values, prefix, impls).values())
    if not found:
        return None
    return max(found) if higher else min(found)


def form_name(impl, xla):
    return f"keras-vit on {FORM_NAMES.get((impl, xla), impl)}" if impl in KERAS_VIT_FORMS else impl


def measurement_groups(keys):
    """The measurements (keys without their +xla setting) in the order the report lists them."""
    return list(dict.fromkeys(k[: -len("+xla")] if k.endswith("+xla") else k for k in keys))


def summarise(report):
    """Adds medians, per-round ratios, the fastest keras-vit form, MFU and the issue's targets to `report`."""
    rounds = report["rounds"]
    keys = sorted({k for r in rounds for k in r})
    report["median"] = {
        k: {i: _median([r.get(k, {}).get(i) for r in rounds]) for i in IMPLS if any(i in r.get(k, {}) for r in rounds)}
        for k in keys
    }
    report["ratios"] = _form_ratios(rounds, keys)
    report["fastest_keras_vit"], report["best_ratios"] = _fastest_and_best(rounds, keys)
    report["peak_gflops"] = peaks = _peaks(rounds)
    report["mfu"] = _mfu(rounds, peaks, report["flops"]["train_per_image"])
    targets = _targets(rounds, peaks, report["flops"]["forward_per_image"])
    targets.update(_digits_targets(report.get("digits_int8", {})))
    report["targets"] = {name: judge(op, bound, measured) for name, (op, bound, measured) in targets.items()}


def _per_round(rounds, fn):
    """`fn` of every round where it is defined, as a spread; None where no round has it."""
    out = [x for x in (fn(r) for r in rounds) if x is not None]
    return spread(out) if out else None


def _ratio(a, b):
    return None if a is None or b is None else a / b


def _value(r, key, impl):
    return r.get(key, {}).get(impl)


def _form_ratios(rounds, keys):
    """Every keras-vit form against keras-hub and timm, per measurement, as per-round ratios."""
    ratios = {}
    for k in keys:
        for form in KERAS_VIT_FORMS:
            for other in ("keras-hub", "timm"):
                per_round = [r[k][form] / r[k][other] for r in rounds if form in r.get(k, {}) and other in r.get(k, {})]
                if per_round:
                    ratios.setdefault(k, {})[f"{form}/{other}"] = spread(per_round)
    return ratios


def _fastest_and_best(rounds, keys):
    """Per measurement: the fastest keras-vit form (by its median over rounds), and the best keras-vit form
    against each baseline's best setting, as per-round ratios (the round's best form, whichever it is)."""
    fastest, best_ratios = {}, {}
    for group in measurement_groups(keys):
        if not group.startswith(("train/", "infer/", "latency/")):
            continue
        higher = not group.startswith("latency/")
        medians = {}
        for r in rounds:
            for form, v in _forms(r, group, KERAS_VIT_FORMS).items():
                medians.setdefault(form, []).append(v)
        if not medians:
            continue
        medians = {f: statistics.median(v) for f, v in medians.items()}
        pick = (max if higher else min)(medians, key=medians.get)
        fastest[group] = {"form": form_name(*pick), "median": medians[pick],
                          "all": {form_name(*f): v for f, v in medians.items()}}  # fmt: skip
        for other in ("keras-hub", "timm"):
            measured = _per_round(
                rounds,
                lambda r, group=group, other=other, higher=higher: _ratio(
                    _best(r, group, KERAS_VIT_FORMS, higher), _best(r, group, other, higher)
                ),
            )
            if measured:
                best_ratios.setdefault(group, {})[other] = measured
    return fastest, best_ratios


def _peaks(rounds):
    """The ceiling is the best probe of the whole run: a probe that ran while another process held a core
    measured the machine's bad moment, not its peak, and would inflate MFU past 100%."""
    return {d: max((r.get(f"peak/{d}", {}).get("keras-vit") or 0 for r in rounds), default=0) or None
            for d in ("float32", "bfloat16", "litert_float32")}  # fmt: skip


def _mfu(rounds, peaks, train_flops):
    """Median over rounds of each training setting's FLOP rate against its dtype's peak."""
    mfu = {}
    for r in rounds:
        for k, v in r.items():
            peak = peaks["bfloat16" if "bfloat16" in k else "float32"]
            if k.startswith("train/") and peak:
                for impl, ips in v.items():
                    mfu.setdefault(k, {}).setdefault(impl, []).append(ips * train_flops / (peak * 1e9))
    return {k: {i: statistics.median(x) for i, x in v.items()} for k, v in mfu.items()}


def _targets(rounds, peaks, forward):
    """The issue's speed targets: name -> (op, bound, per-round spread or None)."""
    forms = KERAS_VIT_FORMS

    def own(r, key, impl="keras-vit"):
        return _value(r, key, impl)

    measured = {
        "2_train_f32_vs_timm": lambda r: _ratio(_best(r, "train/float32", forms), _best(r, "train/float32", "timm")),
        "2_train_bf16_vs_keras_hub_f32": lambda r: _ratio(
            _best(r, "train/bfloat16", forms), _best(r, "train/float32", "keras-hub")
        ),
        "4_pipeline_vs_timm_per_core": lambda r: _ratio(
            own(r, "pipeline/imagenet"), own(r, "pipeline/imagenet", "timm")
        ),
        "5_tflite_f32_vs_keras_hub": lambda r: _ratio(own(r, "tflite/float32"), own(r, "tflite/float32", "keras-hub")),
        "5_tflite_f32_vs_matmul_bound": lambda r: _ratio(
            own(r, "tflite/float32"), _bound_ms(forward, peaks["litert_float32"])
        ),
        "5_tflite_int8_matmul_vs_own_f32": lambda r: _ratio(own(r, "tflite/int8_matmul"), own(r, "tflite/float32")),
    }
    bounds = {
        "2_train_f32_vs_timm": (">=", 1.1),
        "2_train_bf16_vs_keras_hub_f32": (">=", 1.8),
        "4_pipeline_vs_timm_per_core": (">=", 1.5),
        "5_tflite_f32_vs_keras_hub": ("<=", 1.0),
        "5_tflite_f32_vs_matmul_bound": ("<=", 1.10),
        "5_tflite_int8_matmul_vs_own_f32": ("<=", 0.45),
    }
    return {name: (*bounds[name], _per_round(rounds, fn)) for name, fn in measured.items()}


def _digits_targets(digits):
    """The trained digits model's int8 agreement and accuracy drop: one measurement, not one per round.

    Agreement on random inputs through a random model (in the TFLite info) is not a target: its logits are nearly
    tied, so any quantisation noise flips top-1. The trained digits model is the test.
    """
    targets = {}
    for mode in ("full_int8", "int8_matmul"):
        if mode in digits:
            agreement = digits[mode]["agreement_with_keras"]
            drop = digits["keras_float32_top1"] - digits[mode]["top1"]
            targets[f"5_{mode}_top1_agreement_digits"] = (">=", 0.99, spread([agreement]))
            targets[f"5_{mode}_accuracy_drop_digits"] = ("<=", 0.01, spread([drop]))
    return targets


def spread(values):
    """The median of per-round values with their min, max and the values themselves."""
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}


def judge(op, bound, measured):
    """A target's entry: met only when every round meets the bound ("median only" when just the median does).

    A median over a few rounds on a shared machine can clear a bound that most rounds miss; a claim that holds
    in every round is the one a reader can reproduce.
    """
    target = f"{op} {bound}"
    if measured is None:
        return {"target": target, "measured": None, "met": None, "state": "n/a"}

    def meets(value):
        return value >= bound if op == ">=" else value <= bound

    rounds_met = sum(meets(v) for v in measured["rounds"])
    met = rounds_met == len(measured["rounds"])
    state = "yes" if met else "median only" if meets(measured["median"]) else "no"
    return {"target": target, "measured": measured["median"], "min": measured["min"], "max": measured["max"],
            "rounds": measured["rounds"], "rounds_met": rounds_met, "met": met, "state": state}  # fmt: skip


def _bound_ms(forward_flops, peak_gflops):
    """Batch-1 latency at the measured matmul peak: the floor no float32 implementation on that engine can beat
    (the TFLite target takes LiteRT's own peak, `benchmarks.tflite.matmul_peak`)."""
    return None if not peak_gflops else forward_flops / (peak_gflops * 1e9) * 1e3
