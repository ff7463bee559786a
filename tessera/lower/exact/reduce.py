"""The exact sum and mean (``tile.reduce {kind = "sum" | "mean", exact = true}``).

The tile level defines them as the exact sum of the line reduced (divided by its
length) rounded once (:func:`tessera.numerics.reductions.sums.sum_rounded`). A CTA
computes that with one long accumulator per line in shared memory
(:mod:`tessera.lower.exact.longacc`); below, a "row" is such a line: a row of the tile
for a reduction over the last axis, a column for one over another axis (element ``k``
of a tile reduced over an axis of ``n`` elements with ``inner`` elements after it goes
to accumulator ``(k // (n inner)) inner + k % inner``, the flat index of its result):

1. every thread zeroes its share of the accumulators; barrier;
2. every thread deposits each element it holds into its row's accumulator
   (``red.shared.add.u64`` of two 32-bit pieces, ``red.shared.or.b32`` of the
   non-finite flags) — integer additions, so the order in which threads and warps
   arrive cannot change a bit; barrier;
3. thread ``r`` (and ``r + 128``...) normalises row ``r``'s carries, rounds it once and
   writes the result to shared memory; barrier;
4. every thread reads the results of the rows it holds, in the row layout of the
   source (one register per chunk), or the one result of a 1-D tile; the results of a
   reduction over another axis stay in shared memory as a row-major view of the
   result tile, which its consumers read in their own layouts (a column sum broadcast
   back over the rows reads each column's result where the tile's element lies).

Any row length and any number of rows per tile take the same path: no row must be a
power of two or fit a warp.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.lower.core import THREADS, Lowerer, exact_rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.exact.longacc import (
    SUM_DIGITS,
    SUM_QUANTUM,
    SharedAcc,
    deposit_f32,
    round_words_at,
    to_format,
    zero_shared,
)
from tessera.lower.exact.mma import EXACT_MAXNREG
from tessera.lower.exact.msetable import MseTable, mse_terms
from tessera.lower.exact.sum64 import (
    MSE_DIGITS,
    MSE_QUANTUM,
    SUM64_DIGITS,
    SUM64_QUANTUM,
    deposit_f64,
)
from tessera.lower.layout import Blocked, BRow
from tessera.lower.rules.tensor import chunk_index, for_each_chunk, materialize
from tessera.lower.values import Dist, Lowered, Mem, Scalar, storage_name
from tessera.numerics import f32

#: element formats summed (widened exactly to f32 registers) and result formats the
#: rounding produces (in the f32 registers they live in)
FORMATS = ("float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


def _rows_of(e: TargetEmitter, layout: Blocked, j: int, cols: int, rows: int) -> Value:
    """The row of this thread's chunk ``j`` (the last row for a chunk past the end)."""
    row = e.bin("div", chunk_index(e, layout, j), e.const(cols, "s32"), "s32")
    if (j + 1) * THREADS <= layout.chunks:
        return row
    return e.bin("min", row, e.const(rows - 1, "s32"), "s32")


