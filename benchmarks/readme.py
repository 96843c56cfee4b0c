"""The performance and memory tables, rendered from a benchmark report and written between marker comments of a
Markdown file (`python -m benchmarks.readme REPORT docs/performance.md`); no figure is typed by hand."""

import argparse
import json
import sys

from benchmarks import fit, interchange, provenance
from benchmarks.spread import target_state, with_spread
from keras_vit.files import atomic_write_text

START = "<!-- benchmark-table:start -->"
END = "<!-- benchmark-table:end -->"
MEMORY_START = "<!-- memory-table:start -->"
MEMORY_END = "<!-- memory-table:end -->"

MEASUREMENTS = (
    ("train/float32", "float32 training, img/s"),
    ("train/bfloat16", "mixed_bfloat16 training, img/s"),
    ("infer/b{batch}", "batch-{batch} inference, img/s"),
    ("latency/b1", "batch-1 latency, ms (lower is better)"),
)


def _num(value, digits=2):
    return "-" if value is None else f"{value:,.{digits}f}"


def _versions(report):
    seen = {}
    for info in report["implementations"].values():
        for name, version in info.get("versions", {}).items():
            if version and name != "torchvision_placeholder":
                seen.setdefault(name, version)
    return ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))


def render(report):
    """Markdown: the machine, the fastest keras-vit form per measurement, the ratios with their spread, the targets."""
    lines = [_header(report), "", "| measurement | fastest keras-vit form (median) | other keras-vit forms "
             "| best keras-vit / keras-hub | best keras-vit / timm |", "|---|---|---|---|---|"]  # fmt: skip
    lines += _measurement_rows(report)
    lines += _other_rows(report.get("median", {}))
    lines += interchange.rows(report)  # the ONNX and OpenVINO rows
    lines += _step_split(report.get("step_split", []))
    lines += _absent(report["implementations"])
    lines += ["", "| target (issue 14) | bound | measured, median (min-max) | met (every round) |", "|---|---|---|---|"]
    for name, t in report.get("targets", {}).items():
        lines.append(f"| {name} | {t['target']} | {with_spread(t, 3, key='measured')} | {target_state(t)} |")
    return "\n".join(lines)


def _header(report):
    s, m = report["settings"], report["machine"]
    return (
        f"Measured by `{report.get('command', 'python -m benchmarks')}`: ViT {s['variant']} at {s['image_size']} px, "
        f"batch {report['spec']['batch']}, {s['rounds']} interleaved round(s), {report['wall_seconds'] / 60:.1f} min, "
        f"at commit {provenance.describe(report.get('commits', {}))}, on "
        f"{m.get('cpu_model', 'unknown')} ({m.get('usable_cpus', m.get('cpus'))} cores usable, {m['threads']} threads; "
        f"ISA {', '.join(m.get('isa_flags', [])) or 'none of note'}); load average {m['loadavg_start'][0]:.1f} at "
        f"the start, {m['loadavg_end'][0]:.1f} at the end. Each ratio is taken within a round and shown as the "
        f"median over the rounds with their min-max in brackets; a target is met only when every round meets it "
        f'("median only": the median does, some round does not). Read the ratios, not the absolute figures, on a '
        f"shared machine. {_versions(report)}."
    )


def _measurement_rows(report):
    """One row per training/inference measurement: the fastest form, the others, the best ratios."""
    s, batch = report["settings"], report["spec"]["batch"]
    fastest, best = report.get("fastest_keras_vit", {}), report.get("best_ratios", {})
    lines = []
    for key, title in MEASUREMENTS:
        key, title = key.format(batch=batch), title.format(batch=batch)
        if key not in fastest:
            if key == "train/bfloat16" and s.get("bf16") is False:
                lines.append(f"| {title} | not measured: {s.get('bf16_reason', '--no-bf16')} | - | - | - |")
            continue
        f = fastest[key]
        others = ", ".join(f"{name} {_num(v, 1)}" for name, v in f["all"].items() if name != f["form"]) or "-"
        ratios = [with_spread(best.get(key, {}).get(o)) for o in ("keras-hub", "timm")]
        lines.append(f"| {title} | {f['form']} {_num(f['median'], 1)} | {others} | {ratios[0]} | {ratios[1]} |")
    return lines


def _other_rows(median):
    """The input pipeline, the input wait and the TFLite latencies."""
    lines = []
    pipe = median.get("pipeline/imagenet", {})
    if pipe:
        lines.append(
            f"| input pipeline (decode, Inception crop, flip, RandAugment, Mixup), img/s per core | keras-vit "
            f"(tf.data) {_num(pipe.get('keras-vit'), 1)} | - | - | timm DataLoader {_num(pipe.get('timm'), 1)} |"
        )
    wait = median.get("input_wait/train", {}).get("keras-vit")
    if wait is not None:
        lines.append(f"| training run: share of step time waiting for input | {100 * wait:.1f}% | - | - | - |")
    for mode in ("float32", "int8_matmul"):
        ms = median.get(f"tflite/{mode}", {})
        if ms:
            lines.append(f"| TFLite {mode} batch-1 latency, ms | {_num(ms.get('keras-vit'), 1)} | - | "
                         f"keras-hub {_num(ms.get('keras-hub'), 1)} | - |")  # fmt: skip
    return lines


