"""Lowering of register tensors: loads and stores of blocked tiles, broadcasts, reshapes
and the causal mask (row reductions are in :mod:`tessera.lower.rules.reduce`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from math import prod

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import THREADS, Lowerer, rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.layout import Acc, Blocked, BRow, Row
from tessera.lower.rules.memory import address
from tessera.lower.tiles import acc_coords
from tessera.lower.values import Dist, Lowered, Mem, Scalar, mem_type, reg_type


def _tid(e: TargetEmitter) -> Value:
    return e.cvt(e.sreg("tid.x"), "s32", "u32")


def chunk_index(e: TargetEmitter, layout: Blocked, j: int) -> Value:
    """The flat index of the first element of this thread's chunk ``j``."""
    c = e.add(_tid(e), e.const(j * 128, "s32"), "s32") if j else _tid(e)
    return e.mul(c, e.const(layout.vec, "s32"), "s32") if layout.vec > 1 else c


def _element(e: TargetEmitter, mem: Mem, layout: Blocked, k0: Value, c: int) -> Value:
    """The element offset (in ``mem``'s buffer) of flat tile index ``k0 + c``: the
    row-major index split over the axes (of any rank; a stride of 0 repeats elements)."""
    k = e.add(k0, e.const(c, "s32"), "s32") if c else k0
    if len(layout.shape) == 1 and mem.strides[0]:
        return k if mem.strides[0] == 1 else e.mul(k, e.const(mem.strides[0], "s32"), "s32")
    if len(layout.shape) == 2 and all(mem.strides):
        cols = layout.shape[-1]
        row = e.bin("div", k, e.const(cols, "s32"), "s32")
        col = e.bin("rem", k, e.const(cols, "s32"), "s32")
        return e.add(e.mul(row, e.const(mem.strides[0], "s32"), "s32"),
                     col if mem.strides[1] == 1 else e.mul(col, e.const(mem.strides[1], "s32"),
                                                           "s32"), "s32")
    axes = _merged_axes(layout.shape, mem.strides)
    terms, rest = [], k
    for size, stride in reversed(axes[1:]):
        index = e.bin("rem", rest, e.const(size, "s32"), "s32")
        rest = e.bin("div", rest, e.const(size, "s32"), "s32")
        terms.append((index, stride))
    terms.append((rest, axes[0][1]))
    offset = None
    for index, stride in reversed(terms):
        if stride == 0:
            continue
        term = index if stride == 1 else e.mul(index, e.const(stride, "s32"), "s32")
        offset = term if offset is None else e.add(offset, term, "s32")
    return offset if offset is not None else e.const(0, "s32")


def _merged_axes(shape: tuple[int, ...], strides: tuple[int, ...]) -> list[tuple[int, int]]:
    """``(size, stride)`` of each axis, axes of size 1 dropped and an axis merged into
    the one before it where they are contiguous (fewer divisions)."""
    axes: list[tuple[int, int]] = []
    for size, stride in zip(shape, strides):
        if size == 1:
            continue
        if axes and axes[-1][1] == stride * size:
            axes[-1] = (axes[-1][0] * size, stride)
        else:
            axes.append((size, stride))
    return axes or [(1, 0)]


def _clamped(e: TargetEmitter, layout: Blocked, j: int) -> Value:
    k0 = chunk_index(e, layout, j)
    if (j + 1) * 128 <= layout.chunks:
        return k0
    last = e.const((layout.chunks - 1) * layout.vec, "s32")
    return e.bin("min", k0, last, "s32")  # past the end: read a valid chunk, ignore it


def materialize(low: Lowerer, lv: Lowered, layout: object) -> Lowered:
    """A deferred load (a memory view) read into ``layout``; other values pass."""
    if not isinstance(lv, Mem):
        return lv
    if isinstance(layout, Row):  # a per-row vector of an accumulator's epilogue
        from tessera.lower.broadcast import load_rows

        rows = load_rows(low, lv, layout)
        if rows is not None:
            return rows
    if isinstance(layout, BRow) and prod(lv.shape) == prod(layout.parent.shape[:-1]):
        return _load_rows(low, lv, layout)
    if isinstance(layout, Acc) and tuple(lv.shape) == (layout.rows, layout.cols):
        return _load_acc(low, lv, layout)  # a residual added to an accumulator
    if not isinstance(layout, Blocked):
        raise UnsupportedError(f"a memory tile cannot be read into layout {layout} yet")
    e = low.em
    mt, rt = mem_type(lv.element), reg_type(lv.element)
    regs = []
    for j in range(layout.per_thread):
        k0 = _clamped(e, layout, j)
        for c in range(layout.vec):
            off = _element(e, lv, layout, k0, c)
            raw = e.ld(lv.space, address(e, lv, off), mt)
            regs.append(raw if mt == rt else widen(e, raw, mt, lv.element))
    return Dist(layout, regs, rt)


