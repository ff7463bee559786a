"""Edge tiles of a generated kernel: a loop runs in tiles of the schedule's size, and
the last tile of a loop whose extent is not a multiple of it reaches past the tensor's
edge, so the kernel's accesses along that loop are masked (as a Triton kernel writes
them: ``offs = start + arange(tile); mask = offs < extent``).

* an operand's tile is a ``tile.masked_load`` with other value 0 (False for bool): the
  elements past the edge compute garbage that no store writes;
* a result's tile is a ``tile.masked_store``: only the elements inside the tensor are
  written;
* a matmul operand staged into shared memory along a ragged M, N or K is a masked load
  stored into the buffer: the zeros past the edge of K multiply into zero products,
  which leave the exact sums (and so the graph's bits) unchanged, and the rows and
  columns past M and N are never stored.

Accesses along loops that the tile divides stay plain ``tile.load``/``tile.store`` (and
``tile.cp_async``), so a kernel whose tiles divide every loop is unchanged.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tessera.ir.core import Block, Instr, Value
from tessera.ir.dialects import tile as tile_ops
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.dialects.tile import memory as tm
from tessera.ir.types import TensorType

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter


def edge_tile(extent: int, tile: int) -> int:
    """The tile of a loop of ``extent`` whose schedule tile is ``tile``: the schedule's
    tile, or the whole loop when that is shorter."""
    return min(tile, extent)


def tile_count(extent: int, tile: int) -> int:
    """Tiles of ``tile`` that cover ``extent`` (the last one may be an edge tile)."""
    return -(-extent // tile)


def axis_mask(em: Emitter, start: Value, size: int, bound: int,
               instr: Instr | None) -> Value:
    """``(start + arange(size)) < bound``, a ``(size,)`` bool tile."""
    (at,) = em.create(tile_ops.Arange(size), [], instr)
    (first,) = em.create(tc.Broadcast((size,), ()), [start], instr)
    (offs,) = em.create(tc.Add(), [first, at], instr)
    (limit,) = em.create(tc.Broadcast((size,), ()), [em.index(bound)], instr)
    return em.create(tc.Lt(), [offs, limit], instr)[0]


#: the masks already built in a block, by window: a later access of the same window
#: in that block reuses its mask (the block's values dominate what follows them)
_MASKS: weakref.WeakKeyDictionary[Block, dict[tuple[Any, ...], Value]] = \
    weakref.WeakKeyDictionary()


def window_mask(em: Emitter, v: Value, starts: Sequence[Value], shape: Sequence[int],
                loops: Sequence[int | None], instr: Instr | None = None) -> Value | None:
    """The mask of the ``shape`` window of ``v`` at ``starts`` along ``loops`` (the loop
    of each axis, or None): true inside ``v``; None when no axis is ragged."""
    t = v.type
    assert isinstance(t, TensorType)
    key = (tuple(map(id, starts)), tuple(shape), tuple(loops), tuple(t.shape))
    known = _MASKS.setdefault(em.builder.block, {})
    if key not in known:
        mask = _build_mask(em, t, starts, shape, loops, instr)
        if mask is None:
            return None
        known[key] = mask
    return known[key]


def _build_mask(em: Emitter, t: TensorType, starts: Sequence[Value], shape: Sequence[int],
                loops: Sequence[int | None], instr: Instr | None) -> Value | None:
    mask: Value | None = None
    for axis, (start, size, loop) in enumerate(zip(starts, shape, loops)):
        if loop is None or (em.extents[loop] % em.tiles[loop] == 0
                            and loop not in em.overrun):
            continue
        inside = axis_mask(em, start, size, int(t.shape[axis]), instr)
        if len(shape) > 1:
            (inside,) = em.create(tc.Broadcast(tuple(shape), (axis,)), [inside], instr)
        mask = inside if mask is None else em.create(tc.And(), [mask, inside], instr)[0]
    return mask


def window(em: Emitter, v: Value) -> tuple[list[Value], tuple[int, ...], list[int | None]]:
    """The starts, shape and loops of this program's tile of the graph value ``v``."""
    t = v.type
    assert isinstance(t, TensorType)
    loops = [em.loop_of.get((v, k)) for k in range(t.rank)]
    starts = [em.starts[loop] if loop is not None else em.index(0) for loop in loops]
    return starts, tuple(em.tile_type(v).shape), loops


def _other(em: Emitter, mem: Value) -> Value:
    t = mem.type
    assert isinstance(t, tile_ops.MemRefType)
    return em.full(TensorType((), t.element), 0)


def load_window(em: Emitter, mem: Value, starts: Sequence[Value], shape: tuple[int, ...],
                mask: Value | None, at: Instr | None = None) -> Value:
    """The ``shape`` window of ``mem`` at ``starts``: a plain load, or where ``mask`` is
    given a masked one (zeros outside it)."""
    if mask is None:
        (view,) = em.create(tm.View(shape), [mem, *starts], at)
        return em.create(tm.Load(), [view], at)[0]
    return em.create(tm.MaskedLoad(shape), [mem, *starts, mask, _other(em, mem)], at)[0]


def store_window(em: Emitter, mem: Value, starts: Sequence[Value], shape: tuple[int, ...],
                 tile: Value, mask: Value | None, at: Instr | None = None) -> None:
    """Store ``tile`` into the ``shape`` window of ``mem`` at ``starts`` (where ``mask``
    is given, its elements inside the mask only)."""
    if mask is None:
        (view,) = em.create(tm.View(shape), [mem, *starts], at)
        em.create(tm.Store(), [view, tile], at)
    else:
        em.create(tm.MaskedStore(shape), [mem, *starts, tile, mask], at)


def load(em: Emitter, mem: Value, v: Value) -> Value:
    """This program's tile of the operand ``v`` from its memory ``mem``."""
    starts, shape, loops = window(em, v)
    return load_window(em, mem, starts, shape, window_mask(em, v, starts, shape, loops))


def store(em: Emitter, mem: Value, v: Value, tile: Value) -> None:
    """Store this program's ``tile`` of the result ``v`` into ``mem``."""
    starts, shape, loops = window(em, v)
    store_window(em, mem, starts, shape, tile, window_mask(em, v, starts, shape, loops))


def stage(em: Emitter, buf: Value, mem: Value, v: Value, starts: Sequence[Value],
          shape: tuple[int, ...], loops: Sequence[int | None], instr: Instr) -> None:
    """Copy the ``shape`` window of the matmul operand ``v`` at ``starts`` into the
    shared buffer ``buf``: an async copy, or a masked load (zeros past the edge) stored
    into the buffer when the window may reach past ``v``'s edge."""
    mask = window_mask(em, v, starts, shape, loops, instr)
    if mask is None:
        view = em.create(tm.View(shape), [mem, *starts], instr)[0]
        em.create(tm.CpAsync(), [buf, view], instr)
        return
    em.create(tm.Store(), [buf, load_window(em, mem, starts, shape, mask, instr)], instr)


__all__ = ["axis_mask", "edge_tile", "load", "load_window", "stage", "store", "store_window",
           "tile_count", "window",
           "window_mask"]
