"""Every relative link in README.md and docs/*.md points at a file of the repository, and every
anchor at a heading of its page (GitHub's heading ids), so the manual holds together as pages move."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple
from urllib.parse import unquote

import pytest

from conftest import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
#: [text](target) or ![alt](target), the target up to a space (a title) or the closing parenthesis.
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text: str) -> Iterator[Tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's id for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> Set[str]:
    """The ids of a page's headings, a repeated one numbered as GitHub numbers it (-1, -2, ...)."""
    seen: Dict[str, int] = {}
    ids: Set[str] = set()
    for _, line in prose(page.read_text(encoding="utf-8")):
        found = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not found:
            continue
        base = slug(found.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.add(base if count == 0 else f"{base}-{count}")
    return ids


def links(page: Path) -> List[Tuple[int, str]]:
    """The relative link targets of a page (no scheme, no mail address), with their line."""
    found = []
    for number, line in prose(page.read_text(encoding="utf-8")):
        line = re.sub(r"`[^`]*`", "", line)
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue
            found.append((number, target))
    return found


def broken(page: Path) -> List[str]:
    """What is wrong with the page's links: a file that is not there, an anchor no heading has."""
    wrong = []
    for number, target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path)).resolve() if path else page
        where = f"{page.relative_to(REPO_ROOT)}:{number}: {target}"
        if not dest.exists():
            wrong.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            wrong.append(f"{where}: no heading with that id in {dest.relative_to(REPO_ROOT)}")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken(page) == []


def test_the_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(globals(), "REPO_ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    other = tmp_path / "docs" / "other.md"
    other.write_text("# Other\n\n## What `site.yml` does\n\n## Again\n\n## Again\n\n```sh\n# not a heading\n```\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/other.md#what-siteyml-does) [ok](docs/other.md#again-1) [web](https://example.org/x)\n"
                    "[gone](docs/gone.md) [bad](docs/other.md#not-a-heading) [self](#nowhere)\n"
                    "`[in code](docs/gone.md)`\n```\n[fenced](docs/gone.md)\n```\n")
    wrong = broken(page)
    assert len(wrong) == 3, wrong
    assert "docs/gone.md: no such file" in wrong[0]
    assert "#not-a-heading: no heading" in wrong[1] and "#nowhere: no heading" in wrong[2]