def _step_split(splits):
    """The paragraph of the round whose bfloat16 step speed-up is the median, with all its figures."""
    splits = sorted(splits, key=lambda split: split["bf16_speedup"])
    if not splits:
        return []
    split = splits[(len(splits) - 1) // 2]
    f32, bf16 = split["float32"], split["mixed_bfloat16"]
    spread_text = (
        f" (the median round of {len(splits)}; the step's speed-up ranged "
        f"{_num(splits[0]['bf16_speedup'])}-{_num(splits[-1]['bf16_speedup'])}x)."
        if len(splits) > 1
        else "."
    )
    return [
        "",
        f"Where keras-vit's training step goes (`benchmarks/step_split.py`, TensorFlow without XLA, the step's "
        f"matmuls timed alone with its shapes): float32 {_num(f32['step_ms'], 0)} ms = matmuls "
        f"{_num(f32['matmul_ms'], 0)} ms ({_num(f32['matmul_gflops'], 0)} GFLOP/s) + the rest "
        f"{_num(f32['rest_ms'], 0)} ms; mixed_bfloat16 {_num(bf16['step_ms'], 0)} ms = matmuls "
        f"{_num(bf16['matmul_ms'], 0)} ms ({_num(bf16['matmul_gflops'], 0)} GFLOP/s) + the rest "
        f"{_num(bf16['rest_ms'], 0)} ms. bfloat16 speeds the matmuls up {_num(split['bf16_matmul_speedup'])}x and "
        f"the rest {_num(split['bf16_rest_speedup'])}x: the step {_num(split['bf16_speedup'])}x" + spread_text,
    ]


def _absent(implementations):
    """Lines for implementations not measured at all, and for workers that died mid-run."""
    missing = [f"{impl} ({info.get('reason', '')[:120]})" for impl, info in implementations.items()
               if not info.get("available")]  # fmt: skip
    died = [f"{impl} ({info['died']})" for impl, info in implementations.items() if info.get("died")]
    lines = []
    if missing:
        lines += ["", "Not measured in this run: " + "; ".join(missing) + "."]
    if died:
        lines += [
            "",
            "Worker(s) that died mid-run (killed for memory: exit code -9), measured only in the rounds "
            "before: " + "; ".join(died) + ".",
        ]
    return lines


def _setting_name(record):
    parts = (["remat"] if record["remat"] else []) + ([f"accum_steps={record['accum_steps']}"]
                                                      if record["accum_steps"] > 1 else [])  # fmt: skip
    return " + ".join(parts) or "whole batch"


def render_memory(report):
    """Markdown: the measured peak-memory table of the report's `memory` section, then the computed fit table."""
    memory = report["memory"]
    m = memory["machine"]
    lines = [
        f"Measured by `{report.get('command', 'python -m benchmarks --memory-only')}` "
        f"(`benchmarks/memory.py`, one fresh process per setting, Keras' {memory['backend']} backend without XLA, on "
        f"{m.get('cpu_model', 'unknown')}, {m.get('usable_cpus', m.get('cpus'))} cores usable; "
        f"{memory['seconds'] / 60:.1f} min; commit {provenance.label(memory.get('commit', {}))}): ViT "
        f"{memory['variant']}, one AdamW step of a batch of {memory['batch']}; "
        f"the step's MiB is the growth of the process's peak RSS over that step (activations, one gradient, "
        f"workspace), above the weights and optimiser state already built. Per image divides it by the micro-batch; "
        f"activations per image first takes off one gradient (4 bytes per parameter). Accumulated "
        f"settings measure more per image than the same setting without, since Keras' accumulation holds "
        f"gradient-sized buffers of its own, here spread over a micro-batch of only a few images.",
        "",
        "| image size | setting | micro-batch | step MiB | MiB per image | activation MiB per image |",
        "|---|---|---|---|---|---|",
    ]
    for record in memory["settings"]:
        head = f"| {record['image_size']} px | {_setting_name(record)} |"
        if "error" in record:
            lines.append(f"{head} - | failed: {record['error'][:80]} | - | - |")
            continue
        lines.append(f"{head} {record['micro_batch']} | {record['step_mib']:,} | {record['per_image_mib']:,.1f} | "
                     f"{fit.activation_mib_per_image(record):,.1f} |")  # fmt: skip
    return "\n".join([*lines, "", fit.render(memory)])


def check_markers(path, start=START, end=END):
    """Raises ValueError unless `path` holds exactly one `start` marker followed by one `end` marker."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        what = "performance" if start == START else "memory"
        raise ValueError(
            f"{path} must hold the line {start} followed later by {end}, once each (found {text.count(start)} "
            f"start and {text.count(end)} end marker(s)); add them where the {what} table belongs."
        )
    return text


def _replace(text, start, end, body):
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{body}\n{end}{tail}"


def update(path, report):
    """Rewrites, atomically, the tables of `path` the report holds: the performance table between START and END
    (a report with benchmark rounds) and the memory tables between MEMORY_START and MEMORY_END (a `memory`
    section). Every marker pair needed is checked before anything is written."""
    sections = []
    if "rounds" in report:
        sections.append((START, END, render))
    if "memory" in report:
        sections.append((MEMORY_START, MEMORY_END, render_memory))
    for start, end, _ in sections:
        text = check_markers(path, start, end)
    for start, end, draw in sections:
        text = _replace(text, start, end, draw(report))
    if sections:
        atomic_write_text(path, text)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.readme", description=__doc__.splitlines()[0])
    p.add_argument("report", help="a report.json written by `python -m benchmarks`")
    p.add_argument("readme", help="the Markdown file (e.g. docs/performance.md) whose tables to rewrite")
    args = p.parse_args(argv)
    with open(args.report, encoding="utf-8") as f:
        update(args.readme, json.load(f))
    print(f"rewrote the tables in {args.readme} from {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
