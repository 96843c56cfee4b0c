"""One artifact's report entry, complete: what it is, its figures as its kind reports them, its latency, what its
format adds, its budget and every failure found."""

from keras_vit import files


def record(plan, v, options, name, fmt, mode, out, size, found, runner, budget, failures, **fields):
    """The entry of the file `name` in `fmt` (`mode` for TFLite) written for `plan` and judged on `v` (the
    verification), `found` the kind's figures, `fields` what the format adds."""
    return {
        "name": name,
        "format": fmt,
        **plan.kind.TAG,
        "quantization": mode,
        "path": files.join(out, name),  # where it is once committed
        "file_bytes": int(size),
        **plan.kind.entry_figures(found, plan),
        "latency_ms": runner.latency_ms(v.x[:1], options.latency_runs, options.latency_warmup),
        "threads": runner.threads,
        **fields,
        "budget": budget,
        "failures": list(failures),
        "passed": not failures,
    }
