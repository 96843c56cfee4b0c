"""README.md stays a short tour, and every relative link in it and in docs/ points at a file that exists."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail to a page under docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+://|^#|^mailto:", target):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"


def test_every_docs_page_is_reachable_from_readme():
    readme = (ROOT / "README.md").read_text()
    linked = set()
    for page in PAGES:
        linked |= {(page.parent / t).resolve() for t in LINK.findall(page.read_text()) if t.endswith(".md")}
    unreachable = [p.name for p in PAGES[1:] if p.resolve() not in linked and p.name not in readme]
    assert not unreachable, f"docs pages no page links to: {unreachable}"


def test_readme_fit_statements_follow_the_computed_memory_table():
    """README's sentence on which settings fit which accelerator, checked against docs/performance.md's table (which
    `python -m benchmarks --memory` regenerates): a re-measured table that changes a verdict fails here."""
    text = (ROOT / "docs" / "performance.md").read_text()
    fits = {}
    for line in text.split("<!-- memory-table:start -->")[1].split("<!-- memory-table:end -->")[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[0].startswith("`"):
            fits[cells[0].strip("`"), cells[1].split(" (")[0]] = [c.endswith("fits") for c in cells[3:7]]
    remat, accum, both = 1, 2, 3  # the columns after "whole batch" (0)
    finetune = ("imagenet_finetune_384", "cifar10_finetune")

    def only(settings):
        return [i in settings for i in range(4)]

    for recipe in finetune:
        for device in ("TPU v3-8", "TPU v4-8"):
            assert fits[recipe, device] == only({remat, accum, both}), (recipe, device)
        for device in ("TPU v5e-4", "1 GPU, 80 GiB"):
            assert fits[recipe, device] == only({accum, both}), (recipe, device)
        for device in ("TPU v2-8", "1 GPU, 16 GiB", "1 GPU, 24 GiB", "1 GPU, 40 GiB"):
            assert fits[recipe, device] == only({both}), (recipe, device)
    for device in ("TPU v2-8", "TPU v3-8", "TPU v4-8", "TPU v5e-4", "1 GPU, 80 GiB"):
        assert fits["imagenet21k_b16", device] == only({both}), device
    for device in ("1 GPU, 16 GiB", "1 GPU, 24 GiB", "1 GPU, 40 GiB"):
        assert fits["imagenet21k_b16", device] == only(set()), device
    readme = " ".join((ROOT / "README.md").read_text().split())
    claim = "fine-tuning at 384 px with batch 512 needs `--set accum_steps=8` or `--set model.remat=true` on a TPU v3-8"
    assert claim in readme
