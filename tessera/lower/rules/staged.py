"""Masked loads staged into shared memory, lowered to asynchronous copies that fill the
masked-off elements with zeros.

``smem[...] = ts.tile.load(A[i:i + BM, k:k + BK], mask=m, other=0)`` (how a generated
kernel stages its matmul operands along a ragged loop) is a copy from global to shared
memory in which the elements past the edge read 0. Where the copy can keep that
meaning exactly, it is an asynchronous copy instead of registers:

* **sm_90a, a wgmma operand buffer, TMA**: when the mask is exactly the window's
  in-bounds test (``(start + arange(n)) < dim`` along each masked axis, with the
  window's own start and the tensor's own dim), one TMA load per swizzle panel: the
  tensor map holds the tensor's true extents and TMA fills the box's elements outside
  them with zeros (PTX ISA sec. 9.7.9.27; CUDA driver API ``cuTensorMapEncodeTiled``,
  out-of-bounds fill). The row stride must be a multiple of 16 bytes.
* **cp.async with a source size**: each chunk of 4, 8 or 16 bytes copies ``src-size``
  bytes and zero-fills the rest (PTX ISA sec. 9.7.9.25), so a chunk whose masked-on
  elements come first copies exactly them: ``src-size`` is their bytes. That holds when
  the chunk is one element, or when the mask is known to fall along its last axis
  (:class:`~tessera.lower.values.Indexed` ``trend``: ``offs < n`` does).
* otherwise the guarded loads of :mod:`tessera.lower.rules.masked` and ``st.shared``.

The copies join the copy group being formed and complete at the next ``tile.barrier``
or ``cp_wait_group``; the store is staged this way only when the tile program reaches
one of those before it reads shared memory again (the store must be whole: it then
behaves as the tile program's synchronous store does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd
from typing import Any

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.async_ops import CpAsync
from tessera.ir.dialects.tile import Arange, Constant, MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.values import Indexed, Lowered, Mem, Scalar, elem_bytes

#: ops that complete the copies of a staged store
_SYNC = (tile_memory.Barrier, tile_memory.CpWaitGroup)
#: ops that write memory
_WRITES = (tile_memory.Store, tile_memory.MaskedStore, tile_memory.StoreVector,
           tile_memory.Update, tile_memory.CpAsync)


@dataclass
class Staged:
    """A masked load (other value 0) whose one use stores it whole into shared memory:
    the window, its mask, the window's starts and the load instruction."""

    window: Mem
    mask: Lowered
    starts: list[Scalar]
    load: Instr


def staged_store(instr: Instr) -> Instr | None:
    """The ``tile.store`` of the masked load ``instr`` into a whole shared buffer, when
    the load's other value is 0, the store is its only use and a barrier or wait comes
    before anything else reads shared memory; else None."""
    out = instr.results[0]
    other = instr.operands[-1].owner
    if not (isinstance(other, Instr) and isinstance(other.op, Constant) and
            other.op.value == 0):
        return None
    block = instr.parent
    if block is None:
        return None
    users = [i for i in block.instrs if out in i.operands]
    if len(users) != 1 or not isinstance(users[0].op, tile_memory.Store) or \
            users[0].operands[1] is not out or not _whole_shared(users[0].operands[0], out):
        return None
    at, store = block.instrs.index(instr), block.instrs.index(users[0])
    # the copy reads global memory at the store: nothing between may write it
    if any(i.regions or isinstance(i.op, _WRITES) for i in block.instrs[at + 1:store]):
        return None
    for later in block.instrs[store + 1:]:
        if isinstance(later.op, _SYNC):
            return users[0]
        if isinstance(later.op, tile_memory.View):
            continue  # address arithmetic
        if later.regions or any(_shared(v) for v in later.operands[_writes(later):]):
            return None
    return None


def _shared(v: Value) -> bool:
    return isinstance(v.type, MemRefType) and v.type.space == "shared"


def _writes(instr: Instr) -> int:
    """How many leading operands an op only writes (a store's or copy's destination)."""
    return 1 if isinstance(instr.op, (tile_memory.Store, tile_memory.CpAsync)) else 0


