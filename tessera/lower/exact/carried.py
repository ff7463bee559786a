"""Carried exact sums (``tile.reduce(x, c) {exact}``): rows longer than one program
holds, summed block by block into one long accumulator per result element.

The tile level defines a carried *sum* as the exact accumulator ``c + sum(x)``, held
exactly through further carried sums and loop-carried values and rounded once where
any other op uses it, and a carried *mean* as ``(c + sum(x)) / count`` rounded once
(:mod:`tessera.numerics.reductions.accumulator.carried`). The values one accumulator
flows through form a chain (:mod:`tessera.lower.exact.chains`) whose buffer in shared
memory (:mod:`tessera.lower.exact.accplan`) holds a long accumulator
(:class:`~tessera.lower.exact.longacc.SharedAcc`) per result element, zeroed at
kernel entry, then a slot per element for the rounded results. In PTX:

* a **carried sum** deposits its block's terms into the accumulators
  (:func:`tessera.lower.exact.reduce.deposit_rows`: integer atomics, so the order of
  threads and blocks cannot change a bit) and returns placeholder registers: no
  zeroing, no barrier, no rounding;
* a **use** of a chain's value by another op rounds it once: a barrier publishes the
  deposits, thread ``r`` (``r + 128``...) rounds accumulator ``r`` to the element into
  its slot, and after a second barrier every thread reads the elements it holds
  (:func:`tessera.lower.exact.reduce.round_rows`);
* a **carried mean** ends the chain the same way, dividing by ``count`` inside the one
  rounding (:func:`tessera.lower.exact.longacc.round_words_at`); the generated mean
  after the last block reduces a zero tile, which deposits nothing.

Terms of f32 or a narrower float format count quanta of ``2**-149``
(:data:`~tessera.lower.exact.longacc.SUM_DIGITS` words); a mean squared error's f64
square terms (:mod:`tessera.lower.exact.msetable`: its table is deposited term by term,
never built) count ``2**-294`` (:data:`~tessera.lower.exact.sum64.MSE_DIGITS` words).
Any other f64 sum is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from tessera.errors import UnsupportedError
from tessera.ir.core import Function, Instr, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.exact.chains import is_carried, is_zero
from tessera.lower.exact.longacc import SUM_DIGITS, SUM_QUANTUM, SharedAcc
from tessera.lower.exact.msetable import MseTable, mse_terms
from tessera.lower.exact.reduce import (
    FORMATS,
    deposit_rows,
    exact_row_sums,
    held_terms,
    round_rows,
    value_in_layout,
)
from tessera.lower.exact.sum64 import MSE_DIGITS, MSE_QUANTUM
from tessera.lower.layout import Blocked
from tessera.lower.values import Dist, Lowered, Scalar, storage_name


@dataclass(frozen=True)
class Grid:
    """An accumulator's words and the quantum ``2**-quantum`` they count."""

    digits: int
    quantum: int


#: terms of f32 or narrower formats, and a mean squared error's f64 terms
SUM_GRID = Grid(SUM_DIGITS, SUM_QUANTUM)
MSE_GRID = Grid(MSE_DIGITS, MSE_QUANTUM)
#: the largest count a mean divides by inside its rounding
MAX_COUNT = 2 ** 31


def _tensor(v: Value) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def _grid(instr: Instr) -> Grid:
    """The accumulator of the carried reduce ``instr``, by its terms and result."""
    src = instr.operands[0]
    terms, out = storage_name(_tensor(src).element), storage_name(_tensor(instr.results[0]).element)
    if out in FORMATS and terms in FORMATS:
        return SUM_GRID
    if out in FORMATS and terms == "float64" and (mse_terms(src) or is_zero(src)):
        return MSE_GRID
    raise UnsupportedError(
        f"a carried exact sum of {_tensor(src).element} terms into "
        f"{_tensor(instr.results[0]).element} is not lowered", loc=instr.loc,
        hint="carried sums of f32, bf16, f16 and fp8 terms into those formats, and "
             "mean squared errors, are")


def chain_grids(fn: Function, members: dict[Value, Value]) -> dict[Value, Grid]:
    """The chains of ``fn`` (``members``: value -> root) that carried sums flow
    through, by root, with their accumulators' grid."""
    mma = {members[i.results[0]] for i in walk(fn.body)
           if isinstance(i.op, tile_compute.Mma) and i.op.exact}
    grids: dict[Value, Grid] = {}
    for instr in walk(fn.body):
        if not is_carried(instr) or instr.op.kind != "sum":  # type: ignore[attr-defined]
            continue
        root, grid = members[instr.results[0]], _grid(instr)
        if root in mma or grids.get(root, grid) != grid:
            raise UnsupportedError("an exact accumulator that both an mma and a carried "
                                   "sum, or sums of terms of different widths, continue "
                                   "is not lowered", loc=instr.loc)
        grids[root] = grid
    _start_once(fn, members, grids)
    return grids


def _start_once(fn: Function, members: dict[Value, Value], grids: dict[Value, Grid]) -> None:
    """Refuse a carried chain that starts from zeros inside a loop or branch: its
    buffer is zeroed once, at kernel entry (the generated chains start before their
    outermost loop)."""
    from tessera.interp.tile.wide import possibly_exact
    from tessera.ir.structured import value_slots

    exact = possibly_exact(fn)
    top = {id(i) for i in fn.body.instrs}
    for instr in walk(fn.body):
        if id(instr) in top:
            continue
        if is_carried(instr):
            fresh = instr.operands[1] not in exact
        elif isinstance(instr.op, (tile_ir.For, tile_ir.While, tile_ir.If)):
            fresh = any(any(members.get(t) in grids for t in targets) and
                        not all(v in exact for v in sources)
                        for sources, targets in value_slots(instr))
        else:
            continue
        if fresh:
            raise UnsupportedError("a carried exact sum that starts from zeros inside a "
                                   "loop or branch is not lowered", loc=instr.loc,
                                   hint="start its accumulator before the outermost loop")


