"""Checks of mesh and collective arguments: tensor dims, ranks along an axis, permutations.

One set of rules for every view of a collective (a DistTensor outside ``jit``, a traced
value under ``@ts.jit``, an ``index_launch`` body, the IR's placement rules), so that a
mistake is the same error everywhere, at the user's line: an out-of-range dim or rank is
refused, never wrapped around as a Python index would be.

This module sits below the IR (it needs only NumPy and :mod:`tessera.errors`), so the
placement rules of ``ir/transforms/sharding/`` use it without loading the distributed
API (:mod:`tessera.dist`) or the mesh simulator, which use it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, MeshError, MeshShapeError

#: The most devices a simulated mesh (and so the most shards of one dim) may have; the
#: simulator keeps per-device tables, and an NVL72 rack has 72.
MAX_DEVICES = 1 << 20

#: the dim names every collective understands
NAMED_DIMS = {"row": 0, "col": 1}


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def as_tuple(x: Any, what: str, error: type[Exception], hint: str) -> tuple[Any, ...]:
    """``x`` (a list, tuple, range, 1-d array or other iterable that is not a string) as a
    tuple; anything else is ``error(...)`` with ``hint``."""
    if isinstance(x, np.ndarray) and x.ndim != 1:
        raise error(f"{what} {x!r} is not a sequence", hint=hint)
    if isinstance(x, (str, bytes, Mapping)) or not isinstance(x, Iterable):
        raise error(f"{what} {x!r} is not a sequence", hint=hint)
    return tuple(x)


def check_dim(dim: Any, ndim: int, what: str) -> int:
    """``dim`` ("row", "col" or an int in ``-ndim .. ndim-1``) as a non-negative int."""
    d = NAMED_DIMS.get(dim, dim) if isinstance(dim, str) else dim
    if not _is_int(d):
        raise ArgumentError(f"{what}: dim {dim!r} is not 'row', 'col' or an int",
                            hint="name a tensor dim: 'row' (0), 'col' (1) or an int "
                                 "(negative ones count from the end)")
    if not -ndim <= d < ndim:
        raise MeshShapeError(f"{what}: dim {dim!r} is out of range for a tensor of rank "
                             f"{ndim}", hint=f"use a dim between {-ndim} and {ndim - 1}"
                             if ndim else "a 0-d tensor has no dims to split or gather")
    return int(d) % ndim


def check_rank(x: Any, size: int | None, what: str) -> int:
    """``x`` as a rank along an axis of ``size`` devices (None: the size is not known
    yet, so only the kind and sign are checked)."""
    if not _is_int(x) or x < 0 or (size is not None and x >= size):
        where = f"0..{size - 1}" if size is not None else "0, 1, ..."
        raise MeshError(f"{what} {x!r} is not a rank in {where}",
                        hint="ranks count the devices along the axis from 0 (negative "
                             "ranks do not count from the end)")
    return int(x)


def check_perm(perm: Any, size: int | None) -> tuple[tuple[int, int], ...]:
    """``perm`` as ``(src, dst)`` pairs of ranks in which no rank sends twice and no
    rank receives twice (ranks left out receive zeros)."""
    if isinstance(perm, (str, bytes)) or not isinstance(perm, Sequence):
        raise MeshError(f"ppermute perm {perm!r} is not a list of (src, dst) pairs",
                        hint="write perm=[(0, 1), (1, 0)]")
    pairs = []
    for pair in perm:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise MeshError(f"ppermute pair {pair!r} is not (src, dst)",
                            hint="write perm=[(0, 1), (1, 0)]")
        pairs.append((check_rank(pair[0], size, "src"), check_rank(pair[1], size, "dst")))
    for side, name in ((0, "source"), (1, "destination")):
        seen = [p[side] for p in pairs]
        twice = sorted({r for r in seen if seen.count(r) > 1})
        if twice:
            raise MeshError(f"ppermute's perm is not a permutation: rank {twice[0]} is a "
                            f"{name} twice in {pairs}",
                            hint="each rank sends at most once and receives at most once")
    return tuple(pairs)


__all__ = ["MAX_DEVICES", "NAMED_DIMS", "as_tuple", "check_dim", "check_perm", "check_rank"]
