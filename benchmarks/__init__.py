"""Side-by-side speed benchmarks of keras-vit against keras-hub's and timm's ViT (optional extras), each in its own
worker process, interleaved, reported as per-round ratios (docs/performance.md). `python -m benchmarks --help`."""