def keep_flattened_terms(low: Lowerer) -> None:
    """Flatten each carried sum's block tile to its terms (a ``reshape`` to ``(n,)``
    read by carried sums alone) in place: :mod:`tessera.lower.exact.flatten`."""
    from tessera.ir.core import uses
    from tessera.lower.exact.flatten import flattening, narrow, source_width

    users = uses(low.fn.body)
    for instr in walk(low.fn.body):
        reshape = flattening(instr.operands[0]) if is_carried(instr) else None
        if reshape is not None and all(is_carried(u) for u in users.get(reshape.results[0], [])):
            narrow(low, {reshape.results[0]}, [reshape], source_width(low, [reshape]))


def buffer_bytes(grid: Grid, t: TensorType) -> int:
    """Bytes of a carried chain's buffer for values of type ``t``: the accumulators,
    then an f32 slot per element (to 8 bytes)."""
    rows = prod(t.shape)
    return rows * 8 * (grid.digits + 1) + 8 * -(-rows // 2)


def _terms(low: Lowerer, instr: Instr, arg: Lowered, grid: Grid) -> tuple[list[Dist], int, int]:
    """The blocked register tiles of ``instr``'s terms, the length of the lines reduced
    and how many elements apart their elements lie (1 along the last axis)."""
    src = instr.operands[0]
    st = _tensor(src)
    want = "f64" if grid == MSE_GRID else "f32"
    parts: list[Lowered] = list(arg.terms) if isinstance(arg, MseTable) else \
        [held_terms(low, src, arg)]
    if not all(isinstance(p, Dist) and isinstance(p.layout, Blocked) and p.type == want
               for p in parts):
        raise UnsupportedError(f"the terms of a carried exact sum of a {st} tile held other "
                               f"than as blocked {want} register tiles are not lowered",
                               loc=instr.loc)
    if isinstance(arg, MseTable):
        return parts, 0, 1  # type: ignore[return-value]
    axis = instr.op.axis % st.rank  # type: ignore[attr-defined]
    return parts, st.shape[axis], prod(st.shape[axis + 1:])  # type: ignore[return-value]


def _rounded(low: Lowerer, v: Value, acc: SharedAcc, divisor: int, grid: Grid) -> Lowered:
    """The tile value ``v`` whose accumulators are ``acc``, each divided by ``divisor``
    and rounded once to ``v``'s element, in ``v``'s layout."""
    e = low.em
    results = e.add(acc.base, e.const(acc.size, "u32"), "u32")
    round_rows(low, acc, results, _tensor(v).element, divisor, grid.quantum)
    return value_in_layout(low, v, acc.rows, _slot_reader(results), "f32")


def _slot_reader(results: Value) -> Callable[[TargetEmitter, Value], Value]:
    """Loads element ``row``'s rounded value from the f32 slots at ``results``."""
    def read(em: TargetEmitter, row: Value) -> Value:
        off = em.cvt(em.mul(row, em.const(4, "s32"), "s32"), "u32", "s32")
        return em.ld("shared", em.add(results, off, "u32"), "f32")
    return read


def round_carried(low: Lowerer, v: Value, base: Value, grid: Grid) -> Lowered:
    """The carried chain value ``v`` (accumulators at ``base``) rounded once to its
    element, for a use by another op."""
    acc = SharedAcc(base, max(1, prod(_tensor(v).shape)), grid.digits)
    return _rounded(low, v, acc, 1, grid)


def carried_reduce(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    """The exact rule of a ``tile.reduce`` with an accumulator operand."""
    op = instr.op
    assert isinstance(op, tile_compute.Reduce)
    members, bufs, exact = low.extra["exact_chains"]
    grids: dict[Value, Grid] = low.extra["exact_carried"]
    src, acc_v, res = instr.operands[0], instr.operands[1], instr.results[0]
    rows = max(1, prod(_tensor(res).shape))
    if op.kind == "mean" and not 0 < op.count <= MAX_COUNT:
        raise UnsupportedError(f"a carried exact mean of {op.count:,} terms is not lowered",
                               hint=f"at most {MAX_COUNT:,} terms are", loc=instr.loc)
    if op.kind == "mean" and acc_v not in exact:  # one block from zeros: a plain mean
        grid = _grid(instr)
        parts, cols, step = _terms(low, instr, args[0], grid)
        results, acc = exact_row_sums(low, parts, rows, cols, _tensor(res).element, op.count,
                                      (grid.digits, grid.quantum), step)
        return [value_in_layout(low, res, rows, _slot_reader(results), "f32")]
    root = members[res if op.kind == "sum" else acc_v]
    grid = grids[root]
    acc = SharedAcc(bufs[root], rows, grid.digits)
    if not is_zero(src):  # (zeros add nothing)
        parts, cols, step = _terms(low, instr, args[0], grid)
        deposit_rows(low, parts, acc, cols, step, grid.quantum)
    if op.kind == "mean":
        return [_rounded(low, res, acc, op.count, grid)]
    held = args[1]
    if isinstance(held, (Dist, Scalar)) and held.type == "f32":
        return [held]  # the placeholder registers the chain carries
    return [value_in_layout(low, res, rows, lambda em, _row: em.const(0.0, "f32"), "f32")]


__all__ = ["MSE_GRID", "SUM_GRID", "Grid", "buffer_bytes", "carried_reduce", "chain_grids",
           "keep_flattened_terms", "round_carried"]
