"""The collectives that move a value from one placement to another.

``conversion(t, want)`` lists the collective ops that take a value of type ``t`` to the
placement ``want``, cheapest first, each step checked by the collective's own rule:

1. partial axes that ``want`` does not keep are reduced, all axes of one kind in one
   collective: ``reduce_scatter`` onto the dim ``want`` shards over them, else
   ``all_reduce``;
2. an axis that moves from one dim to another is exchanged with ``all_to_all``;
3. axes that split a dim differently in ``want`` are gathered (``all_gather``; a dim
   split unevenly over several axes is gathered whole);
4. axes ``want`` adds to a dim are taken by slicing (``shard``, no communication).
"""

from __future__ import annotations

from tessera.ir.core import Op
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.transforms.sharding.check import PLACEMENT_RULES
from tessera.ir.types import Sharding, TensorType


def _prefix(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return b[:len(a)] == a


def _attr(axes: list[str] | tuple[str, ...]) -> str | tuple[str, ...]:
    return axes[0] if len(axes) == 1 else tuple(axes)


class _Walk:
    """The current placement of the value and the ops that led there."""

    def __init__(self, t: TensorType) -> None:
        assert t.sharding is not None
        self.type = t
        self.ops: list[Op] = []

    @property
    def cur(self) -> Sharding:
        assert self.type.sharding is not None
        return self.type.sharding

    def step(self, op: Op) -> None:
        rule = PLACEMENT_RULES[type(op)]
        plan = rule(op, [self.type], [self.type.unplaced()], self.cur.mesh)
        if plan.operands[0] != self.cur:
            raise AssertionError(f"{op.name} cannot take {self.cur}")  # a converter bug
        self.type = self.type.placed(plan.results[0])
        self.ops.append(op)


def kept(have: tuple[str, ...], need: tuple[str, ...], n: object, s: Sharding) -> int:
    """How many leading axes of ``have`` a dim keeps on its way to ``need``.

    Only the common prefix, and none when the split is uneven: ``numpy.array_split``
    pieces over several axes do not nest (6 over 2 x 2 is 2, 2, 1, 1, but 6 over 2 is
    3, 3), so such a dim is gathered whole and split again.
    """
    keep = 0
    while keep < min(len(have), len(need)) and have[keep] == need[keep]:
        keep += 1
    changes = keep < len(have) or keep < len(need)
    if keep and changes and (not isinstance(n, int) or n % s.size(have) or n % s.size(need)):
        keep = 0
    return keep


def conversion(t: TensorType, want: Sharding) -> list[Op]:
    """The collectives that take a value of type ``t`` to placement ``want``."""
    walk = _Walk(t)
    scatter: dict[int, list[str]] = {}
    combine: dict[str, list[str]] = {}
    for axis, kind in t.sharding.partial if t.sharding else ():
        if want.partial_op(axis) == kind:
            continue
        d = want.dim_of(axis)
        if kind == "sum" and d is not None:
            scatter.setdefault(d, []).append(axis)
        else:
            combine.setdefault(kind, []).append(axis)
    for d, axes in scatter.items():
        axes.sort(key=want.dims[d].index)
        have = walk.cur.dims[d]
        if _prefix(have + tuple(axes), want.dims[d]) and \
                kept(have, have + tuple(axes), t.shape[d], walk.cur) == len(have):
            walk.step(graph_ir.ReduceScatter(_attr(axes), d))
        else:
            combine.setdefault("sum", []).extend(axes)
    for kind, axes in combine.items():
        walk.step(graph_ir.AllReduce(_attr(axes), kind))
    for axis in walk.cur.sharded_axes:
        d1, d2 = walk.cur.dim_of(axis), want.dim_of(axis)
        if d1 is None or d2 is None or d1 == d2:
            continue
        here, there = walk.cur.dims[d1], walk.cur.dims[d2]
        if here[-1:] == (axis,) and _prefix(here[:-1], want.dims[d1]) and \
                _prefix((*there, axis), want.dims[d2]) and \
                kept(here, here[:-1], t.shape[d1], walk.cur) == len(here) - 1 and \
                kept(there, (*there, axis), t.shape[d2], walk.cur) == len(there):
            walk.step(graph_ir.AllToAll(axis, split_dim=d2, concat_dim=d1))
    for d in range(len(want.dims)):
        have, need = walk.cur.dims[d], want.dims[d]
        extra = have[kept(have, need, t.shape[d], walk.cur):]
        if extra:
            walk.step(graph_ir.AllGather(_attr(extra)))
    for d in range(len(want.dims)):
        extra = want.dims[d][len(walk.cur.dims[d]):]
        if extra:
            walk.step(graph_ir.Shard(_attr(extra), d))
    if walk.cur != want:
        raise AssertionError(f"no conversion from {t.sharding} to {want}")  # a converter bug
    return walk.ops


__all__ = ["conversion"]
