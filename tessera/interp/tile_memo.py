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

from tessera.interp.tile_context import frozen


class ArrayMemo:
    """Results computed from read-only arrays (program coordinates: made once per
    launch geometry and used by many ops), remembered by the array's identity and an
    extra key. Entries hold weak references: an id reused by a new array after the old
    one died finds a dead reference, not a hit."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.entries: dict[Any, tuple[weakref.ref[np.ndarray], Any]] = {}

    def get(self, a: np.ndarray, extra: Any, compute: Any) -> Any:
        """``compute()``, remembered for ``(a, extra)`` when ``a`` is read-only."""
        if not isinstance(a, np.ndarray) or a.flags.writeable:
            return compute()
        key = (id(a), extra)
        hit = self.entries.get(key)
        if hit is not None and hit[0]() is a:
            return hit[1]
        found = compute()
        if len(self.entries) >= self.size:
            self.entries.clear()
        self.entries[key] = (weakref.ref(a), found)
        return found


def coordinate_memo(impl: Callable[..., Any]) -> Callable[..., Any]:
    """``impl``, remembering its last results for operands that are read-only arrays
    (program coordinates and what is computed from them: ``tile_m = g0 * BM``, masks
    such as ``local_id() == 0``) and scalars. Such a result is the same object in every
    launch of a geometry, made read-only, so the access plans, bounds checks and branch
    selections computed from it are remembered too. Weak references: a dead operand
    never answers for a new array."""
    memo: dict[tuple[Any, ...], tuple[list[weakref.ref[np.ndarray]], Any]] = {}

    def run(*args: Any) -> Any:
        key: list[Any] = []
        arrays: list[np.ndarray] = []
        for a in args:
            if isinstance(a, np.ndarray) and a.ndim:
                if a.flags.writeable:
                    return impl(*args)
                arrays.append(a)
                key.append((id(a),))
            elif isinstance(a, (int, float, bool, np.generic, np.ndarray)):
                key.append((type(a).__name__, a.item() if hasattr(a, "item") else a))
            else:
                return impl(*args)
        if not arrays:
            return impl(*args)
        k = tuple(key)
        hit = memo.get(k)
        if hit is not None and all(r() is a for r, a in zip(hit[0], arrays)):
            return hit[1]
        out = frozen(impl(*args))
        if len(memo) >= 8:
            memo.clear()
        memo[k] = ([weakref.ref(a) for a in arrays], out)
        return out
    return run


__all__ = ["ArrayMemo", "coordinate_memo"]
