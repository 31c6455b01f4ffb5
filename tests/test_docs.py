"""The documentation holds together: every relative link and #anchor resolves, no guide grows into a lab notebook.

Guides (README.md and docs/*.md) are read by users to do something; run logs, commit hashes and issue
numbers belong in docs/results/, which the guides link to. Anchors follow GitHub's rule for headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
MAX_GUIDE_LINES = 300

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
_ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|(?<![\w&])#\d+\b")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def guides() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: markup and punctuation dropped, lower case, each space a hyphen."""
    text = re.sub(r"`|\*\*|__", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = anchor(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(path: Path) -> list[str]:
    text = _INLINE_CODE.sub("", _FENCE.sub("", path.read_text(encoding="utf-8")))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {_shown(linked)}")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{fragment} in {_shown(linked)}")
    return broken


def test_anchor_follows_githubs_rule():
    assert anchor("The main job under 10 minutes on machine F (2026-11-27, evening)") == (
        "the-main-job-under-10-minutes-on-machine-f-2026-11-27-evening")
    assert anchor("`perfsuite ab`'s self-test") == "perfsuite-abs-self-test"
    assert anchor("Derived from machine D's figures") == "derived-from-machine-ds-figures"


def test_a_missing_file_or_anchor_is_reported(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## Other page\n")
    page.write_text("# Title\n\n[ok](#title) [gone](#nowhere) [file](missing.md) [web](https://x.org/a#b)\n"
                    "[there](other.md#other-page-1) [not there](other.md#other-page-2) `[code](nowhere.md)`\n")
    assert broken_links(page) == [
        f"#nowhere: no heading with anchor #nowhere in {page}",
        f"missing.md: no file {tmp_path / 'missing.md'}",
        f"other.md#other-page-2: no heading with anchor #other-page-2 in {tmp_path / 'other.md'}",
    ]


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    assert broken_links(path) == [], f"{path.relative_to(ROOT)}: broken links"


@pytest.mark.parametrize("path", guides(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_guide_is_a_lab_notebook(path):
    text = path.read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= MAX_GUIDE_LINES, (
        f"{path.relative_to(ROOT)} has {lines} lines, more than {MAX_GUIDE_LINES}: move run logs and the "
        "history of figures to docs/results/ and link them")
    hashes = _HASH.findall(text)
    assert not hashes, f"{path.relative_to(ROOT)} names commits {hashes}: they belong in docs/results/"
    issues = _ISSUE.findall(text)
    assert not issues, f"{path.relative_to(ROOT)} names issues {issues}: they belong in docs/results/"


def test_every_results_file_is_indexed():
    index = (RESULTS / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted(RESULTS.glob("*.md")) if p.name != "README.md" and f"({p.name}" not in index]
    assert not missing, f"docs/results/README.md does not list {missing}"
