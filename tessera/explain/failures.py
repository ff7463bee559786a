"""Explain pages for the failing cases of a conformance run.

A page is made only for a case that failed (a passing run costs nothing): the case is
run again on its backend while ``Kernel.specialise`` (the one step every launch,
compilation and check of a ``@ts.kernel`` goes through) is watched, and the last
kernel it launched gets a page, with that launch's arguments. A case that launches
no kernel (a graph or mesh case), or whose kernel cannot be explained, gets none.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

#: outcomes that get a page
FAILING = ("failed", "error")


@contextlib.contextmanager
def watching_launches() -> Iterator[list[tuple[Any, dict[str, Any]]]]:
    """Collect ``(kernel, arguments by name)`` of every kernel specialised inside the
    block (arrays copied as they were before the launch)."""
    from tessera.frontend.kernel.entry import Kernel

    seen: list[tuple[Any, dict[str, Any]]] = []
    original = Kernel.specialise

    def specialise(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            bound = inspect.signature(self.fn).bind_partial(*args).arguments
            named = {k: np.array(v) if isinstance(v, np.ndarray) else v
                     for k, v in {**bound, **kwargs}.items()}
            seen.append((self, named))
        except TypeError:
            pass  # the launch itself reports a bad call
        return original(self, args, kwargs)

    Kernel.specialise = specialise  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Kernel.specialise = original  # type: ignore[method-assign]


def failure_pages(report: Any, folder: str | Path) -> dict[str, Path]:
    """Write a page per failing case of ``report`` that launched a kernel into
    ``folder``; ``{case id: page path}``."""
    from tessera.conformance.context import Context
    from tessera.conformance.runner import run_case
    from tessera.errors import TesseraError
    from tessera.explain.command import write_page

    pages: dict[str, Path] = {}
    for result in report.results:
        if result.outcome not in FAILING:
            continue
        with watching_launches() as launches:
            run_case(result.case, Context(report.backend), slow=True)
        if not launches:
            continue
        kernel, arguments = launches[-1]
        path = Path(folder) / f"{result.case.id}.html"
        try:
            pages[result.case.id] = write_page(kernel, path, **arguments)
        except (TesseraError, ValueError, TypeError, KeyError):
            continue  # no page for this one; the report still lists the failure
    return pages


__all__ = ["FAILING", "failure_pages", "watching_launches"]
