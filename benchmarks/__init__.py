"""Side-by-side speed benchmark of keras-vit against keras-hub's and timm's ViT (optional extras).

Run `python -m benchmarks --help`. Every implementation runs in its own long-lived worker process; the
coordinator interleaves them (A B C A B C ...) and reports per-round ratios, because absolute times on a
shared machine drift between minutes and only side-by-side ratios are comparable.
"""
