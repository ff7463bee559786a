"""Memory accesses that one specialisation of a kernel is sure to make out of bounds.

The autotuner uses this to drop configurations that do not fit the call's shapes (a
``BLOCK_M`` of 128 for a sequence of 192 makes the second query block read rows
128..255): every configuration is compiled for the call's shapes, and a configuration
is invalid when some tile of its launch is *certain* to touch memory outside a tensor
(or outside a shared buffer, or outside the result of a returned tile).

The analysis is an interval analysis over the Tile IR's integer scalars. Each value
gets a :class:`Span` ``[lo, hi]`` that contains every value it takes, and a flag
``exact`` saying that both ends are taken by some tile that reaches the value:

* ``grid_coord(a)`` is ``[0, grid[a] - 1]``, ``local_id()`` ``[0, group_size - 1]``,
  ``group_id()`` and ``linear_id()`` likewise: exact;
* the index of ``tile.for`` with constant bounds is exactly ``range(lo, hi, step)``;
  with bounds that vary per tile it is bounded by their spans, not exact;
* ``+``, ``-``, ``*``, ``min``, ``max`` of two spans bound every result; the result is
  exact when both are and they depend on different ids and loop indices (so their
  ends can be taken together); ``// c`` and unary minus keep exactness; ``% c`` is
  ``[0, c - 1]``;
* anything else (loop-carried values, kernel scalars, values read from memory) is
  unbounded and not exact.

An access is reported only when the view is reached by every tile (not inside a
``tile.if`` or ``tile.while``, nor a loop whose trip count varies) and one of its
starts is exact and reaches past the memory along its axis. So a guarded access
(``if i < n: x[i]``) is never reported, and no report is a false alarm: the simulator
would report the same access when the launch runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.errors import Loc
from tessera.frontend.kernel.errors import KernelBoundsError
from tessera.ir.core import Block, Function, Instr, Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType

INF = math.inf


@dataclass(frozen=True)
class Span:
    """Every value an integer scalar takes lies in ``[lo, hi]``; ``exact``: both ends
    are taken; ``leaves``: the ids and loop indices it is computed from."""

    lo: float
    hi: float
    exact: bool = False
    leaves: frozenset[object] = frozenset()


UNKNOWN = Span(-INF, INF)
_COORDS = frozenset(("coord", a) for a in range(3))


def _combine(a: Span, b: Span, lo: float, hi: float) -> Span:
    together = a.exact and b.exact and not (a.leaves & b.leaves)
    return Span(lo, hi, together, a.leaves | b.leaves)


def _mul(a: Span, b: Span) -> Span:
    corners = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    if any(math.isnan(c) for c in corners):  # 0 * inf: nothing is known
        return UNKNOWN
    return _combine(a, b, min(corners), max(corners))


class Bounds:
    """The spans of one kernel function's integer scalars, and its sure violations."""

    def __init__(self, fn: Function) -> None:
        self.grid = tuple(int(g) for g in fn.attrs.get("grid", (1,)))
        self.group_size = int(fn.attrs.get("group_size", 1))
        self.fn = fn
        self.spans: dict[Value, Span] = {}

    # -- spans
    def span(self, v: Value) -> Span:
        """The span of ``v`` (loop indices are set when their loop is visited)."""
        found = self.spans.get(v)
        if found is None:
            found = self.spans[v] = self._compute(v) if isinstance(v.owner, Instr) \
                else UNKNOWN
        return found

    def _compute(self, v: Value) -> Span:
        instr = v.owner
        assert isinstance(instr, Instr)
        op, args = instr.op, instr.operands
        groups = math.prod(self.grid)
        if isinstance(op, tile_ir.Constant):
            value = op.value
            if isinstance(value, int) and not isinstance(value, bool):
                return Span(value, value, True)
            return UNKNOWN
        if isinstance(op, tile_ir.GridCoord):
            n = self.grid[op.axis] if op.axis < len(self.grid) else 1
            return Span(0, n - 1, True, frozenset({("coord", op.axis)}))
        if isinstance(op, tile_ir.LocalId):
            return Span(0, self.group_size - 1, True, frozenset({"local"}))
        if isinstance(op, tile_ir.GroupId):
            return Span(0, groups - 1, True, _COORDS)
        if isinstance(op, tile_ir.LinearId):
            return Span(0, groups * self.group_size - 1, True, _COORDS | {"local"})
        if isinstance(op, tile_compute.Neg):
            a = self.span(args[0])
            return Span(-a.hi, -a.lo, a.exact, a.leaves)
        if isinstance(op, tile_compute.Cast) and isinstance(v.type, TensorType) and \
                getattr(op.to, "kind", "") == "int" and \
                getattr(args[0].type.element, "kind", "") == "int":  # type: ignore[attr-defined]
            return self.span(args[0])
        if len(args) != 2:
            return UNKNOWN
        a, b = self.span(args[0]), self.span(args[1])
        if isinstance(op, tile_compute.Add):
            return _combine(a, b, a.lo + b.lo, a.hi + b.hi)
        if isinstance(op, tile_compute.Sub):
            return _combine(a, b, a.lo - b.hi, a.hi - b.lo)
        if isinstance(op, tile_compute.Mul):
            return _mul(a, b)
        if isinstance(op, tile_compute.Minimum):
            return _combine(a, b, min(a.lo, b.lo), min(a.hi, b.hi))
        if isinstance(op, tile_compute.Maximum):
            return _combine(a, b, max(a.lo, b.lo), max(a.hi, b.hi))
        constant = b.lo == b.hi and b.lo > 0 and not math.isinf(b.lo)
        if isinstance(op, tile_compute.FloorDiv) and constant:
            c = int(b.lo)
            return Span(math.floor(a.lo / c) if math.isfinite(a.lo) else a.lo,
                        math.floor(a.hi / c) if math.isfinite(a.hi) else a.hi,
                        a.exact, a.leaves)
        if isinstance(op, tile_compute.Mod) and constant:
            if 0 <= a.lo and a.hi < b.lo:
                return a
            return Span(0, b.lo - 1, False, a.leaves)
        return UNKNOWN

    def _loop(self, instr: Instr) -> tuple[Span | None, bool]:
        """The span of a loop's index (None: no tile runs the body) and whether every
        tile that reaches the loop runs every trip of it (constant bounds)."""
        lo, hi, step = (self.span(v) for v in instr.operands[:3])
        const = all(s.lo == s.hi and math.isfinite(s.lo) for s in (lo, hi, step))
        if const and step.lo != 0:
            trips = range(int(lo.lo), int(hi.lo), int(step.lo))
            if not trips:
                return None, True
            first, last = trips[0], trips[-1]
            return Span(min(first, last), max(first, last), True,
                        frozenset({("loop", id(instr))})), True
        if step.lo > 0 and math.isfinite(lo.lo):
            if hi.hi <= lo.lo:
                return None, False
            return Span(lo.lo, hi.hi - 1), False
        return UNKNOWN, False

    # -- violations
    def violations(self) -> list[tuple[Loc, str]]:
        """Every access sure to be out of bounds: its line in the kernel, and what."""
        out: list[tuple[Loc, str]] = []
        self._walk(self.fn.body, True, out)
        return out

    def _walk(self, block: Block, every: bool, out: list[tuple[Loc, str]]) -> None:
        for instr in block.instrs:
            op = instr.op
            if isinstance(op, tile_ir.For):
                index, whole = self._loop(instr)
                if index is None:
                    continue  # no tile runs the body
                body = instr.regions[0].block
                self.spans[body.args[0]] = index
                self._walk(body, every and whole, out)
            elif instr.regions:
                for region in instr.regions:
                    self._walk(region.block, False, out)
            elif isinstance(op, tile_memory.View):
                self._view(instr, every, out)
            elif isinstance(op, tile_ir.Return) and "result_shape" in self.fn.attrs:
                self._returned(instr, out)

    def _view(self, instr: Instr, every: bool, out: list[tuple[Loc, str]]) -> None:
        mem = instr.operands[0].type
        if not every or not isinstance(mem, MemRefType):
            return
        for axis, (start, size) in enumerate(zip(instr.operands[1:], instr.op.sizes)):
            s = self.span(start)
            dim = mem.shape[axis]
            if s.exact and (s.lo < 0 or s.hi + size > dim):
                bad = int(s.lo) if s.lo < 0 else int(s.hi)
                out.append((instr.loc, f"{_name(instr.operands[0])}[{bad}:{bad + size}] "
                                       f"along axis {axis}, which has {dim} elements"))
                return

    def _returned(self, instr: Instr, out: list[tuple[Loc, str]]) -> None:
        if not instr.operands or not isinstance(instr.operands[0].type, TensorType):
            return
        tile = instr.operands[0].type.shape
        shape = tuple(self.fn.attrs["result_shape"])
        if self.fn.attrs.get("result_batched"):
            shape = shape[1:]
        for axis, (n, size) in enumerate(zip(self.grid, tile)):
            if axis < len(shape) and n * size > shape[axis]:
                start = (n - 1) * size
                out.append((instr.loc, f"the returned tile of group {n - 1} along axis "
                                       f"{axis} goes to rows {start}:{start + size} of a "
                                       f"result with {shape[axis]}"))
                return


