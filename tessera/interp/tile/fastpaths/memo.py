"""Results the tile simulator remembers because their inputs are read-only arrays.

A launch's program coordinates (``linear_id``, ``local_id``, ``g0``, ...) are made
once per launch geometry and are read-only; so is what is computed from them alone
(``tile_m = g0 * BM``, ``local_id() == 0``). Analyses of such arrays (access plans,
bounds, loop layouts, branch selections) are remembered by the arrays' identity, so
repeated launches pay for them once. Entries hold weak references: an id reused by a
new array after the old one died finds a dead reference, never a hit. Tile values are
never modified in place, so the same read-only object holds the same values.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.interp.tile.context import frozen
from tessera.interp.tile.fastpaths import register


class ArrayMemo:
    """Results computed from read-only arrays (program coordinates: made once per
    launch geometry and used by many ops) and scalars, remembered by the arrays'
    identity, the scalars' types and values and an extra key. Entries hold weak
    references: an id reused by a new array after the old one died finds a dead
    reference, not a hit. A writeable array operand is never remembered; results of
    scalars alone only in a table of their own, of ``scalar_size`` entries (none by
    default), so that a loop cycling through indices does not evict the rest."""

    def __init__(self, size: int = 256, scalar_size: int = 0) -> None:
        self.size, self.scalar_size = size, scalar_size
        self.entries: dict[Any, tuple[list[weakref.ref[np.ndarray]], Any]] = {}
        self.scalar_entries: dict[Any, Any] = {}

    def get(self, a: Any, extra: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, remembered for ``(a, extra)`` when ``a`` is a read-only array
        (the key :meth:`lookup` makes for ``((a,), extra)``, without its generality)."""
        if type(a) is not np.ndarray or not a.ndim or a.flags.writeable:
            return compute()
        k = (extra, id(a))
        hit = self.entries.get(k)
        if hit is not None and hit[0][0]() is a:
            return hit[1]
        return self._store(k, [a], compute())

    def lookup(self, items: Any, extra: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, remembered for the arrays and scalars ``items`` and ``extra``."""
        key: list[Any] = [extra]
        arrays: list[np.ndarray] = []
        for a in items:
            t = type(a)
            if t is np.ndarray:
                if not a.ndim:
                    key.append((t, a.item()))
                elif a.flags.writeable:
                    return compute()
                else:
                    arrays.append(a)
                    key.append(id(a))  # an int: never equal to a scalar's (type, value)
            elif t in _SCALARS or isinstance(a, np.generic):
                key.append((t, a))
            else:
                return compute()
        k = tuple(key)
        if not arrays:
            if not self.scalar_size:
                return compute()
            found = self.scalar_entries.get(k)
            if found is None:
                if len(self.scalar_entries) >= self.scalar_size:
                    self.scalar_entries.clear()
                found = self.scalar_entries[k] = compute()
            return found
        hit = self.entries.get(k)
        if hit is not None:
            for r, a in zip(hit[0], arrays):
                if r() is not a:
                    break
            else:
                return hit[1]
        return self._store(k, arrays, compute())

    def _store(self, k: Any, arrays: list[np.ndarray], found: Any) -> Any:
        if len(self.entries) >= self.size:
            self.entries.clear()
        self.entries[k] = ([weakref.ref(a) for a in arrays], found)
        return found


_SCALARS = (int, float, bool)


@register("coordinate_memo")
def coordinate_memo(impl: Callable[..., Any]) -> Callable[..., Any]:
    """``impl``, remembering its last results for operands that are read-only arrays
    (program coordinates and what is computed from them: ``tile_m = g0 * BM``, masks
    such as ``local_id() == 0``) and scalars. Such a result is the same object in every
    launch of a geometry, made read-only, so the access plans, bounds checks and branch
    selections computed from it are remembered too. The compiler applies it to pure ops
    with one integer or boolean result (index arithmetic, masks).

    Proof: a pure op's result is a function of its operands' values and types; a
    read-only array is never modified and is keyed by identity with a weak reference
    (a dead array's reused address is a miss), a scalar by its type and value, so a
    remembered result holds the values ``impl`` would compute. The result is made
    read-only, which no rule observes (tile values are never modified in place), and
    integer and boolean ops raise no report."""
    memo = ArrayMemo(8)
    return lambda *args: memo.lookup(args, None, lambda: frozen(impl(*args)))


__all__ = ["ArrayMemo", "coordinate_memo"]
