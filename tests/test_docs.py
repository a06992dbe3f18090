"""The docs as a reader finds them: every guide under docs/ (docs/evidence/ apart) is at most 300 lines, and every
relative link of README.md and docs/ names a file that exists (and, for a Markdown page, a heading of it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *DOCS.rglob("*.md")])
GUIDES = sorted(p for p in DOCS.rglob("*.md") if "evidence" not in p.relative_to(DOCS).parts)
MAX_GUIDE_LINES = 300
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    found = LINK.findall(text)  # a target with no dot, slash or hash is no path (a SMILES such as [C@@H](CC))
    return [t for t in found if not re.match(r"[a-z][a-z0-9+.-]*:", t) and re.search(r"[./#]", t)]


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    return bad


@pytest.mark.parametrize("page", GUIDES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_guide_is_at_most_300_lines(page):
    n = len(page.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_GUIDE_LINES, (
        f"{page.relative_to(ROOT)} has {n} lines: a guide under docs/ says what a thing does, how to use it and its "
        f"headline number with the command in at most {MAX_GUIDE_LINES}; move how each choice was made to a "
        "docs/evidence/ page linked from it")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert not broken_links(page), f"{page.relative_to(ROOT)}: broken links {broken_links(page)}"


def test_slug_is_githubs():
    assert slug("Intensity weights (adopted)") == "intensity-weights-adopted"
    assert slug("The fragment score: a suspect list's own order") == "the-fragment-score-a-suspect-lists-own-order"