def _name(v: Value) -> str:
    """The name of the memory a view is taken of (its parameter, or 'shared buffer')."""
    while isinstance(v.owner, Instr) and isinstance(v.owner.op, tile_memory.View):
        v = v.owner.operands[0]
    t = v.type
    if isinstance(t, MemRefType) and t.space == "shared":
        return "shared buffer"
    return v.hint or "memory"


def sure_violations(fn: Function) -> list[str]:
    """The accesses of ``fn`` (one specialisation) certain to fall outside memory, as
    ``file:line: what`` lines."""
    return [f"{loc}: {what}" for loc, what in Bounds(fn).violations()]


def refuse_out_of_bounds(fn: Function) -> None:
    """Raise a :class:`KernelBoundsError` at the first access of ``fn`` certain to fall
    outside memory: compiled for a GPU, it would read or write another allocation (or
    fault) where the interpreters report it."""
    found = Bounds(fn).violations()
    if found:
        loc, what = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise KernelBoundsError(
            f"kernel '{fn.name}' is sure to access memory out of bounds for these shapes: "
            f"{what}{more}; on a GPU it would read or write past the tensor",
            loc=loc, hint="choose tile sizes that divide the shapes, guard the access "
                          "(if i < n: ...), or mask it (ts.tile.load/store with mask=)")


__all__ = ["Bounds", "Span", "refuse_out_of_bounds", "sure_violations"]