def _whole_shared(dst: Value, tile: Value) -> bool:
    """``dst`` is a whole 2-D shared buffer of the tile's shape (or a view of all of it
    at zero starts)."""
    t, shape = dst.type, getattr(tile.type, "shape", None)
    if not (isinstance(t, MemRefType) and t.space == "shared" and t.rank == 2 and
            tuple(t.shape) == shape):
        return False
    owner = dst.owner
    if isinstance(owner, Instr) and isinstance(owner.op, tile_memory.View):
        base = owner.operands[0].type
        starts = [s.owner for s in owner.operands[1:]]
        return (isinstance(base, MemRefType) and tuple(base.shape) == shape and
                all(isinstance(s, Instr) and isinstance(s.op, Constant) and s.op.value == 0
                    for s in starts))
    return isinstance(owner, Instr) and isinstance(owner.op, tile_memory.AllocShared)


# -------------------------------------------------------------------------- the mask
def exact_bounds(mask: Value, starts: list[Value], dims: tuple[int, ...]) -> bool:
    """Whether ``mask`` is the conjunction of ``(starts[a] + arange) < dims[a]`` over
    some axes ``a`` of the window (as Tile IR): then it is true exactly where the
    window lies inside the tensor along those axes."""
    terms = _conjuncts(mask, len(dims))
    return terms is not None and all(_bound(v, starts[a], dims[a]) for a, v in terms)


def _conjuncts(v: Value, rank: int) -> list[tuple[int, Value]] | None:
    """``v`` as a conjunction of 1-D tiles along window axes: ``(axis, tile)`` pairs."""
    owner = v.owner
    if not isinstance(owner, Instr):
        return None
    op = owner.op
    if isinstance(op, tile_compute.And):
        parts = [_conjuncts(x, rank) for x in owner.operands]
        return None if any(p is None for p in parts) else [t for p in parts for t in p]
    shape = getattr(v.type, "shape", ())
    if len(shape) == 1 and rank == 1:
        return [(0, v)]
    if isinstance(op, (tile_compute.Broadcast, tile_compute.Reshape)):
        (x,) = owner.operands
        xs = getattr(x.type, "shape", ())
        if len(xs) == 1 and isinstance(op, tile_compute.Broadcast):
            return [(op.dims[0], x)]
        live = [k for k, d in enumerate(xs) if d != 1]
        if len(live) == 1 and len(xs) == 2:
            inner = _conjuncts(x, rank)
            if isinstance(op, tile_compute.Reshape) or inner is None:
                return inner
            return [(op.dims[a], t) for a, t in inner]
        if len(xs) == 1 and isinstance(op, tile_compute.Reshape):
            axis = [k for k, d in enumerate(shape) if d != 1]
            return [(axis[0], x)] if len(axis) == 1 else None
    return None


def _bound(v: Value, start: Value, dim: int) -> bool:
    """``v`` is ``(start + arange(n)) < dim`` (the add in either order)."""
    lt = v.owner
    if not (isinstance(lt, Instr) and isinstance(lt.op, tile_compute.Lt)):
        return False
    offs, limit = lt.operands
    if _splat_constant(limit) != dim:
        return False
    add = offs.owner
    if not (isinstance(add, Instr) and isinstance(add.op, tile_compute.Add)):
        return False
    kinds = sorted(_index_part(x, start) for x in add.operands)
    return kinds == ["arange", "start"]


def _splat_constant(v: Value) -> Any:
    owner = v.owner
    if isinstance(owner, Instr) and isinstance(owner.op, tile_compute.Broadcast):
        owner = owner.operands[0].owner
    return owner.op.value if isinstance(owner, Instr) and isinstance(owner.op, Constant) \
        else None


def _index_part(v: Value, start: Value) -> str:
    owner = v.owner
    if isinstance(owner, Instr) and isinstance(owner.op, Arange):
        return "arange"
    if isinstance(owner, Instr) and isinstance(owner.op, tile_compute.Broadcast) and \
            same_value(owner.operands[0], start):
        return "start"
    return ""


def same_value(a: Value, b: Value, depth: int = 4) -> bool:
    """``a`` and ``b`` are one value, or the same pure computation of the same values
    (``tile_m`` written twice is two ``grid_coord * BM``)."""
    if a is b:
        return True
    x, y = a.owner, b.owner
    if depth == 0 or not (isinstance(x, Instr) and isinstance(y, Instr)) or \
            x.op != y.op or not x.op.pure or x.regions or y.regions or \
            len(x.operands) != len(y.operands) or x.results.index(a) != y.results.index(b):
        return False
    return all(same_value(p, q, depth - 1) for p, q in zip(x.operands, y.operands))


