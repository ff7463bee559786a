"""``@ts.jit(capture_graph=True)``: a call's kernel launches as one CUDA graph.

On the ``"cuda"`` backend, the first call of a specialisation records the launches of
its host program in a CUDA graph (stream capture) and every later call replays it with
one ``cuGraphLaunch`` (:mod:`tessera.backend.ptx.driver.capture`): the runner of that
backend asks ``JitFunction.graph_capture(compiled)`` for the specialisation's
:class:`~tessera.backend.ptx.driver.capture.GraphCapture` and runs its launches
through it. The other backends launch nothing on a GPU, so there the
flag changes nothing and says so once, with a :class:`CaptureGraphWarning` at the
line that asked for it.
"""

from __future__ import annotations

import warnings
from typing import Any

from tessera.errors import user_location


class CaptureGraphWarning(UserWarning):
    """``capture_graph=True`` on a backend without CUDA graphs: it changes nothing."""


#: the source lines already warned about
_WARNED: set[tuple[str, int]] = set()


def warn_capture_ignored(name: str, backend: str) -> None:
    """Warn once per source line that ``capture_graph`` has no effect on ``backend``."""
    loc = user_location()
    if (loc.file, loc.line) in _WARNED:
        return
    _WARNED.add((loc.file, loc.line))
    warnings.warn_explicit(
        f"{name}: capture_graph=True has no effect on backend {backend!r}: only the "
        "'cuda' backend launches kernels that a CUDA graph could capture",
        CaptureGraphWarning, loc.file, loc.line)


def graph_capture(captures: dict[int, Any], compiled: Any) -> Any:
    """The :class:`~tessera.backend.ptx.driver.capture.GraphCapture` of ``compiled`` in
    ``captures`` (a function's table, by specialisation), made on first use."""
    from tessera.backend.ptx.driver.capture import GraphCapture

    found = captures.get(id(compiled))
    if found is None or found[0] is not compiled:  # the id of a collected specialisation
        found = captures[id(compiled)] = (compiled, GraphCapture())
    return found[1]


__all__ = ["CaptureGraphWarning", "graph_capture", "warn_capture_ignored"]