def _load_acc(low: Lowerer, mem: Mem, layout: Acc) -> Dist:
    """A ``(rows, cols)`` memory tile read in the accumulator layout: register ``r`` is
    the element at the thread's quad origin plus thread 0's coordinates of ``r``
    (:func:`tessera.lower.tiles.acc_coords`), one load each."""
    from tessera.lower.sm80.gemm import acc_origin

    e = low.em
    row0, col0 = acc_origin(e)
    s0, s1 = mem.strides
    first = e.add(e.mul(row0, e.const(s0, "s32"), "s32"),
                  col0 if s1 == 1 else e.mul(col0, e.const(s1, "s32"), "s32"), "s32")
    rows, cols = acc_coords(layout.rows, layout.cols)
    mt, rt = mem_type(mem.element), reg_type(mem.element)
    regs = []
    for r in range(rows.shape[1]):
        static = int(rows[0, r]) * s0 + int(cols[0, r]) * s1
        off = e.add(first, e.const(static, "s32"), "s32") if static else first
        raw = e.ld(mem.space, address(e, mem, off), mt)
        regs.append(raw if mt == rt else widen(e, raw, mt, mem.element))
    return Dist(layout, regs, rt)


def _load_rows(low: Lowerer, mem: Mem, layout: BRow) -> Dist:
    """A tile of one value per row (``(R,)``, ``(R, 1)``, a row-length-1 tile) read as
    row statistics: register ``j`` is the element of chunk ``j``'s row."""
    e, parent = low.em, layout.parent
    mt, rt = mem_type(mem.element), reg_type(mem.element)
    flat = Blocked(tuple(mem.shape), 1)
    regs = []
    for j in range(parent.per_thread):
        row = e.bin("div", _clamped(e, parent, j), e.const(parent.shape[-1], "s32"), "s32")
        raw = e.ld(mem.space, address(e, mem, _element(e, mem, flat, row, 0)), mt)
        regs.append(raw if mt == rt else widen(e, raw, mt, mem.element))
    return Dist(layout, regs, rt)


def widen(e: TargetEmitter, raw: Value, mt: str, element: object) -> Value:
    """A loaded element as the register of its value (exact): a bf16/f16 element as
    an f32 register; a bool byte (0 or 1, as NumPy stores it) as a predicate; an
    int8 byte, loaded sign-extended, is its own ``s32``; an fp8 byte as the f32 of its
    value (:mod:`tessera.lower.arith.fp8`)."""
    from tessera.lower.values import storage_name

    name = storage_name(element)  # type: ignore[arg-type]
    if mt == "u8" and name == "bool":
        return e.setp("ne", raw, e.const(0, "u32"), "u32")
    if mt == "s8" and name == "int8":
        return raw
    if mt == "b8" and name in ("float8_e4m3fn", "float8_e5m2"):
        from tessera.lower.arith import fp8

        return fp8.widen(e, raw, name)
    if mt == "b16" and name == "bfloat16":
        # bf16 is the high half of the f32 with the same value
        return e.pack([e.const(0, "b16"), raw], "f32")
    if mt == "b16" and name == "float16":
        return e.cvt(e.pack([raw], "f16"), "f32", "f16")
    raise UnsupportedError(f"loading {mt} tiles into registers is not lowered yet", loc=e.loc)


def for_each_element(low: Lowerer, layout: Blocked, mem: Mem,
                     fn: Callable[[TargetEmitter, Value, int], None],
                     e: TargetEmitter | None = None) -> None:
    """Call ``fn(emitter, address, register)`` for every element this thread holds of a
    blocked tensor written to ``mem`` (emitting with ``e``, by default the rule's
    emitter); chunks past the end are skipped (a guard)."""
    e = e or low.em

    def chunk(inner: TargetEmitter, j: int) -> None:
        k0 = chunk_index(inner, layout, j)
        for c in range(layout.vec):
            off = _element(inner, mem, layout, k0, c)
            fn(inner, address(inner, mem, off), j * layout.vec + c)

    for_each_chunk(e, layout, chunk)


def for_each_chunk(e: TargetEmitter, layout: Blocked,
                   chunk: Callable[[TargetEmitter, int], None]) -> None:
    """``chunk(emitter, j)`` for each chunk ``j`` this thread holds of a blocked tensor;
    a chunk that lies past the tensor's end in some threads runs under a guard."""
    for j in range(layout.per_thread):
        if (j + 1) * THREADS <= layout.chunks:
            chunk(e, j)
        else:
            ok = e.setp("lt", chunk_index(e, layout, j),
                        e.const(layout.chunks * layout.vec, "s32"), "s32")
            e.if_(ok, lambda inner, j=j: chunk(inner, j))


