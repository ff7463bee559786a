"""Every relative link in README.md and docs/*.md resolves.

A link ``[text](path)`` must name a file or folder that exists, relative to the
document that holds it; a link ``[text](path.md#anchor)`` or ``[text](#anchor)`` must
also name a heading of that Markdown file, by the slug GitHub gives it. Links inside
code blocks and inline code are not links and are skipped, as are absolute URLs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """``text`` with fenced code blocks and inline code spans blanked out."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower-cased, with punctuation
    other than ``-`` and ``_`` dropped and each space turned into ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of every heading of a Markdown file (repeats get ``-1``, ``-2``...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = FENCE.sub("", path.read_text())
    for match in HEADING.finditer(text):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """``(line, target)`` of every relative link of a Markdown file."""
    text = prose(path.read_text())
    out = []
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
            continue  # http:, https:, mailto: ...
        out.append((text.count("\n", 0, match.start()) + 1, target))
    return out


def test_the_pages_have_relative_links() -> None:
    assert sum(len(links(page)) for page in PAGES) > 20


def test_slugs_follow_github() -> None:
    assert slug("3. Programs on a mesh: `@ts.jit` with DistTensor arguments") == (
        "3-programs-on-a-mesh-tsjit-with-disttensor-arguments")
    assert slug("7. Exact `mma` accumulation, and its caveat") == (
        "7-exact-mma-accumulation-and-its-caveat")
    assert slug("`tessera/ir/`: the IR core and Graph IR") == "tesserair-the-ir-core-and-graph-ir"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for line, target in links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        where = f"{page.relative_to(ROOT)}:{line}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no heading with that anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)
