"""The explain command's own user mistake: explaining what is neither a kernel nor a
graph function."""

from __future__ import annotations

from tessera.errors import ArgumentError


class ExplainError(ArgumentError):
    """``tessera explain`` was pointed at something it cannot explain (a class, a
    constant, a builtin): only ``@ts.kernel`` and graph functions have pages."""

    kind = "explain error"


__all__ = ["ExplainError"]