def store_blocked(low: Lowerer, mem: Mem, value: Dist) -> None:
    """Store a blocked tensor; chunks past the end are skipped."""
    from tessera.lower.rules.memory import to_mem

    assert isinstance(value.layout, Blocked)
    mt = mem_type(mem.element)

    def store(e: TargetEmitter, addr: Value, r: int) -> None:
        e.st(mem.space, addr, to_mem(e, value.regs[r], value.type, mt, mem.element), mt)
    for_each_element(low, value.layout, mem, store)


@rule(tile_compute.Broadcast)
def _broadcast(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    (x,) = args
    out = low.layouts[instr.results[0]]
    if isinstance(x, Scalar):
        return [Dist(out, [x.reg] * register_count(out), x.type)]
    if isinstance(x, Mem) and isinstance(out, Blocked) and len(out.shape) > 2:
        # a tile of higher rank stays a view with stride-0 axes, which each use reads
        # with its row-major index split over every axis
        return [broadcast_view(x, instr.op.shape, instr.op.dims)]  # type: ignore[attr-defined]
    if isinstance(x, Dist) and x.layout == out:  # nothing stretched
        return [x]
    if isinstance(x, Mem):  # a tile read from memory: each register loads its element
        from tessera.lower.broadcast import broadcast_load

        return [broadcast_load(low, x, out, instr.op.dims)]
    if isinstance(out, Acc) and isinstance(x.layout, Row):
        half = out.cols // 2
        regs = [x.regs[2 * (r // half) + (((r % half) >> 1) & 1)]
                for r in range(register_count(out))]
        return [Dist(out, regs, x.type)]
    if isinstance(out, Blocked) and isinstance(x.layout, BRow) and x.layout.parent == out:
        return [Dist(out, [x.regs[r // out.vec] for r in range(register_count(out))], x.type)]
    if isinstance(out, Blocked) and isinstance(x.layout, BRow):  # rows held differently
        from tessera.lower.rules.stage import stage_rows

        shape = tuple(instr.operands[0].type.shape)  # type: ignore[attr-defined]
        return [broadcast_view(stage_rows(low, x, shape), instr.op.shape,  # type: ignore[attr-defined]
                               instr.op.dims)]  # type: ignore[attr-defined]
    src = instr.operands[0].owner
    if isinstance(src, Instr) and isinstance(src.op, tile_memory.MaskedLoad) and \
            isinstance(out, (Blocked, Acc)):  # a masked row (a bias at a ragged edge)
        from tessera.lower.rules.masked import load_masked_broadcast

        return [load_masked_broadcast(low, src, out, tuple(instr.op.dims))]  # type: ignore[attr-defined]
    if isinstance(out, Blocked) and isinstance(x, Dist) and isinstance(x.layout, Blocked) \
            and (len(out.shape) > len(x.layout.shape) or tuple(out.shape) != tuple(
                x.layout.shape)):  # an axis inserted or stretched: elements move
        from tessera.lower.rules.stage import stage

        return [broadcast_view(stage(low, x, instr), instr.op.shape,  # type: ignore[attr-defined]
                               instr.op.dims)]  # type: ignore[attr-defined]
    raise UnsupportedError(f"broadcast from {x.layout} to {out} is not lowered", loc=instr.loc)


def broadcast_view(mem: Mem, shape: tuple[int, ...], dims: tuple[int, ...]) -> Mem:
    """The view of ``mem`` broadcast to ``shape`` (operand axis ``i`` is result axis
    ``dims[i]``): new and stretched axes have stride 0."""
    strides = [0] * len(shape)
    for size, stride, d in zip(mem.shape, mem.strides, dims):
        strides[d] = stride if size == shape[d] and size > 1 else 0
    return replace(mem, shape=tuple(shape), strides=tuple(strides))


def register_count(layout: object) -> int:
    """Registers per thread of a tensor in ``layout``."""
    if isinstance(layout, Acc):
        return layout.rows * layout.cols // 128
    if isinstance(layout, Row):
        return layout.rows // 32
    if isinstance(layout, Blocked):
        return layout.per_thread * layout.vec
    if isinstance(layout, BRow):
        return layout.parent.per_thread
    raise UnsupportedError(f"unknown layout {layout}")


@rule(tile_compute.Reshape)
def _reshape(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    (x,) = args
    out = low.layouts.get(instr.results[0])
    if isinstance(x, Dist) and out == x.layout:  # adding or removing unit dims
        return [x]
    if isinstance(x, Dist) and isinstance(x.layout, Blocked) and isinstance(out, Blocked) \
            and out.vec == x.layout.vec and prod(out.shape) == prod(x.layout.shape):
        return [Dist(out, x.regs, x.type)]  # row-major order, so the same registers
    if isinstance(x, Mem):  # a view: unit dims are free (x[:, None] of a bias column)
        from tessera.lower.broadcast import reshape_view

        view = reshape_view(x, tuple(instr.op.shape)) or _contiguous(x, tuple(instr.op.shape))
        if view is not None:
            return [view]
    if isinstance(x, Dist) and isinstance(x.layout, Blocked) and len(x.layout.shape) == 2 \
            and x.type in ("f32", "f64"):  # elements move: through shared memory
        from tessera.lower.rules.stage import stage

        view = _contiguous(stage(low, x, instr), tuple(instr.op.shape))
        if view is not None:
            return [view]
    raise UnsupportedError("reshapes that move elements between threads are not lowered",
                           loc=instr.loc)


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(prod(shape[k + 1:]) for k in range(len(shape)))


def _contiguous(mem: Mem, shape: tuple[int, ...]) -> Mem | None:
    """A row-major contiguous view ``mem`` read in another ``shape`` of as many elements
    (the same elements in the same order), or None for other views."""
    kept = [(d, s) for d, s in zip(mem.shape, mem.strides) if d != 1]
    dense = _row_major(tuple(d for d, _ in kept))
    if mem.transposed or [s for _, s in kept] != list(dense) or prod(shape) != prod(mem.shape):
        return None
    return replace(mem, shape=shape, strides=_row_major(shape))


@rule(tile_compute.CausalMask)
def _causal(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    s, q0, k0 = args
    assert isinstance(s, Dist) and isinstance(q0, Scalar) and isinstance(k0, Scalar)
    if isinstance(s.layout, Blocked):
        return [_causal_blocked(low, s, q0, k0)]
    if not isinstance(s.layout, Acc):
        raise UnsupportedError(f"causal_mask of a tile in layout {s.layout} is not lowered",
                               loc=instr.loc)
    e = low.em
    rows, cols = acc_coords(s.layout.rows, s.layout.cols)
    from tessera.lower.sm80.gemm import acc_origin

    # register r holds (row0 + R(r), col0 + K(r)), R and K static (thread 0's coordinates),
    # so keep (q0 + row >= k0 + col)  <=>  (q0 - k0) + row0 - col0 >= K(r) - R(r)
    row0, col0 = acc_origin(e)
    base = e.add(e.bin("sub", q0.reg, k0.reg, "s32"), e.bin("sub", row0, col0, "s32"), "s32")
    ninf = e.const(float("-inf"), "f32")
    regs = []
    for r, x in enumerate(s.regs):
        keep = e.setp("ge", base, e.const(int(cols[0, r]) - int(rows[0, r]), "s32"), "s32")
        regs.append(e.selp(x, ninf, keep, "f32"))
    return [Dist(s.layout, regs, "f32")]


def _causal_blocked(low: Lowerer, s: Dist, q0: Scalar, k0: Scalar) -> Dist:
    """``causal_mask`` of a blocked 2-D tile: register ``c`` of chunk ``j`` holds flat
    element ``k = chunk_index(j) + c``, at row ``k // cols`` and column ``k % cols``;
    it is kept where ``q0 + row >= k0 + col``, else -inf (index comparisons only).
    Registers of chunks past the tile's end compare garbage and are never stored."""
    layout = s.layout
    assert isinstance(layout, Blocked) and len(layout.shape) == 2
    e = low.em
    cols = e.const(layout.shape[-1], "s32")
    diff = e.bin("sub", q0.reg, k0.reg, "s32")
    ninf = e.const(float("-inf"), s.type)
    regs = []
    for j in range(layout.per_thread):
        k = chunk_index(e, layout, j)
        for c in range(layout.vec):
            flat = e.add(k, e.const(c, "s32"), "s32") if c else k
            row = e.bin("div", flat, cols, "s32")
            col = e.bin("rem", flat, cols, "s32")
            # q0 + row >= k0 + col  <=>  (q0 - k0) + row >= col
            keep = e.setp("ge", e.add(diff, row, "s32"), col, "s32")
            regs.append(e.selp(s.regs[j * layout.vec + c], ninf, keep, s.type))
    return Dist(layout, regs, s.type)


__all__ = ["materialize", "register_count", "store_blocked"]
