"""Command line: the catalogue of released checkpoints, and downloads into the local caches.

python -m keras_vit.weights list                                   # the catalogue as a table
python -m keras_vit.weights list --family augreg                   # one publisher's checkpoints
python -m keras_vit.weights info vit_base_patch16_224.orig_in21k   # one entry in full, and where it is cached
python -m keras_vit.weights download ViT-B_16                      # prints the local path
python -m keras_vit.weights download hf://timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k

list, info and --help import neither Keras nor TensorFlow (keras_vit/_startup.py).
"""

import argparse
import os
import sys

from keras_vit import _extras, _startup
from keras_vit.weights import catalogue, catalogue_families, catalogue_params, download, sources


def _size(entry):
    """`~N MiB` as a publisher gives it, `=N MiB` computed from the parameter count (float32) where none is."""
    if entry.size_bytes:
        return f"{entry.size_bytes / 2**20:.0f} MiB"
    return f"~{entry.size_mib:g} MiB" if entry.size_mib else f"={catalogue_params.float32_mib(entry):.1f} MiB"


def _size_info(entry):
    if entry.size_bytes or entry.size_mib:
        return f"{_size(entry)} ({entry.size_source})"
    return f"{_size(entry)}, computed: not published, so not checked on download"


def _parameters(entry):
    without = "" if entry.representation_size else ", without pre_logits"
    return f"{catalogue_params.parameter_count(entry):,} (from the architecture{without})"


def _table(entries):
    header = ("name", "variant", "res", "classes", "size", "top-1")
    rows = [
        (e.name, e.variant, str(e.image_size), str(e.num_classes), _size(e), f"{e.top1:g}" if e.top1 else "-")
        for e in entries
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:  # names and variants left-aligned, numbers right-aligned
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def markdown_table(entries):
    """The catalogue as a Markdown table (docs/pretrained_catalogue.md is this output)."""
    lines = [
        "| name | variant | res | classes | size | top-1 | top-1 source |",
        "| :--- | :--- | ---: | ---: | ---: | ---: | :--- |",
    ]
    for e in entries:
        top1 = f"{e.top1:g}" if e.top1 else "-"
        cells = [f"`{e.name}`", e.variant, e.image_size, e.num_classes, _size(e), top1, e.top1_source or "-"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _aligned(fields):
    """(name, value) pairs as lines, the values aligned in one column."""
    width = max(len(k) for k, _ in fields)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in fields)


def _info(entry):
    cached = sources.entry_cache_path(entry)
    fields = [
        ("name", entry.name),
        ("variant", entry.variant),
        ("image size", entry.image_size),
        ("classes", f"{entry.num_classes} ({entry.label_space})"),
        ("pre_logits", entry.representation_size or "none"),
        ("pooling", entry.pooling),
        ("position embedding", entry.position_embedding),
        ("preprocessing", entry.preprocessing),
        ("top-1", f"{entry.top1}% ({entry.top1_source})" if entry.top1 else "not reported"),
        ("parameters", _parameters(entry)),
        ("size", _size_info(entry)),
        ("sha256", entry.sha256 or "not published (recorded on first download)"),
        ("url", entry.url),
        ("gs", entry.gs_url),
        ("hub copy (timm)", f"hf://{entry.hf_hub_id}" if entry.hf_hub_id else "-"),
        ("cache path", f"{cached} ({'present' if os.path.exists(cached) else 'not downloaded'})"),
        ("also found as", ", ".join(entry.aliases) or "-"),
        ("note", entry.note or "-"),
    ]
    return _aligned(fields)


def _hub_info(entry):
    """One of timm's Hub checkpoints (catalogue_families.py): where it lives, its settings and figures."""
    fields = [
        ("name", entry.name),
        ("hub", f"hf://{entry.hf_hub_id} (downloaded into the Hub cache on first use)"),
        ("architecture", entry.architecture),
        ("image size", entry.image_size),
        ("classes", entry.num_classes or "none (features)"),
        ("pooling", entry.pooling),
        ("mean / std", f"{entry.mean} / {entry.std}"),
        ("eval resize", f"{entry.eval_resize} (crop_pct {entry.crop_pct}, {entry.interpolation})"),
        ("parameters", f"{entry.params:,} from the architecture ({entry.params_published}: {entry.params_source})"),
        ("top-1", f"{entry.top1}% {entry.top1_kind} ({entry.top1_source})" if entry.top1 else "not reported"),
        ("source", entry.source),
        ("note", entry.note or "-"),
    ]
    return _aligned(fields)


def main(argv=None):
    _startup.configure(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m keras_vit.weights",
        description="List the released ViT checkpoints and download them (or any URL or Hub repo) into the cache.",
        epilog=f"Cache: {download.CACHE_ENV} (default {download.cache_dir()}); Hub files: the huggingface_hub cache "
        f"(HF_HOME). Offline: place a file by hand at the path `info NAME` prints.",
    )
    # Read by _startup.configure above, before this parser runs; declared so that argparse accepts it.
    parser.add_argument("-v", "--verbose", action="store_true", help="show TensorFlow's own log lines too")
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="the catalogue as a table")
    families = ["vit_jax", "augreg", "big_vision", "dinov3", "eva02", "siglip2"]
    listing.add_argument("--family", choices=families, help="only one publisher's, or one of timm's Hub families")
    listing.add_argument("--markdown", action="store_true", help="as a Markdown table")
    info = sub.add_parser("info", help="one catalogue entry in full")
    info.add_argument("name", help="a catalogue name or file name (ViT-B_16, imagenet21k/ViT-B_16.npz)")
    fetch = sub.add_parser("download", help="download into the cache and print the local path")
    fetch.add_argument("source", help="a catalogue name, https:// or gs:// URL, or hf://ORG/NAME[@REVISION]")
    fetch.add_argument("--timeout", type=float, default=download.TIMEOUT_S, help="seconds per socket operation")
    args = parser.parse_args(argv)

    try:
        if args.command == "list":
            entries = [catalogue.CATALOGUE[n] for n in catalogue.names()]
            entries = [e for e in entries if args.family in (None, e.family)]
            hub = [e for e in catalogue_families.FAMILIES.values() if args.family in (None, e.family)]
            tables = [markdown_table(entries) if args.markdown else _table(entries)] if entries else []
            print("\n\n".join(tables + ([catalogue_families.markdown_table(hub)] if hub else [])))
        elif args.command == "info":
            hub = catalogue_families.FAMILIES.get(args.name)
            print(_hub_info(hub) if hub else _info(catalogue.get(args.name)))
        else:
            print(sources.fetch(args.source, timeout=args.timeout).path)
    except KeyError as err:
        parser.exit(2, f"error: {err.args[0]}\n")
    except BrokenPipeError:  # `list | head`: the reader has gone, which is no error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError) as err:
        parser.exit(1, f"error: {err}\n")
    return 0


if __name__ == "__main__":  # a module only an extra installs is named in one line (keras_vit/_extras.py)
    sys.exit(_extras.run(main, None, "python -m keras_vit.weights"))
