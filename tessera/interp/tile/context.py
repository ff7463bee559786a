"""Launch geometry and execution contexts of the tile simulator.

A launch runs ``batch × grid × group_size`` programs (tiles). The simulator executes
them *together*: every runtime value is a NumPy array whose leading axes are program
axes, followed by the tile's own axes. In the root context the program axes are
*factored* — one axis per launch coordinate, ``(batch, g0[, g1[, g2]], local)`` — and a
value has size 1 along the axes it does not depend on, so ``tile_m`` is a
``(1, G0, 1, 1)`` array and a tile loaded at ``tile_m`` is ``(1, G0, 1, 1, BM, BK)``.
NumPy broadcasting then runs each tile op once for all programs. A value with no
program axes at all (``ndim == rank``) is *uniform*: the same in every program.

Divergent control flow *compacts*: the programs that take a branch (or are still in a
loop) get a flat context with one program axis of their count, and the values they
use are gathered into it; results are scattered back when the branch ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.numerics.reductions.accumulator import ExactSum


@dataclass(frozen=True)
class LaunchGeometry:
    """The shape of a launch: batch size, grid of groups and tiles per group."""

    batch: int
    grid: tuple[int, ...]
    group_size: int

    @property
    def lead(self) -> tuple[int, ...]:
        return (self.batch, *self.grid, self.group_size)

    @property
    def n_groups(self) -> int:
        return self.batch * math.prod(self.grid)

    @property
    def n_programs(self) -> int:
        return self.n_groups * self.group_size

    def who(self, pid: int) -> dict[str, Any]:
        """Describe program ``pid`` (linear over the whole launch) for a report."""
        pid = int(pid)
        group_flat, local = divmod(pid, self.group_size)
        batch, group = divmod(group_flat, self.n_groups // self.batch)
        coords = np.unravel_index(group, self.grid)
        linear = group * self.group_size + local
        where = f"group {group}"
        if len(self.grid) > 1:
            where += f" = ({', '.join(str(int(c)) for c in coords)})"
        text = f"tile {linear} ({where}, local {local}"
        text += f", batch {batch})" if self.batch > 1 else ")"
        return {"tile": linear, "group": group, "local": local,
                "batch": batch if self.batch > 1 else None, "text": text}


def bcast(a: Any, shape: tuple[int, ...]) -> Any:
    """``np.broadcast_to`` without its cost when ``a`` already has ``shape``."""
    if getattr(a, "shape", None) == shape:
        return a
    return np.broadcast_to(a, shape)


def _axis(n: int, k: int, nlead: int) -> Any:
    """Coordinate ``k`` as a program-axis array (a 0-d scalar when the axis has size 1:
    a coordinate that cannot vary is uniform)."""
    if n == 1:
        return np.int64(0)
    shape = [1] * nlead
    shape[k] = n
    return frozen(np.arange(n, dtype=np.int64).reshape(shape))


def frozen(a: Any) -> Any:
    """``a`` made read-only (when an array): program coordinates are never modified, and
    access plans remember the analysis of read-only start arrays."""
    if isinstance(a, np.ndarray) and a.ndim:
        a.flags.writeable = False
    return a


class Ctx:
    """The programs running together: their coordinates and ids, as program axes."""

    __slots__ = ("__weakref__", "coords", "flat", "gcoords", "geom", "group_flat", "group_lin",
                 "group_shape", "lead", "linear", "memo", "nlead", "pid", "pid_flat", "size",
                 "whole")

    def __init__(self, geom: LaunchGeometry, lead: tuple[int, ...], coords: list[Any],
                 gcoords: list[Any], group_shape: tuple[int, ...], flat: bool,
                 whole: bool) -> None:
        self.geom = geom
        self.lead = lead
        self.nlead = len(lead)
        self.coords = coords
        self.gcoords = gcoords
        self.group_shape = group_shape
        self.flat = flat
        self.whole = whole
        grid = geom.grid
        group_lin: Any = 0
        for k, n in enumerate(grid):
            group_lin = group_lin * n + coords[1 + k]
        self.group_lin = frozen(group_lin)
        self.linear = frozen(group_lin * geom.group_size + coords[-1])
        gflat = coords[0] * (geom.n_groups // geom.batch) + group_lin
        self.group_flat = frozen(gflat)
        pid = gflat * geom.group_size + coords[-1]
        # (np.full, not np.broadcast_to, for one program: a sequential launch makes a
        # context per group, and broadcast_to costs microseconds)
        self.pid = bcast(frozen(pid), lead) if np.ndim(pid) else \
            frozen(np.full(lead, pid, np.int64))
        self.pid_flat = self.pid.reshape(-1)
        self.size = int(self.pid_flat.size)
        #: read-only arrays derived from the coordinates, and compacted sub-contexts,
        #: kept for the next use (a root context serves every launch of its geometry)
        self.memo: dict[Any, Any] = {}

    @classmethod
    def root(cls, geom: LaunchGeometry) -> Ctx:
        """All programs of the launch, with factored program axes. A context holds
        only read-only arrays, so launches of one geometry share it (and the access
        plans' analyses of its coordinates)."""
        ctx = _ROOTS.get(geom)
        if ctx is None:
            if len(_ROOTS) >= 32:
                _ROOTS.clear()
            ctx = _ROOTS[geom] = cls._root(geom)
        return ctx

    @classmethod
    def _root(cls, geom: LaunchGeometry) -> Ctx:
        lead = geom.lead
        coords = [_axis(n, k, len(lead)) for k, n in enumerate(lead)]
        return cls(geom, lead, coords, coords[:-1], lead[:-1], flat=False, whole=True)

    @classmethod
    def group(cls, geom: LaunchGeometry, group_flat: int) -> Ctx:
        """The tiles of one group (the sequential schedule): fresh shared storage."""
        nl = len(geom.lead)
        batch, rest = divmod(group_flat, geom.n_groups // geom.batch)
        fixed = []
        for n in reversed(geom.grid):  # row-major coordinates of ``rest`` in the grid
            rest, c = divmod(rest, n)
            fixed.append(np.int64(c))
        local = _LOCAL.get((geom.group_size, nl))
        if local is None:  # (read-only, so groups and launches share it)
            local = _LOCAL[geom.group_size, nl] = _axis(geom.group_size, nl - 1, nl)
        ones = (1,) * (nl - 1)
        return cls(geom, (*ones, geom.group_size), [np.int64(batch), *fixed[::-1], local],
                   [0] * (nl - 1), ones, flat=False, whole=False)

    # -- compaction
    def select(self, mask: Any) -> np.ndarray:
        """Flat positions (into this context's programs) where ``mask`` holds."""
        return np.flatnonzero(bcast(mask, self.lead))

    def compact(self, sel: np.ndarray) -> Ctx:
        """The sub-context of the programs at flat positions ``sel`` (the same object
        for the same positions, while this context remembers it)."""
        key = ("compact", sel.tobytes())
        sub = self.memo.get(key)
        if sub is None:
            if len(self.memo) >= 64:
                self.memo.clear()
            sub = self.memo[key] = self._compact(sel)
        return sub

    def _compact(self, sel: np.ndarray) -> Ctx:
        if self.flat:
            coords = [frozen(self.take_flat(c, sel)) for c in self.coords]
            gcoords = [frozen(self.take_flat(c, sel)) if getattr(c, "ndim", 0) else c
                       for c in self.gcoords]
        else:
            # factored axes: an array coordinate is the position along its axis
            pos = [frozen(p) for p in np.unravel_index(sel, self.lead)]
            coords = [pos[k] if getattr(c, "ndim", 0) else
                      frozen(np.full(sel.size, c, np.int64)) for k, c in enumerate(self.coords)]
            gcoords = [pos[k] if getattr(c, "ndim", 0) else c
                       for k, c in enumerate(self.gcoords)]
        return Ctx(self.geom, (int(sel.size),), coords, gcoords, self.group_shape, flat=True,
                   whole=False)

    def take_flat(self, a: Any, sel: np.ndarray) -> np.ndarray:
        """A program-shaped array (no tile axes) gathered at ``sel``."""
        if getattr(a, "ndim", 0) == 0:
            return np.full(sel.size, a, dtype=np.asarray(a).dtype)
        return bcast(a, self.lead).reshape(-1)[sel]

    def take(self, v: Any, rank: int, sel: np.ndarray) -> Any:
        """A value of tile rank ``rank`` gathered at programs ``sel`` (uniform values
        and compile-time objects pass through)."""
        if hasattr(v, "take_programs"):
            return v.take_programs(self, sel)
        if type(v) is ExactSum:  # each operand and start value holds the programs' values
            return v.map_arrays(lambda x: self.take(x, rank, sel))
        if not isinstance(v, np.ndarray) or v.ndim <= rank:
            return v
        tile = v.shape[v.ndim - rank:]
        return bcast(v, self.lead + tile).reshape((-1, *tile))[sel]

    def merge(self, parts: list[tuple[np.ndarray, Any]], rank: int) -> Any:
        """Scatter per-subset values back into one value of this context."""
        values = [v for _, v in parts]
        if any(type(v) is ExactSum for v in values):
            return self._merge_exact(parts, rank)
        if all(not isinstance(v, np.ndarray) or v.ndim <= rank for v in values):
            first = values[0]
            # the same bits on every side (not ==: -0.0 and 0.0 differ, NaNs are equal)
            if all(v is first for v in values) or all(
                    np.asarray(v).dtype == np.asarray(first).dtype and
                    np.shape(v) == np.shape(first) and
                    np.asarray(v).tobytes() == np.asarray(first).tobytes() for v in values):
                return first
        if hasattr(values[0], "merge_programs"):
            return values[0].merge_programs(self, parts)
        arrays = [np.asarray(v) for v in values]
        tile = arrays[0].shape[arrays[0].ndim - rank:] if rank else ()
        out = np.empty((self.size, *tile), dtype=np.result_type(*arrays))
        for (sel, _), a in zip(parts, arrays):
            out[sel] = a
        return out.reshape(self.lead + tile)

    def _merge_exact(self, parts: list[tuple[np.ndarray, Any]], rank: int) -> Any:
        """Merge values of which some are exact accumulators (:class:`ExactSum`): array
        by array where every part holds the same sum's structure, else as the
        reference's integer counts (an object array; the exact slot it reaches makes it
        an accumulator again)."""
        first = parts[0][1]
        if all(v is first for _, v in parts):
            return first
        if all(type(v) is ExactSum and v.same_structure(first) for _, v in parts):
            columns = zip(*(v.arrays() for _, v in parts))
            merged = [self.merge([(sel, x) for (sel, _), x in zip(parts, col)], rank)
                      for col in columns]
            return first.map_arrays(lambda _: merged.pop(0))
        return self.merge([(sel, np.asarray(v)) for sel, v in parts], rank)

    def flat_index(self) -> Any:
        """The index of these programs into per-program state arrays."""
        return slice(None) if self.whole else self.pid_flat


_ROOTS: dict[LaunchGeometry, Ctx] = {}
#: the local-id axis of a group context, per (group size, program axes)
_LOCAL: dict[tuple[int, int], Any] = {}

__all__ = ["Ctx", "LaunchGeometry", "bcast", "frozen"]
