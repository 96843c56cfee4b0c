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
