"""Register tiles staged through shared memory, for consumers that read memory.

The exact ``mma`` (:mod:`tessera.lower.exact.mma`) reads ``a[i, k]`` and ``b[k, j]``
from memory views: each thread walks K for its own output elements, so it needs
elements that other threads hold. An operand computed in the kernel (the softmax's
``P`` of ``P @ V``, a ``K`` computed before ``Q K^T``) is a register tile in the
blocked layout; it is staged: every thread stores its elements at their (row, col) of
a fresh f32 shared buffer, and a CTA barrier makes them visible before the buffer is
read as a :class:`~tessera.lower.values.Mem`. A ``tile.transpose`` of a register tile
stages it the same way and returns the transposed view of the buffer, and a
``tile.broadcast`` that inserts an axis (the f64 terms of attention's key-block passes,
:mod:`tessera.ir.transforms.to_tile.attention.keyblocks`) returns a view of the buffer whose new
axes have stride 0.

Each staging emits a barrier *before* its stores too: inside a loop, the buffer is
overwritten on every trip while threads may still be reading the previous trip's
elements (a write-after-read hazard across threads). The same barrier lets a later
top-level loop stage into a buffer of an earlier one (:func:`_buffer`): the three exact
passes over key blocks each stage their block of keys, into one buffer.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import Any

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.lower.broadcast import reshape_view
from tessera.lower.core import THREADS, Lowerer
from tessera.lower.layout import BRow, as_blocked
from tessera.lower.rules.tensor import chunk_index, store_blocked
from tessera.lower.values import Dist, Mem
from tessera.numerics import f32, f64

#: the alignment of a staging buffer (a 16-byte vector of f32)
STAGE_ALIGN = 16


def _buffer(low: Lowerer, prefix: str, size: int) -> Value:
    """A shared buffer of at least ``size`` bytes for one staging, allocated in the entry
    block. A staging inside a top-level loop (or branch) reuses one that a staging
    inside an earlier top-level instruction took: the view such a buffer backs is a
    value of that instruction's regions, dead once the instruction is done (the
    regions yield registers), and every staging stores behind a barrier. Buffers staged
    at the top level stay theirs."""
    # the emitter of the top-level instruction's region being lowered (None: top level)
    scope = low.stack[1] if len(low.stack) > 1 else None
    pool: list[list[Any]] = low.extra.setdefault("stage_pool", [])  # [base, size, scope]
    if scope is not None:
        free = [entry for entry in pool if entry[2] is not None and entry[2] is not scope
                and entry[1] >= size]
        if free:
            entry = min(free, key=lambda entry: entry[1])
            entry[2] = scope
            return entry[0]  # type: ignore[no-any-return]
    base = low.shared_buffer(prefix, size, STAGE_ALIGN, entry=True)
    low.extra["staged_bytes"] = low.extra.get("staged_bytes", 0) + size
    pool.append([base, size, scope])
    return base


def stage(low: Lowerer, value: Dist, instr: Instr) -> Mem:
    """``value`` (a 2-D blocked f32 or f64 register tile, an operand of ``instr``)
    stored into a fresh shared buffer, behind a barrier: the buffer as a row-major
    view (row statistics of rows one element wide are such a tile: the same registers)."""
    layout = as_blocked(value.layout)
    if layout is None or len(layout.shape) < 2 or \
            value.type not in ("f32", "f64") or any(d != 1 for d in layout.shape[:-2]):
        raise UnsupportedError(
            f"{instr.op.name} reads a register tile that cannot be staged through shared "
            f"memory (a {value.type} tile in layout {value.layout}); blocked f32 and f64 "
            "tiles of one matrix (2-D, or leading axes of 1) are", loc=instr.loc)
    value = Dist(layout, value.regs, value.type)
    rows, cols = layout.shape[-2:]
    size = (8 if value.type == "f64" else 4) * rows * cols
    # allocated in the entry block: one buffer, however often the staging runs
    base = _buffer(low, "stage", size)
    sym = base.owner.op.sym  # type: ignore[union-attr]
    mem = Mem("shared", base, None, (rows, cols), (cols, 1),
              f64 if value.type == "f64" else f32, buffer=sym, align=STAGE_ALIGN)
    e = low.em
    e.bar()  # another trip's readers of the buffer are done
    # stored through a row-major view of the tile's own shape (the flat index of each
    # element splits over all of its axes)
    full = tuple(prod(layout.shape[k + 1:]) for k in range(len(layout.shape)))
    store_blocked(low, replace(mem, shape=tuple(layout.shape), strides=full), value)
    e.bar()  # every element is stored before any thread reads one
    return reshape_view(mem, layout.shape) or mem  # leading unit axes: stride 0


def stage_rows(low: Lowerer, value: Dist, shape: tuple[int, ...]) -> Mem:
    """Row statistics held as :class:`~tessera.lower.layout.BRow` (one register per
    chunk of the parent tile, the statistic of that chunk's row), as a row-major shared
    buffer of ``shape`` (the parent's leading axes): the thread holding the first chunk
    of each row stores it, between barriers. Its readers may hold the rows differently
    (another parent: the slab of a key block's carried sum)."""
    layout = value.layout
    assert isinstance(layout, BRow)
    parent, e = layout.parent, low.em
    size = 8 if value.type == "f64" else 4
    rows, cols = prod(shape), parent.shape[-1]
    base = _buffer(low, "rows", size * rows)
    e.bar()  # another trip's readers of the buffer are done
    for j, reg in enumerate(value.regs):
        k0 = chunk_index(e, parent, j)
        first = e.setp("eq", e.bin("rem", k0, e.const(cols, "s32"), "s32"),
                       e.const(0, "s32"), "s32")
        if (j + 1) * THREADS > parent.chunks:  # a chunk past the end stores nothing
            first = e.bin("and", first, e.setp("lt", k0, e.const(parent.chunks * parent.vec,
                                                                 "s32"), "s32"), "pred")
        row = e.bin("div", k0, e.const(cols, "s32"), "s32")
        addr = e.add(base, e.cvt(e.mul(row, e.const(size, "s32"), "s32"), "u32", "s32"),
                     "u32")
        e.if_(first, lambda inner, addr=addr, reg=reg: inner.st("shared", addr, reg,
                                                                value.type))
    e.bar()  # every row is stored before any thread reads one
    strides = tuple(prod(shape[k + 1:]) for k in range(len(shape)))
    return Mem("shared", base, None, tuple(shape), strides, f64 if size == 8 else f32,
               align=STAGE_ALIGN)


def transposed(mem: Mem) -> Mem:
    """``mem`` with its last two axes swapped (a view: no data moves)."""
    shape, strides = mem.shape, mem.strides
    return replace(mem, shape=(*shape[:-2], shape[-1], shape[-2]),
                   strides=(*strides[:-2], strides[-1], strides[-2]),
                   transposed=not mem.transposed, meta=dict(mem.meta))


__all__ = ["stage", "stage_rows", "transposed"]
