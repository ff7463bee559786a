"""``ts.tile``: the tile-level API used inside ``@ts.kernel`` bodies.

These functions describe what one tile of a running kernel does; they have meaning only
inside a kernel body, which the ``@ts.kernel`` front end compiles from its source (the
calls never run as Python). Called from ordinary Python (or from a graph function) they
raise :class:`~tessera.errors.TileContextError`.

Ids and geometry: ``linear_id()`` (``group_id() * group_size() + local_id()``),
``group_id()``, ``local_id()``, ``group_size()``, ``lane_id()`` (the tile's lanes as a 1-D
tile ``[0, 1, ..., 31]``: lanes are implicit in tile ops — element ``k`` of a tile op
is handled by lane ``k % 32`` — so ids and scalars are per tile, not per lane),
``context()`` (tile shape, autotune config and dims as attributes: ``ctx.BLOCK_M``,
``ctx.S``, ``ctx.tile_m``). Loops: ``range(start, stop, step)`` (sequential, Python
``range`` results). Memory: ``alloc_shared(shape, dtype, swizzle=, alignment=)``,
``alloc_register(dtype, shape=())``, ``cp_async(dst, src)``, ``cp_commit_group()``,
``cp_wait_group(n)``, ``barrier()``, ``load_vector(ref, width=)``,
``store_vector(ref, tile)``, masked (edge-tile) accesses ``load(ref, mask=, other=)``
and ``store(ref, value, mask=)`` with the index tile ``arange(n)``. Compute:
``mma(a, b, accumulator=)``, ``zeros``, ``full``, ``exp``, ``log``, ``sqrt``, ``abs``,
``maximum``, ``minimum``, ``where``, ``row_max``, ``row_sum``, ``reduce_sum``,
``reduce_max``, ``reduce_min``, ``reduce_mean``, ``tanh``, ``erf``, ``causal_mask``,
``cast`` (``mma``, ``row_sum`` and ``reduce_sum`` take ``exact=True``: exact accumulation
rounded once).

The errors the tile level raises are exported here too: :class:`SanitizerError`
(simulator reports), :class:`KernelCompileError`, :class:`UndefinedNameError` and
:class:`KernelResourceError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tessera.errors import TileContextError
from tessera.frontend.kernel.errors import (
    KernelCompileError,
    KernelResourceError,
    UndefinedNameError,
)
from tessera.interp.tile.errors import SanitizerError

#: every name of the tile API (the specification's, then the documented additions)
API = ("linear_id", "group_id", "lane_id", "local_id", "group_size", "range", "barrier",
       "context", "alloc_shared", "alloc_register", "cp_async", "cp_commit_group",
       "cp_wait_group", "load_vector", "store_vector", "mma", "zeros", "full", "exp",
       "row_max", "row_sum", "maximum", "causal_mask", "cast",
       "log", "sqrt", "abs", "minimum", "where", "reduce_sum", "reduce_max", "reduce_min",
       "reduce_mean", "tanh", "erf",
       "load", "store", "arange")


def _outside(name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise TileContextError(f"ts.tile.{name}() was called outside a @ts.kernel body",
                               hint="tile functions describe one tile of a running kernel: "
                                    "call them inside a function decorated with @ts.kernel")
    call.__name__ = name
    call.__qualname__ = f"tile.{name}"
    call.__doc__ = f"``ts.tile.{name}``: valid only inside a ``@ts.kernel`` body."
    call._tile_api = name  # type: ignore[attr-defined]  # how the front end knows it
    return call


globals().update({name: _outside(name) for name in API})
__all__ = [*API, "KernelCompileError", "KernelResourceError", "SanitizerError",
           "UndefinedNameError"]