def _for_rows(e: TargetEmitter, rows: int, body: object) -> None:
    """``body(emitter, row)`` for rows ``tid``, ``tid + 128``... below ``rows``."""
    tid = e.cvt(e.sreg("tid.x"), "s32", "u32")
    for k in range(-(-rows // THREADS)):
        r = e.add(tid, e.const(k * THREADS, "s32"), "s32") if k else tid
        ok = e.setp("lt", r, e.const(rows, "s32"), "s32")
        e.if_(ok, lambda inner, r=r: body(inner, r))  # type: ignore[operator]


def exact_row_sums(low: Lowerer, x: Dist | list[Dist], rows: int, cols: int, element: object,
                   divisor: int, grid: tuple[int, int] = (SUM64_DIGITS, SUM64_QUANTUM),
                   step: int = 1) -> tuple[Value, SharedAcc]:
    """Steps 1-3 above for the blocked ``x`` of ``rows`` rows of ``cols`` elements
    (``step`` elements apart in the flat tile: 1 for the last axis): the ``u32``
    address of the ``rows`` results in shared memory (f32 registers of the result
    format; f64 for the f64 terms of :mod:`tessera.lower.exact.sum64` summed into
    float64). f64 terms use an accumulator of ``grid`` = (words, quantum). ``x`` may be
    a list of blocked tiles whose elements all belong to the one row (``rows`` is 1):
    each is deposited in turn."""
    parts = x if isinstance(x, list) else [x]
    e = low.em
    terms64 = parts[0].type == "f64"
    wide = terms64 and storage_name(element) == "float64"  # type: ignore[arg-type]
    digits, quantum = grid if terms64 else (SUM_DIGITS, SUM_QUANTUM)
    low.extra.setdefault("maxnreg", EXACT_MAXNREG)
    acc_bytes = rows * 8 * (digits + 1)
    base = low.shared_buffer("xacc", acc_bytes + (8 if wide else 4) * rows, 8)
    acc = SharedAcc(base, rows, digits)
    zero_shared(e, base, rows * (digits + 1))
    e.bar()
    deposit_rows(low, parts, acc, cols, step, quantum)
    results = e.add(base, e.const(acc_bytes, "u32"), "u32")
    round_rows(low, acc, results, element, divisor, quantum, wide)
    return results, acc


def deposit_rows(low: Lowerer, parts: list[Dist], acc: SharedAcc, cols: int, step: int,
                 quantum: int) -> None:
    """Step 2 above: every element of the blocked ``parts`` added to its row's
    accumulator of ``acc`` (no barrier: the caller's publishes the sums). f64 terms
    are whole numbers of quanta ``2**-quantum`` (:mod:`tessera.lower.exact.sum64`)."""
    rows = acc.rows

    def deposit_one(inner: TargetEmitter, addr: Value, v: Value, terms64: bool) -> None:
        if terms64:
            deposit_f64(inner, addr, acc, v, quantum)
        else:
            deposit_f32(inner, addr, acc, v)

    for part in parts:
        def deposit(inner: TargetEmitter, j: int, part: Dist = part) -> None:
            # one row address per chunk
            lay = part.layout
            assert isinstance(lay, Blocked)
            row = inner.bin("div", chunk_index(inner, lay, j), inner.const(cols, "s32"),
                            "s32") if rows > 1 else inner.const(0, "s32")
            addr = acc.row(inner, row)
            for c in range(lay.vec):
                deposit_one(inner, addr, part.regs[j * lay.vec + c], part.type == "f64")

        def deposit_apart(em: TargetEmitter, j: int, part: Dist = part) -> None:
            # a chunk spans columns: an accumulator per element
            lay = part.layout
            assert isinstance(lay, Blocked)
            k0 = chunk_index(em, lay, j)
            for c in range(lay.vec):
                k = em.add(k0, em.const(c, "s32"), "s32") if c else k0
                row = em.bin("rem", k, em.const(step, "s32"), "s32")
                if rows > step:  # leading axes: blocks of n * step elements
                    block = em.bin("div", k, em.const(cols * step, "s32"), "s32")
                    row = em.add(em.mul(block, em.const(step, "s32"), "s32"), row, "s32")
                deposit_one(em, acc.row(em, row), part.regs[j * lay.vec + c],
                            part.type == "f64")

        assert isinstance(part.layout, Blocked)
        for_each_chunk(low.em, part.layout, deposit if step == 1 else deposit_apart)


def round_rows(low: Lowerer, acc: SharedAcc, results: Value, element: object, divisor: int,
               quantum: int, wide: bool = False) -> None:
    """Step 3 above, between two barriers: thread ``r`` (``r + 128``...) rounds row
    ``r`` of ``acc`` (divided by ``divisor``) once to ``element`` and stores it at
    ``results`` (f32 registers of the format; f64 with ``wide``)."""
    e = low.em
    size = 8 if wide else 4
    e.bar()

    def finish(inner: TargetEmitter, row: Value) -> None:
        addr = acc.row(inner, row)
        flags = inner.ld("shared", addr, "u32", offset=8 * acc.digits)
        odd = round_words_at(inner, acc.digits, "shared", addr, flags, quantum, divisor,
                             nearest=wide)
        value = odd if wide else to_format(inner, odd, element)
        slot = inner.add(results, inner.cvt(inner.mul(row, inner.const(size, "s32"), "s32"),
                                            "u32", "s32"), "u32")
        inner.st("shared", slot, value, "f64" if wide else "f32")

    _for_rows(e, acc.rows, finish)
    e.bar()


def _read(e: TargetEmitter, results: Value, row: Value, t: str = "f32") -> Value:
    size = 8 if t == "f64" else 4
    slot = e.add(results, e.cvt(e.mul(row, e.const(size, "s32"), "s32"), "u32", "s32"), "u32")
    return e.ld("shared", slot, t)


def softmax_terms(src: Value) -> bool:
    """Whether ``src`` is ``exp(x - broadcast(max(x)))`` over the last axis of an f64
    tile (the softmax kernel's terms, in ``{0, NaN} U [e^-104, 1]``)."""
    exp = _made_by(src, tile_compute.Exp)
    sub = exp and _made_by(exp.operands[0], tile_compute.Sub)
    if sub is None:
        return False
    x, stat = sub.operands
    bcast = _made_by(stat, tile_compute.Broadcast)
    top = bcast and _made_by(bcast.operands[0], tile_compute.Reduce)
    return top is not None and top.op.kind == "max" and top.operands[0] is x and \
        top.op.axis % x.type.rank == x.type.rank - 1  # type: ignore[attr-defined]


def expansion_terms(src: Value) -> bool:
    """Whether ``src`` is a key block's softmax terms beside the carried row sum: the
    ``reshape(where(slab == 0, broadcast(terms), broadcast(carried)))`` of
    :func:`tessera.ir.transforms.to_tile.attention.keyblocks._expansion`, whose every value is a
    whole number of quanta 2^-203 below 2^30 in magnitude (the terms, and sums of them
    rounded to binary64, and what those leave: :mod:`tessera.lower.exact.sum64`)."""
    reshape = _made_by(src, tile_compute.Reshape)
    where = reshape and _made_by(reshape.operands[0], tile_compute.Where)
    if where is None:
        return False
    # exp(x - broadcast(m)), m the row maximum carried over the key blocks' first pass,
    # broadcast over the slab axis (or computed at its shape: lower.hoist)
    terms = where.operands[1]
    bcast = _made_by(terms, tile_compute.Broadcast)
    exp = _made_by(bcast.operands[0] if bcast else terms, tile_compute.Exp)
    sub = exp and _made_by(exp.operands[0], tile_compute.Sub)
    return sub is not None and _made_by(sub.operands[1], tile_compute.Broadcast) is not None


def _made_by(v: Value, kind: type) -> Instr | None:
    """The instruction that produced ``v`` when it is a ``kind`` op, else None."""
    owner = v.owner
    return owner if isinstance(owner, Instr) and isinstance(owner.op, kind) else None


@exact_rule(tile_compute.Reduce)
def _exact_reduce(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, tile_compute.Reduce)
    src, res = instr.operands[0], instr.results[0]
    st, rt = src.type, res.type
    assert isinstance(st, TensorType) and isinstance(rt, TensorType)
    if op.kind not in ("sum", "mean"):
        raise UnsupportedError(f"exact tile.reduce {op.kind} over axis {op.axis} is not "
                               "lowered", hint="exact sums and means are", loc=instr.loc)
    if len(instr.operands) == 2:  # it continues an accumulator
        from tessera.lower.exact.carried import carried_reduce

        return carried_reduce(low, instr, args)
    axis = op.axis % st.rank
    last = axis == st.rank - 1
    name = storage_name(rt.element)
    if isinstance(args[0], MseTable):  # an mse's terms, deposited without their table
        return _mse_mean(low, instr, args[0])
    x = held_terms(low, src, args[0])
    wide = last and isinstance(x, Dist) and x.type == "f64" and op.kind == "sum" and \
        name == "float64" and (softmax_terms(src) or expansion_terms(src))
    mse = isinstance(x, Dist) and x.type == "f64" and name in FORMATS and mse_terms(src)
    if not isinstance(x, Dist) or not isinstance(x.layout, Blocked) or (not wide and not mse and (
            x.type != "f32" or storage_name(st.element) not in FORMATS or
            name not in FORMATS)):
        raise UnsupportedError(
            f"exact tile.reduce of a {st} tile into {rt.element} is not lowered",
            hint="exact sums of f32, bf16, f16 and fp8 tiles held in registers (not mma "
                 "accumulators) are", loc=instr.loc)
    cols, inner = st.shape[axis], prod(st.shape[axis + 1:])
    rows = prod(st.shape[:axis]) * inner
    if cols == 0:
        raise UnsupportedError("an exact reduction of empty rows is not lowered", loc=instr.loc)
    results, _ = exact_row_sums(low, x, rows, cols, rt.element,
                                cols if op.kind == "mean" else 1,
                                (MSE_DIGITS, MSE_QUANTUM) if mse else
                                (SUM64_DIGITS, SUM64_QUANTUM), inner)
    if not last:  # step 4 is each consumer's: a row-major view of the results
        shape = tuple(rt.shape)
        strides = tuple(prod(shape[k + 1:]) for k in range(len(shape)))
        return [Mem("shared", results, None, shape, strides, f32, align=4)]
    t = "f64" if wide else "f32"
    return row_results(low, instr, rows, lambda e, row: _read(e, results, row, t), t)


def held_terms(low: Lowerer, src: Value, x: Lowered) -> Lowered:
    """The lowered terms ``x`` of ``src`` in registers: a memory view read in the
    source's layout; rows of one element held as a register per row."""
    x = materialize(low, x, low.layouts.get(src))
    if isinstance(x, Dist) and isinstance(x.layout, BRow) and x.layout.parent.shape[-1] == 1 \
            and x.layout.parent.vec == 1:  # rows of one element: a register per row
        x = Dist(x.layout.parent, x.regs, x.type)
    return x


def _mse_mean(low: Lowerer, instr: Instr, table: MseTable) -> list[Lowered]:
    """The exact mean of an mse's table (:mod:`tessera.lower.exact.msetable`): its
    ``(n,)`` term tiles deposited into one accumulator, divided by the table's size."""
    st, rt = instr.operands[0].type, instr.results[0].type
    assert isinstance(st, TensorType) and isinstance(rt, TensorType)
    terms = table.terms
    if not all(isinstance(t, Dist) and isinstance(t.layout, Blocked) and t.type == "f64"
               for t in terms):
        raise UnsupportedError("the terms of an mse held other than as blocked f64 "
                               "register tiles are not lowered",
                               loc=instr.loc)
    results, _ = exact_row_sums(low, terms, 1, 0, rt.element,  # type: ignore[arg-type]
                                prod(st.shape), (MSE_DIGITS, MSE_QUANTUM))
    return row_results(low, instr, 1, lambda e, row: _read(e, results, row), "f32")


def row_results(low: Lowerer, instr: Instr, rows: int,
                read: Callable[[TargetEmitter, Value], Value], t: str) -> list[Lowered]:
    """Step 4 above: the per-row results ``read(e, row)`` (registers of type ``t``) in
    the layout of ``instr``'s result (the row layout of the source, or a flat tile)."""
    return [value_in_layout(low, instr.results[0], rows, read, t)]


def value_in_layout(low: Lowerer, res: Value, rows: int,
                    read: Callable[[TargetEmitter, Value], Value], t: str) -> Lowered:
    """The tile value ``res`` whose flat element ``k`` is ``read(e, k)`` (a register of
    type ``t``), in ``res``'s layout: one register for a scalar, one per chunk of the
    parent tile's rows for a row layout, one per element for a blocked tile."""
    e = low.em
    rt = res.type
    assert isinstance(rt, TensorType)
    if rt.rank == 0:
        return Scalar(read(e, e.const(0, "s32")), t)
    out = low.layouts[res]
    if isinstance(out, BRow):
        parent = out.parent
        pcols = parent.shape[-1]
        prow = prod(parent.shape[:-1])
        regs = [read(e, _rows_of(e, parent, j, pcols, prow)) for j in range(parent.per_thread)]
        return Dist(out, regs, t)
    if isinstance(out, Blocked):  # flat element k of the result is row k
        regs = []
        for j in range(out.per_thread):
            k0 = chunk_index(e, out, j)
            for c in range(out.vec):
                k = e.add(k0, e.const(c, "s32"), "s32") if c else k0
                regs.append(read(e, e.bin("min", k, e.const(rows - 1, "s32"), "s32")))
        return Dist(out, regs, t)
    raise UnsupportedError(f"the result of an exact reduction in layout {out} is not "
                           "lowered", loc=e.loc)


def for_each_element(low: Lowerer, x: Dist, cols: int,
                     body: Callable[[TargetEmitter, Value, Value], None]) -> None:
    """``body(emitter, row, register)`` for every element this thread holds of the
    blocked ``x`` (rows of ``cols`` elements), guarded past the tile's end."""
    layout = x.layout
    assert isinstance(layout, Blocked)
    e = low.em

    def chunk(inner: TargetEmitter, j: int) -> None:
        row = inner.bin("div", chunk_index(inner, layout, j), inner.const(cols, "s32"), "s32")
        for c in range(layout.vec):
            body(inner, row, x.regs[j * layout.vec + c])

    for_each_chunk(e, layout, chunk)


__all__ = ["FORMATS", "deposit_rows", "exact_row_sums", "for_each_element", "held_terms",
           "round_rows", "row_results", "value_in_layout"]
