"""Lowering of masked (edge-tile) accesses: ``tile.arange``, the masks built from it,
``tile.masked_load`` and ``tile.masked_store``.

**Index tensors are computed where they are used.** ``arange`` and what elementwise
ops, broadcasts and unit reshapes make of it with scalars (``offs = i + arange(64)``,
``offs < n``, ``rows[:, None] & cols[None, :]``) lower to :class:`Indexed` values: a
function of an element's coordinates, not registers. The consumer's layout decides
which elements a thread holds, and the thread computes exactly those, so a mask never
moves between threads (a ``(BM,)`` row mask broadcast to a ``(BM, BN)`` tile is
recomputed from each element's row). An op that meets a register tensor evaluates its
index operands in that tensor's layout first.

**Masked accesses are guarded ones.** Each element a thread holds gets its own
predicate: the mask at that element, and for a blocked layout's last chunk, that the
chunk lies inside the tile. A masked load is ``@%p ld.global`` with the ``other``
value where ``%p`` is false (:class:`~tessera.ir.dialects.target.guarded.GuardedLoad`),
a masked store ``@%p st.global``: a masked-off element is never addressed, so a window
that reaches past the tensor's edge reads and writes only inside it, as the tile
simulator's rule has it (:mod:`tessera.interp.tile.reference.masked`). A masked load is
read when it runs, into its own layout (a later store may change the memory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.guarded import GuardedLoad, GuardedStore
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import ids as tile_ids
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.lower.core import Lowerer, Rule, rule
from tessera.lower.emit import BYTE_TYPES, TargetEmitter
from tessera.lower.layout import Acc, Blocked, BRow
from tessera.lower.rules.memory import address, to_mem, to_reg, window
from tessera.lower.rules.memory import byte_load_guarded as _byte_load
from tessera.lower.rules.scalar import round_to
from tessera.lower.rules.tensor import _clamped, chunk_index, materialize, register_count
from tessera.lower.values import Dist, Indexed, Lowered, Mem, Scalar, mem_type, reg_type

#: ops that compute an index tensor from index tensors and scalars, element by element
LAZY = (tile_compute.Binary, tile_compute.Unary, tile_compute.Where, tile_compute.Cast,
        tile_compute.Broadcast, tile_compute.Reshape)


class Elements:
    """The elements a thread holds of a tensor in ``layout``: their coordinates
    (``s32`` registers, computed once per register) and, for a blocked layout's last
    chunk, whether the element is inside the tensor at all. A row statistic (``BRow``)
    register stands for its row, at coordinate 0 of the reduced axis (which a result
    without that axis ignores); only the register of the row's first chunk is
    *inside*, so each row is written once."""

    def __init__(self, e: TargetEmitter, layout: Any) -> None:
        if not isinstance(layout, (Blocked, Acc, BRow)):
            raise UnsupportedError(f"masked accesses of a tensor in layout {layout} are not "
                                   "lowered", loc=e.loc, hint="mask a blocked or mma tile")
        self.e, self.layout = e, layout
        self.count = register_count(layout)
        self._coords: dict[int, tuple[Value, ...]] = {}
        self._acc: list[tuple[Value, Value]] | None = None

    def coords(self, r: int) -> tuple[Value, ...]:
        """The coordinates of register ``r``'s element."""
        if r not in self._coords:
            self._coords[r] = self._make(r)
        return self._coords[r]

    def _make(self, r: int) -> tuple[Value, ...]:
        e, layout = self.e, self.layout
        if isinstance(layout, Acc):
            if self._acc is None:
                from tessera.lower.sm80.gemm import acc_rowcol

                self._acc = acc_rowcol(e, layout.rows, layout.cols)
            return self._acc[r]
        if isinstance(layout, BRow):
            parent = layout.parent
            k = _clamped(e, parent, r)
            out = [e.const(0, "s32")]
            k = e.bin("div", k, e.const(parent.shape[-1], "s32"), "s32")
            for d in reversed(parent.shape[1:-1]):
                out.append(e.bin("rem", k, e.const(d, "s32"), "s32"))
                k = e.bin("div", k, e.const(d, "s32"), "s32")
            return (k, *reversed(out))
        j, c = divmod(r, layout.vec)
        k = _clamped(e, layout, j)  # a chunk past the end reads a valid one's coordinates
        k = e.add(k, e.const(c, "s32"), "s32") if c else k
        out: list[Value] = []
        for d in reversed(layout.shape[1:]):
            out.append(e.bin("rem", k, e.const(d, "s32"), "s32"))
            k = e.bin("div", k, e.const(d, "s32"), "s32")
        return (k, *reversed(out))

    def inside(self, r: int) -> Value | None:
        """A predicate: register ``r`` holds an element of the tensor (None: always)."""
        layout = self.layout
        if isinstance(layout, BRow):
            return self._first_of_row(r)
        if isinstance(layout, Acc) or (r // layout.vec + 1) * 128 <= layout.chunks:
            return None
        e = self.e
        return e.setp("lt", chunk_index(e, layout, r // layout.vec),
                      e.const(layout.chunks * layout.vec, "s32"), "s32")


    def _first_of_row(self, r: int) -> Value:
        e, parent = self.e, self.layout.parent
        k = chunk_index(e, parent, r)
        first = e.setp("eq", e.bin("rem", k, e.const(parent.shape[-1], "s32"), "s32"),
                       e.const(0, "s32"), "s32")
        if (r + 1) * 128 <= parent.chunks:
            return first
        inside = e.setp("lt", k, e.const(parent.chunks * parent.vec, "s32"), "s32")
        return e.bin("and", first, inside, "pred")


def elements(low: Lowerer, layout: Any) -> Elements:
    """The :class:`Elements` of ``layout`` in the block being lowered: one per block, so
    the coordinates are computed once there (a block's earlier values dominate its later
    instructions)."""
    e = low.em
    cache = low.extra.setdefault("elements", {})
    key = (id(e.block), layout)
    if key not in cache or cache[key][0] is not e.block:
        cache[key] = (e.block, Elements(e, layout))
    return cache[key][1]


def evaluate(low: Lowerer, ix: Indexed, layout: Any,
             els: Elements | None = None) -> Dist:
    """The elements of ``ix`` this thread holds in ``layout``, as registers."""
    els = els or elements(low, layout)
    return Dist(layout, [ix.at(low.em, lambda a, r=r: els.coords(r)[a])
                         for r in range(els.count)], ix.type)


def _splat(low: Lowerer, v: Value) -> Scalar | None:
    """The scalar a tensor operand broadcasts (``tile.broadcast`` of a scalar), or None."""
    owner = v.owner
    if isinstance(owner, Instr) and isinstance(owner.op, tile_compute.Broadcast):
        x = low.env.get(owner.operands[0])
        if isinstance(x, Scalar):
            return x
    return None


def through_indexed(low: Lowerer, instr: Instr, args: list[Lowered], fn: Rule) -> list[Lowered]:
    """Apply rule ``fn`` to operands of which some are :class:`Indexed`: lazily (an
    index tensor again) when every operand is one or a scalar, else after evaluating
    them in their operand's layout."""
    if isinstance(instr.op, (tile_memory.MaskedLoad, tile_memory.MaskedStore)):
        return fn(low, instr, args)  # they evaluate their masks where they need them
    if isinstance(instr.op, LAZY):
        scalars = [a if isinstance(a, (Indexed, Scalar)) else _splat(low, v)
                   for a, v in zip(args, instr.operands)]
        if all(s is not None for s in scalars):
            return [_lazy(low, instr, scalars, fn)]  # type: ignore[arg-type]
    return fn(low, instr, [settle(low, v, a) for a, v in zip(args, instr.operands)])


def settle(low: Lowerer, v: Value, lv: Lowered) -> Lowered:
    """``lv`` as registers if it is an index tensor (in the layout of ``v``)."""
    if not isinstance(lv, Indexed):
        return lv
    return evaluate(low, lv, low.layouts.get(v))


def _zero(e: TargetEmitter) -> Value:
    return e.const(0, "s32")


def _trend(x: Indexed | Scalar) -> str:
    return x.trend if isinstance(x, Indexed) else "flat"


#: ops whose result keeps the order of their operands along the last axis, and those
#: that reverse the second operand's (an Lt of a rising and a falling tile falls)
_KEEP = (tile_compute.Add, tile_compute.And, tile_compute.Or, tile_compute.Maximum,
         tile_compute.Minimum)
_CMP = {tile_compute.Lt: ("rise", "fall"), tile_compute.Le: ("rise", "fall"),
        tile_compute.Gt: ("fall", "rise"), tile_compute.Ge: ("fall", "rise")}


def _combined(op: Any, args: list[Indexed | Scalar]) -> str:
    """The trend of an elementwise op's result from its operands' (``Indexed.trend``)."""
    trends = [_trend(a) for a in args]
    if all(t == "flat" for t in trends):
        return "flat"
    if isinstance(op, tile_compute.Sub) and trends[1] in ("flat", "rise", "fall"):
        trends[1] = {"rise": "fall", "fall": "rise"}.get(trends[1], "flat")
    elif type(op) in _CMP:
        first, second = _CMP[type(op)]
        ok = trends[0] in (first, "flat") and trends[1] in (second, "flat")
        return "fall" if ok else ""
    elif not isinstance(op, (*_KEEP, tile_compute.Sub)):
        return ""
    moving = {t for t in trends if t != "flat"}
    return moving.pop() if len(moving) == 1 and "" not in moving else ""


def _lazy(low: Lowerer, instr: Instr, args: list[Indexed | Scalar], fn: Rule) -> Indexed:
    op = instr.op
    t = instr.results[0].type
    assert isinstance(t, TensorType)
    shape = tuple(t.shape)
    last = len(shape) - 1
    if isinstance(op, tile_compute.Broadcast):
        x = args[0]
        if isinstance(x, Scalar):
            return Indexed(shape, lambda e, c: x.reg, x.type, "flat")
        dims = op.dims
        src = [k for k, d in enumerate(dims) if d == last and x.shape[k] != 1]
        trend = "flat" if not src else x.trend if src == [len(x.shape) - 1] else ""
        return Indexed(shape, lambda e, c: x.at(e, lambda k: c(dims[k]) if x.shape[k] != 1
                                               else _zero(e)), x.type, trend)
    if isinstance(op, tile_compute.Reshape):
        x = args[0]
        assert isinstance(x, Indexed)
        src = [k for k, d in enumerate(x.shape) if d != 1]
        dst = [k for k, d in enumerate(shape) if d != 1]
        if [x.shape[k] for k in src] != [shape[k] for k in dst]:
            raise UnsupportedError("a reshape of an index tensor that moves elements is not "
                                   "lowered", loc=instr.loc)
        where = dict(zip(src, dst))
        trend = ("flat" if shape[-1] == 1 else x.trend
                 if where.get(len(x.shape) - 1) == last else "")
        return Indexed(shape, lambda e, c: x.at(e, lambda k: c(where[k]) if k in where
                                               else _zero(e)), x.type, trend)
    rtype = reg_type(t.element, f"{op.name}: ")

    def at(e: TargetEmitter, coord: Callable[[int], Value]) -> Value:
        ins: list[Lowered] = [Scalar(a.at(e, coord), a.type) if isinstance(a, Indexed) else a
                              for a in args]
        low.stack.append(e)
        try:
            out = fn(low, instr, ins)[0]
        finally:
            low.stack.pop()
        assert isinstance(out, Scalar)
        return out.reg
    return Indexed(shape, at, rtype, _combined(op, args))


@rule(tile_ids.Arange)
def _arange(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, tile_ids.Arange)
    return [Indexed((op.n,), lambda e, c: c(0), "s32", "rise")]


def _guards(low: Lowerer, mask: Lowered, els: Elements, instr: Instr) -> list[Value]:
    """The mask at each element a thread holds."""
    if isinstance(mask, Indexed):
        return evaluate(low, mask, els.layout, els).regs
    if isinstance(mask, Scalar):
        return [mask.reg] * els.count
    mask = materialize(low, mask, els.layout)
    if not isinstance(mask, Dist) or mask.layout != els.layout:
        raise UnsupportedError("the mask of this access is held in another layout than "
                               "its tile", loc=instr.loc,
                               hint="build the mask from ts.tile.arange and scalars")
    return list(mask.regs)


def _offset(e: TargetEmitter, mem: Mem, coords: tuple[Value, ...]) -> Value | None:
    off: Value | None = None
    for c, stride in zip(coords, mem.strides):
        term = c if stride == 1 else e.mul(c, e.const(stride, "s32"), "s32")
        off = term if off is None else e.add(off, term, "s32")
    return off


def _window(low: Lowerer, instr: Instr, args: list[Lowered]) -> tuple[Mem, int]:
    op = instr.op
    assert isinstance(op, (tile_memory.MaskedLoad, tile_memory.MaskedStore))
    mt = instr.operands[0].type
    assert isinstance(mt, MemRefType)
    src = args[0]
    assert isinstance(src, Mem)
    rank = mt.rank
    return window(low, src, args[1:1 + rank], instr.operands[1:1 + rank], tuple(op.sizes),
                  tuple(op.squeeze)), rank


def _other(e: TargetEmitter, other: Lowered, rt: str, element: Any) -> Value:
    """The ``other`` scalar converted to the memory's element, in ``rt`` registers (as
    NumPy's conversion in the simulator's ``np.full``)."""
    assert isinstance(other, Scalar)
    x, t = other.reg, other.type
    if t == rt == "f32":
        return round_to(e, x, element)
    if t == rt:
        return x
    if t == "s32" and rt == "f32":
        return round_to(e, e.cvt(x, "f32", "s32", "rn"), element)
    if t == "f32" and rt == "s32":
        return e.cvt(x, "s32", "f32", "rzi")
    if rt == "pred" and t in ("s32", "u32", "f32"):  # a number as a bool: nonzero
        return e.setp("ne", x, e.const(0.0 if t == "f32" else 0, t), t)
    raise UnsupportedError(f"a masked load's other value of {t} into {element} memory is "
                           "not lowered", loc=e.loc)


@rule(tile_memory.MaskedLoad)
def _masked_load(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    from tessera.lower.rules.staged import Staged, staged_store

    mem, rank = _window(low, instr, args)
    if staged_store(instr) is not None:  # copied into shared memory where it is stored
        return [Staged(mem, args[1 + rank], args[1:1 + rank], instr)]  # type: ignore[arg-type]
    return [load_masked(low, instr, mem, args[1 + rank], args[2 + rank])]


class _Broadcast:
    """The elements of a broadcast's result, named by the coordinates of its operand
    (operand axis ``a`` is result axis ``dims[a]``; an axis of size 1 reads index 0)."""

    def __init__(self, e: TargetEmitter, full: Elements, dims: tuple[int, ...],
                 shape: tuple[int, ...]) -> None:
        self.e, self.full, self.dims, self.shape = e, full, dims, shape
        self.layout, self.count = full.layout, full.count

    def coords(self, r: int) -> tuple[Value, ...]:
        c = self.full.coords(r)
        return tuple(c[d] if n != 1 else self.e.const(0, "s32")
                     for d, n in zip(self.dims, self.shape))


def load_masked_broadcast(low: Lowerer, instr: Instr, into: Any,
                          dims: tuple[int, ...]) -> Dist:
    """The masked load ``instr`` (already lowered: its operands are in ``low.env``) read
    again straight into ``into``, the layout of its broadcast over ``dims``: each
    register loads the element its coordinates map to, under the mask there."""
    args = [low.env[v] for v in instr.operands]
    mem, rank = _window(low, instr, args)
    shape = tuple(instr.results[0].type.shape)  # type: ignore[attr-defined]
    els = _Broadcast(low.em, elements(low, into), dims, shape)
    return load_masked(low, instr, mem, args[1 + rank], args[2 + rank], els)


def load_masked(low: Lowerer, instr: Instr, mem: Mem, mask: Lowered, other: Lowered,
                els: Any = None) -> Dist:
    """The masked load ``instr`` of the window ``mem``, in its result's layout (or at
    the elements ``els``)."""
    e = low.em
    els = els or elements(low, low.layouts[instr.results[0]])
    guards = _guards(low, mask, els, instr)
    mt, rt = mem_type(mem.element), reg_type(mem.element)  # 8-bit ones are bytes
    fill = _other(e, other, rt, mem.element)
    direct = mt == rt
    regs = []
    for r in range(els.count):
        addr = address(e, mem, _offset(e, mem, els.coords(r)))
        if mt in BYTE_TYPES:
            regs.append(_byte_load(e, mem, addr, guards[r], fill))
            continue
        if direct:
            regs.append(e.one(GuardedLoad(mem.space, mt), addr, guards[r], fill))
            continue
        raw = e.one(GuardedLoad(mem.space, mt), addr, guards[r], e.const(0, mt))
        regs.append(e.selp(to_reg(e, raw, mt, rt, mem.element), fill, guards[r], rt))
    return Dist(els.layout, regs, rt)


@rule(tile_memory.MaskedStore)
def _masked_store(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    mem, rank = _window(low, instr, args)
    e = low.em
    value_v = instr.operands[1 + rank]
    layout = low.layouts.get(value_v)
    value = materialize(low, settle(low, value_v, args[1 + rank]), layout)
    if not isinstance(value, Dist):
        raise UnsupportedError("this tile cannot be stored yet", loc=instr.loc)
    els = elements(low, value.layout)
    guards = _guards(low, args[2 + rank], els, instr)
    mt = mem_type(mem.element)
    for r in range(els.count):
        guard, inside = guards[r], els.inside(r)
        if inside is not None:
            guard = e.bin("and", inside, guard, "pred")
        addr = address(e, mem, _offset(e, mem, els.coords(r)))
        data = to_mem(e, value.regs[r], value.type, mt, mem.element)
        if mt in BYTE_TYPES:  # no guarded byte instruction: a branch around the store
            e.if_(guard, lambda inner, a=addr, d=data: inner.st(mem.space, a, d, mt))
        else:
            e.op(GuardedStore(mem.space, mt), [addr, data, guard])
    return []


__all__ = ["LAZY", "Elements", "elements", "evaluate", "load_masked", "load_masked_broadcast",
           "settle",
           "through_indexed"]