# ------------------------------------------------------------------------ the copies
def stage(low: Lowerer, dst: Mem, value: Staged) -> bool:
    """Lower the staged store of ``value`` into ``dst`` as an asynchronous copy; False
    when no copy keeps the load's meaning (the caller stores registers instead)."""
    from tessera.lower.rules.block import _war_barrier

    src, e = value.window, low.em
    dst = replace(dst, offset=None)  # a view of the whole buffer at zero starts
    if dst.meta.get("wgmma") and src.shape[-1] * elem_bytes(src.element) > dst.swizzle:
        return False  # laid out in swizzle panels, not rows
    load = value.load
    mt = load.operands[0].type
    assert isinstance(mt, MemRefType)
    rank = mt.rank
    if low.target == "sm_90a" and dst.meta.get("wgmma") and rank == 2 and \
            src.meta.get("arg") is not None and \
            src.strides[0] * elem_bytes(src.element) % 16 == 0 and \
            exact_bounds(load.operands[1 + rank], load.operands[1:1 + rank],
                         tuple(mt.shape)):
        from tessera.lower.rules.block import shared_box
        from tessera.lower.sm90a.mma import tma_copy

        _war_barrier(low, e)
        tma_copy(low, dst, src, shared_box(dst), at=[s.reg for s in value.starts])
        low.extra["prev_op"] = tile_memory.CpAsync
        return True
    mask = value.mask
    esize = elem_bytes(src.element)
    if not isinstance(mask, (Indexed, Scalar)) or len(src.shape) != 2 or \
            src.strides[-1] != 1 or dst.strides[-1] != 1:
        return False
    chunk = _chunk(src, esize, isinstance(mask, Scalar) or mask.trend in ("fall", "flat"))
    if chunk is None:
        return False
    _war_barrier(low, e)
    _copy(low, e, dst, src, mask, chunk, esize)
    low.extra["async_pending"] = low.extra["uncommitted"] = True
    low.extra["prev_op"] = tile_memory.CpAsync
    return True


def _chunk(src: Mem, esize: int, prefix: bool) -> int | None:
    """The widest chunk (16, 8 or 4 bytes) aligned in ``src``'s rows; one element when
    the mask may have masked-on elements after masked-off ones in a chunk."""
    span = gcd(src.align, src.shape[1] * esize, src.strides[0] * esize)
    for chunk in (16, 8, 4):
        if span % chunk == 0 and (prefix or chunk == esize):
            return chunk
    return None


def _copy(low: Lowerer, e: TargetEmitter, dst: Mem, src: Mem, mask: Lowered, chunk: int,
          esize: int) -> None:
    """Chunk ``c`` (row-major) of the window, ``c = tid + 128 j``, copied with its
    masked-on bytes as the source size."""
    from tessera.lower.rules.memory import address
    from tessera.lower.sm80.copy import SharedAddresses
    from tessera.lower.tiles import SharedBox

    rows, cols = src.shape
    per_row, per_chunk = cols * esize // chunk, chunk // esize
    total = rows * per_row
    op = CpAsync(16, "cg") if chunk == 16 else CpAsync(chunk, "ca")
    box = SharedBox(dst.base, rows, cols, "b8", dst.swizzle)
    shared = SharedAddresses(e, box)
    tid = e.cvt(e.sreg("tid.x"), "s32", "u32")
    zero, size = e.const(0, "u32"), e.const(esize, "u32")
    for j in range(-(-total // 128)):
        c = e.add(tid, e.const(j * 128, "s32"), "s32") if j else tid
        row = e.bin("div", c, e.const(per_row, "s32"), "s32")
        col = e.mul(e.bin("rem", c, e.const(per_row, "s32"), "s32"),
                    e.const(per_chunk, "s32"), "s32")
        off = e.add(e.mul(row, e.const(src.strides[0], "s32"), "s32"), col, "s32")
        g_addr = address(e, src, off)
        s_addr = shared.addr(e.cvt(e.mul(c, e.const(chunk, "s32"), "s32"), "u32", "s32"), 0)
        nbytes: Value | None = None
        for k in range(per_chunk):
            at = e.add(col, e.const(k, "s32"), "s32") if k else col
            on = mask.reg if isinstance(mask, Scalar) else mask.at(
                e, lambda axis, r=row, a=at: (r, a)[axis])
            part = e.selp(size, zero, on, "u32")
            nbytes = part if nbytes is None else e.add(nbytes, part, "u32")
        assert nbytes is not None
        if (j + 1) * 128 <= total:
            e.op(op, [s_addr, g_addr, nbytes])
        else:
            live = e.setp("lt", c, e.const(total, "s32"), "s32")
            e.if_(live, lambda inner, s=s_addr, g=g_addr, n=nbytes: inner.op(op, [s, g, n]))


__all__ = ["Staged", "exact_bounds", "same_value", "stage", "staged_store"]
