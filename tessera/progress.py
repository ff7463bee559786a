"""Progress bars for long work (the Target IR interpreter, the conformance run,
autotuning, mesh simulations), drawn by ``tqdm`` on standard error.

A bar starts hidden and appears only once its work has run for ``DELAY`` seconds,
so quick runs print nothing; on a stream that is not a terminal (a pipe, a log file,
CI, pytest's capture) it is never drawn and ``tqdm`` is not even imported. Setting
the environment variable ``TESSERA_PROGRESS=0`` turns every bar off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

#: seconds of work before a bar appears
DELAY = 1.0


class ProgressBar:
    """A running bar: ``update(n)`` advances it, ``describe(text)`` names what it is
    on, ``write(line)`` prints a line above it. A silent bar does nothing."""

    __slots__ = ("_bar", "_file")

    def __init__(self, bar: Any = None, file: TextIO | None = None) -> None:
        self._bar = bar
        self._file = file

    @property
    def shown(self) -> bool:
        """Whether this bar draws at all (its stream is a terminal)."""
        return self._bar is not None

    def update(self, n: int = 1) -> None:
        """Advance the bar by ``n`` units."""
        if self._bar is not None:
            self._bar.update(n)

    def describe(self, text: str) -> None:
        """Show ``text`` after the bar (the item being worked on)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def write(self, line: str, file: TextIO | None = None) -> None:
        """Print ``line`` (no newline needed) to ``file`` (default: the bar's stream),
        clearing the bar first so that the two do not mix on a terminal."""
        out = file if file is not None else self._file
        if self._bar is not None:
            self._bar.write(line, file=out)
        elif out is not None:
            out.write(line + "\n")
            out.flush()


def enabled(file: TextIO) -> bool:
    """Whether a bar on ``file`` is drawn: a terminal, and not turned off."""
    if os.environ.get("TESSERA_PROGRESS", "1") == "0":
        return False
    isatty = getattr(file, "isatty", None)
    return bool(isatty is not None and isatty())


@contextmanager
def progress(desc: str, total: int | None = None, *, unit: str = "it",
             file: TextIO | None = None, delay: float = DELAY) -> Iterator[ProgressBar]:
    """A bar over ``total`` units (None: a running count) named ``desc`` on ``file``
    (default: standard error), shown after ``delay`` seconds; removed at the end."""
    stream = sys.stderr if file is None else file
    if not enabled(stream):
        yield ProgressBar(file=stream)
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, file=stream, delay=delay, leave=False,
               dynamic_ncols=True, mininterval=0.25)
    try:
        yield ProgressBar(bar, stream)
    finally:
        bar.close()


__all__ = ["DELAY", "ProgressBar", "enabled", "progress"]
