"""``ts.tile``: the tile-level API used inside ``@ts.kernel`` bodies.

These functions describe what one tile of a running kernel does; they have meaning only
while a kernel body executes. Called from ordinary Python (or from a graph function)
they raise :class:`~tessera.errors.TileContextError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tessera.errors import TileContextError

#: every name of the tile API of the specification
API = ("linear_id", "group_id", "lane_id", "local_id", "group_size", "range", "barrier",
       "context", "alloc_shared", "alloc_register", "cp_async", "cp_commit_group",
       "cp_wait_group", "load_vector", "store_vector", "mma", "zeros", "full", "exp",
       "row_max", "row_sum", "maximum", "causal_mask", "cast")


def _outside(name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise TileContextError(f"ts.tile.{name}() was called outside a @ts.kernel body",
                               hint="tile functions describe one tile of a running kernel: "
                                    "call them inside a function decorated with @ts.kernel")
    call.__name__ = name
    call.__doc__ = f"``ts.tile.{name}``: valid only inside a ``@ts.kernel`` body."
    return call


globals().update({name: _outside(name) for name in API})
__all__ = list(API)
