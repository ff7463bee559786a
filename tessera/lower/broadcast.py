"""A tile loaded from memory and broadcast into a distributed layout, element by element:
the bias row of a GEMM epilogue (``acc + bias[tile_n:tile_n + BN]``), a per-row scale.

Each register of the result reads the memory element its ``(row, column)`` maps to
through the broadcast's axes (an operand axis of size 1 reads index 0). Registers that
map to the same element share one load, so an accumulator-layout result costs one
``ld`` per distinct row or column a thread holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tessera.errors import UnsupportedError
from tessera.ir.core import Value
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.layout import Acc, Blocked, BRow, Row
from tessera.lower.values import Dist, Mem, mem_type, reg_type


def _coords(low: Lowerer, out: object) -> list[tuple[Value, ...]]:
    """Per register of ``out``, its coordinates (``s32``) in the result tile."""
    e = low.em
    if isinstance(out, Acc):
        from tessera.lower.sm80.gemm import acc_rowcol

        return list(acc_rowcol(e, out.rows, out.cols))
    if isinstance(out, Row):  # register 2b + h: row 64b + 8h of the accumulator's rows
        from tessera.lower.sm80.gemm import acc_origin

        row0, _ = acc_origin(e)
        return [(e.add(row0, e.const(64 * (i // 2) + 8 * (i % 2), "s32"), "s32")
                 if i else row0,) for i in range(out.rows // 32)]
    if isinstance(out, Blocked) and len(out.shape) in (1, 2):
        from tessera.lower.rules.tensor import _clamped

        coords: list[tuple[Value, ...]] = []
        cols = out.shape[-1]
        for j in range(out.per_thread):
            k0 = _clamped(e, out, j)  # a chunk past the end reads a valid element
            for c in range(out.vec):
                k = e.add(k0, e.const(c, "s32"), "s32") if c else k0
                if len(out.shape) == 1:
                    coords.append((k,))
                else:
                    coords.append((e.bin("div", k, e.const(cols, "s32"), "s32"),
                                   e.bin("rem", k, e.const(cols, "s32"), "s32")))
        return coords
    if isinstance(out, BRow):
        return _row_coords(low, out)
    raise UnsupportedError(f"a memory tile broadcast into layout {out} is not lowered")


def _row_coords(low: Lowerer, out: BRow) -> list[tuple[Value, ...]]:
    """Per register of row statistics (one per chunk of the parent tile), the
    coordinates of its row: the row's index over the parent's leading axes, then 0 (a
    statistic kept as ``(..., R, 1)``). A result of the leading axes alone reads only
    the first of them: its broadcast's axes name no other."""
    from tessera.lower.rules.tensor import _clamped

    e, parent = low.em, out.parent
    lead = parent.shape[:-1]
    coords: list[tuple[Value, ...]] = []
    for j in range(parent.per_thread):
        rest = e.bin("div", _clamped(e, parent, j), e.const(parent.shape[-1], "s32"), "s32")
        index: list[Value] = []
        for size in reversed(lead[1:]):
            index.append(e.bin("rem", rest, e.const(size, "s32"), "s32"))
            rest = e.bin("div", rest, e.const(size, "s32"), "s32")
        coords.append((rest, *reversed(index), e.const(0, "s32")))
    return coords


def load_rows(low: Lowerer, mem: Mem, out: Row) -> Dist | None:
    """A ``(rows,)`` (or ``(rows, 1)``) memory tile read into the row layout, or None
    for another shape."""
    view = reshape_view(mem, (out.rows,))
    return None if view is None else broadcast_load(low, view, out, (0,))


def reshape_view(mem: Mem, shape: tuple[int, ...]) -> Mem | None:
    """``mem`` with unit axes inserted or removed (stride 0 for a new one), or None when
    the reshape moves elements between axes."""
    if [d for d in shape if d != 1] != [d for d in mem.shape if d != 1]:
        return None
    kept = iter(stride for d, stride in zip(mem.shape, mem.strides) if d != 1)
    strides = tuple(0 if d == 1 else next(kept) for d in shape)
    return replace(mem, shape=shape, strides=strides)


def broadcast_load(low: Lowerer, mem: Mem, out: object, dims: Sequence[int]) -> Dist:
    """``mem`` (operand axis ``i`` is result axis ``dims[i]``) broadcast into ``out``."""
    from tessera.lower.rules.memory import address
    from tessera.lower.rules.tensor import widen

    e: TargetEmitter = low.em
    mt, rt = mem_type(mem.element), reg_type(mem.element)
    loaded: dict[tuple[int, ...], Value] = {}
    regs = []
    for coord in _coords(low, out):
        index = [coord[d] if size != 1 else None for size, d in zip(mem.shape, dims)]
        key = tuple(id(v) for v in index)
        if key not in loaded:
            off = None
            for v, stride in zip(index, mem.strides):
                if v is None:
                    continue
                term = v if stride == 1 else e.mul(v, e.const(stride, "s32"), "s32")
                off = term if off is None else e.add(off, term, "s32")
            raw = e.ld(mem.space, address(e, mem, off), mt)
            loaded[key] = raw if mt == rt else widen(e, raw, mt, mem.element)
        regs.append(loaded[key])
    return Dist(out, regs, rt)


__all__ = ["broadcast_load", "load_rows", "reshape_view"]
