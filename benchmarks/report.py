"""The printed summary of a benchmark report."""

from benchmarks import interchange, provenance
from benchmarks.spread import target_state, with_spread


def _fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def table(report):
    """Returns the human-readable summary: medians per implementation, ratios, and targets."""
    return "\n".join([*_medians(report), *_comparisons(report), *_targets(report), *_run_facts(report)])


def _medians(report):
    """The settings line, then one row of medians per implementation, and the matmul peaks."""
    med, mfu = report["median"], report.get("mfu", {})
    b = report["spec"]["batch"]
    columns = [
        ("train f32 img/s", "train/float32", 1), ("+XLA", "train/float32+xla", 1),
        ("MFU f32", None, 0), ("train bf16", "train/bfloat16", 1), ("+XLA", "train/bfloat16+xla", 1),
        (f"infer b{b} img/s", f"infer/b{b}", 1), ("+XLA", f"infer/b{b}+xla", 1),
        ("lat b1 ms", "latency/b1", 1), ("+XLA", "latency/b1+xla", 1),
        ("TFLite f32 ms", "tflite/float32", 1), ("dyn-int8", "tflite/dynamic_int8", 1),
        ("full-int8", "tflite/full_int8", 1),
        ("int8-matmul", "tflite/int8_matmul", 1), ("pipeline img/s/core", "pipeline/imagenet", 1),
        ("uint8", "pipeline/imagenet_uint8", 1),
    ]  # fmt: skip
    lines = []
    s = report["settings"]
    lines.append(
        f"ViT {s['variant']} at {s['image_size']} px, batch {b}, {s['rounds']} interleaved rounds, "
        f"{s['threads']} threads (TFLite too); medians over rounds, ratios as median (min-max over rounds)"
    )
    header = f"{'':15s} | " + " | ".join(c[0] for c in columns)
    lines += [header, "-" * len(header)]
    for impl, info in report["implementations"].items():
        if not info.get("available"):
            lines.append(f"{impl:15s} | not measured: {info.get('reason', '')[:100]}")
            continue
        cells = []
        for title, key, digits in columns:
            if key is None:
                values = [mfu.get(k, {}).get(impl) for k in ("train/float32", "train/float32+xla")]
                values = [v for v in values if v is not None]
                value = 100 * max(values) if values else None
                text = "-" if value is None else f"{value:.0f}%"
            else:
                text = _fmt(med.get(key, {}).get(impl), digits)
            cells.append(text.rjust(len(title)))
        lines.append(f"{impl:15s} | " + " | ".join(cells))
    peaks = report.get("peak_gflops", {})
    lines.append(
        "matmul peak (best probe of the run, GFLOP/s; litert: LiteRT's float32 FULLY_CONNECTED): "
        + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items() if v)
        + f"; forward {report['flops']['forward_per_image'] / 1e9:.2f} GFLOP/image, training 3x"
    )
    return lines


def _comparisons(report):
    """The per-round ratios, the fastest keras-vit form per measurement, the input wait and the machine."""
    med, lines = report["median"], []
    lines.append("")
    lines.append(
        "per-round ratios keras-vit form / baseline, median (min-max); >1 is faster for img/s, <1 is faster for ms:"
    )
    for key, by in sorted(report["ratios"].items()):
        lines.append(f"  {key:24s} " + "  ".join(f"{o} {with_spread(r)}" for o, r in by.items()))
    lines.append("")
    lines.append("fastest keras-vit form per measurement (median), and the best form against each baseline's best:")
    for key, f in report.get("fastest_keras_vit", {}).items():
        by = report.get("best_ratios", {}).get(key, {})
        lines.append(
            f"  {key:24s} {f['form']} {f['median']:.2f}  "
            + "  ".join(f"vs {o}: {with_spread(r)}" for o, r in by.items())
        )
    wait = med.get("input_wait/train", {}).get("keras-vit")
    if wait is not None:
        lines.append(
            f"  a keras-vit training run (TensorFlow, the trainer's jit_compile) waited for input {100 * wait:.1f}% "
            "of its step time"
        )
    m = report["machine"]
    lines.append(
        f"machine: {m.get('cpu_model')}, {m.get('usable_cpus')} usable cores; ISA: {', '.join(m.get('isa_flags', []))}"
    )
    return lines


def _targets(report):
    """Each target with its state, then the TFLite models' sizes and agreement and the digits accuracy."""
    lines = []
    lines.append("")
    lines.append("targets (issue 14; met only when every round meets the bound):")
    for name, t in report["targets"].items():
        measured = with_spread(t, 3, key="measured")
        lines.append(f"  {name:32s} {t['target']:8s} measured {measured:>21s}  {target_state(t)}")
    for impl, info in report["implementations"].items():
        for mode, t in info.get("tflite", {}).items():
            floats = ", ".join(f"{k} x{v}" for k, v in t["float_ops"].items()) or "none"
            lines.append(
                f"  {impl} {mode}: {t['bytes'] / 1e6:.1f} MB, top-1 agreement {t['top1_agreement']:.3f}, "
                f"max |dlogit| {t['max_abs_logit_diff']:.3g}"
                + (f"; float ops: {floats}" if mode in ("full_int8", "int8_matmul") else "")
            )
    digits = report.get("digits_int8")
    if digits and "error" not in digits:
        lines.append(
            f"  digits held-out top-1 ({digits['heldout_images']} images): "
            f"Keras float32 {digits['keras_float32_top1']:.4f}; "
            + ", ".join(f"{m} {digits[m]['top1']:.4f} (agreement {digits[m]['agreement_with_keras']:.4f})"
                        for m in ("float32", "dynamic_int8", "full_int8", "int8_matmul") if m in digits)
        )  # fmt: skip
    elif digits:
        lines.append(f"  digits int8 check failed: {digits['error'][:200]}")
    lines += interchange.table_lines(report)
    return lines


def _run_facts(report):
    """Peak memory, seconds per phase, the commit measured, the wall time and the load."""
    lines = []
    mem = ", ".join(
        f"{i} {v['peak_rss_mb_train_float32']:.0f} MB"
        for i, v in report["implementations"].items()
        if "peak_rss_mb_train_float32" in v
    )
    lines.append(f"peak RSS of the worker after float32 training: {mem}")
    phases = report.get("phase_seconds", {})
    if phases:
        lines.append(
            "seconds per phase (starting workers + each round; the first round builds, compiles, converts): "
            + "; ".join(f"{p} {t['workers']:.0f} + " + "/".join(f"{r:.0f}" for r in t["rounds"])
                        for p, t in phases.items())
        )  # fmt: skip
    lines.append(f"commit measured: {provenance.describe(report.get('commits', {}))}")
    lines.append(f"wall time {report['wall_seconds'] / 60:.1f} min; load average start/end "
                 f"{report['machine']['loadavg_start'][0]:.1f}/{report['machine']['loadavg_end'][0]:.1f}")  # fmt: skip
    return lines
