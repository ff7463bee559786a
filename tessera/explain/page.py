"""An explain page as one self-contained HTML document, written atomically.

The document inlines its style sheet, script and drawings (:mod:`.assets`), so it
opens from disk with no network. Panels sit side by side in the stack's order (source,
Graph, Schedule, Tile, Target IR, PTX); the drawn sections follow them.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from tessera.explain.assets import CSS, JS
from tessera.explain.collect import Explanation
from tessera.explain.linkmap import Panel
from tessera.files import write_output


def panel_html(panel: Panel) -> str:
    """One panel: numbered lines, each with its source line as ``data-src``."""
    head = f'<h2>{escape(panel.title)}' + \
        (f' <span class="muted">{escape(panel.note)}</span>' if panel.note else "") + "</h2>"
    if panel.error is not None:
        body = f'<div class="error">{escape(panel.error)}</div>'
    else:
        rows = []
        first = panel.src[0] if panel.key == "source" and panel.src else 1
        for k, (line, src) in enumerate(zip(panel.lines, panel.src)):
            link = f' data-src="{src}"' if src is not None else ""
            rows.append(f'<div class="ln"{link}><span class="no">{first + k}</span>'
                        f'<span class="tx">{escape(line) or " "}</span></div>')
        body = '<div class="code">' + "".join(rows) + "</div>"
    return f'<section class="panel" data-key="{panel.key}">{head}{body}</section>'


def render(ex: Explanation) -> str:
    """The page's HTML text."""
    sections = "".join(f'<section class="drawing"><h3>{escape(title)}</h3>{html}</section>'
                       for title, html in ex.sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>tessera explain: {escape(ex.name)}</title>
<style>{CSS}</style></head>
<body>
<h1>{escape(ex.name)} <span class="muted">({escape(ex.kind)})</span></h1>
<p class="muted">{escape(ex.file)} &middot; hover a line: the lines compiled from the same
source line light up in every panel (the link is each op's source location, carried
through every lowering, and the PTX renderer's line map).</p>
<div class="panels">{"".join(panel_html(p) for p in ex.panels)}</div>
{sections}
<script>{JS}</script>
</body></html>
"""


def write(html: str, path: str | os.PathLike[str]) -> Path:
    """Write ``html`` to ``path`` whole or not at all (:func:`tessera.files.write_output`:
    an error never leaves a half-written page)."""
    return write_output(path, html, "page")


__all__ = ["panel_html", "render", "write"]
