"""The line links of an explain page: which source line each IR and PTX line comes from.

Every op of every IR level carries the source location (:class:`~tessera.errors.Loc`)
of the Python line that produced it, through each lowering; the IR printer writes it
as a trailing ``loc("FILE":LINE)``. The PTX renderer keeps a map from PTX line to the
location of the Target IR op the line was written for
(:func:`tessera.backend.ptx.render.render` with ``line_map=True``). A page line is
linked to source line ``N`` of the explained file when its location is ``FILE:N``;
lines from other files (a caller's ``return``, a library helper) link nowhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tessera.errors import Loc

_LOC = re.compile(r' loc\((?P<file>"(?:[^"\\]|\\.)*"):(?P<line>\d+)\)$')


@dataclass
class Panel:
    """One column of the page: a title and text lines, each with the source line it
    comes from (None: linked to nothing); ``error`` replaces the text when the level
    could not be produced."""

    key: str
    title: str
    lines: list[str] = field(default_factory=list)
    src: list[int | None] = field(default_factory=list)
    error: str | None = None
    note: str = ""

    def linked(self) -> set[int]:
        """The source lines some line of this panel links to."""
        return {s for s in self.src if s is not None}


def same_file(a: str, b: str) -> bool:
    """Whether two location files name one file (cell names compare as written)."""
    if a.startswith("<") or b.startswith("<"):
        return a == b
    return os.path.abspath(a) == os.path.abspath(b)


def ir_panel(key: str, title: str, text: str, file: str) -> Panel:
    """A panel of IR text printed with locations: the ``loc(...)`` suffixes are taken
    off the lines and become their links to ``file``."""
    import json

    panel = Panel(key, title)
    for line in text.rstrip("\n").split("\n"):
        m = _LOC.search(line)
        src = None
        if m is not None:
            line = line[:m.start()]
            if same_file(json.loads(m.group("file")), file):
                src = int(m.group("line"))
        panel.lines.append(line)
        panel.src.append(src)
    return panel


def ptx_lines(text: str, line_map: Mapping[int, Loc], file: str) -> tuple[list[str],
                                                                           list[int | None]]:
    """The lines of one PTX module and their source lines (``line_map`` is 1-based)."""
    lines = text.rstrip("\n").split("\n")
    src: list[int | None] = []
    for number in range(1, len(lines) + 1):
        loc = line_map.get(number)
        src.append(loc.line if loc is not None and same_file(loc.file, file) else None)
    return lines, src


def ptx_panel(modules: list[tuple[str, str, Mapping[int, Loc]]], file: str) -> Panel:
    """The PTX of one or more kernels ``(name, text, line map)``; several are each
    introduced by a ``// kernel NAME`` line, as ``tessera ptx`` prints them."""
    panel = Panel("ptx", "PTX")
    for name, text, line_map in modules:
        if len(modules) > 1:
            panel.lines.append(f"// kernel {name}")
            panel.src.append(None)
        lines, src = ptx_lines(text, line_map, file)
        panel.lines += lines
        panel.src += src
    return panel


def error_panel(key: str, title: str, err: BaseException) -> Panel:
    """A panel for a level that could not be produced: the error's message."""
    return Panel(key, title, error=f"{type(err).__name__}: {err}")


def source_panel(file: str, first: int, lines: list[str]) -> Panel:
    """The Python source: ``lines`` starting at line ``first`` of ``file``, each
    linked to itself."""
    panel = Panel("source", "Python source", note=os.path.basename(file))
    for k, line in enumerate(lines):
        panel.lines.append(line.rstrip("\n"))
        panel.src.append(first + k)
    return panel


__all__ = ["Panel", "error_panel", "ir_panel", "ptx_lines", "ptx_panel", "same_file",
           "source_panel"]
