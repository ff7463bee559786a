"""Compute rules of the tile simulator, keyed by op class.

Each rule builds, once per compiled kernel, an ``impl`` closure over its operand
*values* (NumPy arrays with leading program axes, see
:mod:`tessera.interp.tile.context`). Every impl works for any number of program axes:
reductions and transposes address tile axes from the end, and NumPy broadcasting
lines up a uniform tile with a per-program one. Rounding follows
:mod:`tessera.interp.tile.numeric`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.interp.tile.fastpaths.pending import PendingMma
from tessera.interp.tile.memory.spaces import poison
from tessera.interp.tile.mma import Widen, mma, widened
from tessera.interp.tile.numeric import F32, F64, Num, num, to_f64, to_storage
from tessera.ir.core import Instr, Op, rule_decorator
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import Element, TensorType
from tessera.numerics import convert, extrema, storage_of
from tessera.numerics.reductions.accumulator import add_exact, exact_products, to_exact
from tessera.numerics.reductions.accumulator.carried import carried_reduce
from tessera.numerics.reductions.sums import sum_rounded
from tessera.numerics.reductions.treesum import SHORT, row_extreme, row_sum_f64
from tessera.numerics.transcendental import erf64, log64, tanh64
from tessera.numerics.transcendental.exact import pow_f32
from tessera.numerics.transcendental.exp import exp_f32
from tessera.numerics.transcendental.exp64 import exp_f64_specified

Impl = Callable[..., Any]
#: op class -> (instr, fast) -> impl over operand values
IMPLS: dict[type[Op], Callable[[Instr, bool], Impl]] = {}


rule = rule_decorator(IMPLS, "tile rule")


def _num_in(instr: Instr, k: int = 0) -> Num:
    t = instr.operands[k].type
    assert isinstance(t, TensorType)
    return num(t.element)


def _num_out(instr: Instr) -> Num:
    t = instr.results[0].type
    assert isinstance(t, TensorType)
    return num(t.element)


BINARY_UFUNCS = {
    tile_compute.Add: np.add,
    tile_compute.Sub: np.subtract,
    tile_compute.Mul: np.multiply,
    tile_compute.Div: np.true_divide,
    tile_compute.FloorDiv: np.floor_divide,
    tile_compute.Mod: np.mod,
    tile_compute.Maximum: extrema.maximum,  # +0 above -0, whatever the operands' order
    tile_compute.Minimum: extrema.minimum,
}
_COMPARE = {
    tile_compute.Lt: np.less,
    tile_compute.Le: np.less_equal,
    tile_compute.Gt: np.greater,
    tile_compute.Ge: np.greater_equal,
    tile_compute.Eq: np.equal,
    tile_compute.Ne: np.not_equal,
}
#: ops that keep an mma accumulator wide (they only add, subtract, select or move data)
WIDE_OK = (
    tile_compute.Add,
    tile_compute.Sub,
    tile_compute.Neg,
    tile_compute.Abs,
    tile_compute.Where,
    tile_compute.CausalMask,
    tile_compute.Broadcast,
    tile_compute.Reshape,
    tile_compute.Transpose,
)


@rule(*BINARY_UFUNCS)
def _binary(instr: Instr, fast: bool) -> Impl:
    fn = BINARY_UFUNCS[type(instr.op)]
    n = _num_in(instr)
    if isinstance(instr.op, (tile_compute.Add, tile_compute.Sub)) and n.can_be_wide and not fast:
        def wide(x: Any, y: Any) -> Any:
            if x.dtype == F64 or y.dtype == F64:
                return fn(x, y, dtype=F64)  # the input casts widen exactly
            return n.result(fn(n.compute(x), n.compute(y)))
        return wide
    if n.sd == F32 and n.native:
        # the ufunc's input casts round a wide (float64) operand to float32 with the same
        # RNE as narrow(), without a temporary
        return lambda x, y: fn(x, y, dtype=F32)
    if n.native:
        return lambda x, y: n.result(fn(n.narrow(x), n.narrow(y)))
    return lambda x, y: n.result(fn(n.compute(x), n.compute(y)))


@rule(tile_compute.Pow)
def _pow(instr: Instr, fast: bool) -> Impl:
    n = _num_in(instr)
    exponent = getattr(instr.operands[1].owner, "op", None)
    if fast and n.kind == "float" and isinstance(exponent, tile_compute.Full) \
            and exponent.value == 3:
        def cube(x: Any, y: Any) -> Any:  # fast mode: a GELU's x**3 by multiplication
            c = n.compute(x)
            return n.result(c * c * c)
        return cube
    if n.kind != "float" or fast:
        return lambda x, y: n.result(np.power(n.compute(x), n.compute(y)))
    if n.sd != F64:  # formats of up to 32 bits: correctly rounded to f32, as the graph's
        return lambda x, y: n.result(pow_f32(to_f64(n.narrow(x)), to_f64(n.narrow(y))))
    return lambda x, y: n.result(np.power(to_f64(n.narrow(x)), to_f64(n.narrow(y))))


@rule(*_COMPARE)
def _compare(instr: Instr, fast: bool) -> Impl:
    fn = _COMPARE[type(instr.op)]
    n = _num_in(instr)
    return lambda x, y: fn(n.compute(x), n.compute(y))


@rule(tile_compute.And, tile_compute.Or)
def _logical(instr: Instr, fast: bool) -> Impl:
    fn = np.logical_and if isinstance(instr.op, tile_compute.And) else np.logical_or
    return lambda x, y: fn(x, y)


@rule(tile_compute.Neg, tile_compute.Abs)
def _sign(instr: Instr, fast: bool) -> Impl:
    fn = np.negative if isinstance(instr.op, tile_compute.Neg) else np.abs
    n = _num_in(instr)
    if n.can_be_wide and not fast:
        return lambda x: fn(x) if x.dtype == F64 else n.result(fn(n.compute(x)))
    return lambda x: n.result(fn(n.compute(x)))


@rule(tile_compute.Not)
def _not(instr: Instr, fast: bool) -> Impl:
    return np.logical_not


@rule(tile_compute.Exp)
def _exp(instr: Instr, fast: bool) -> Impl:
    n = _num_in(instr)
    if n.kind == "float" and n.sd == F64 and not fast:
        # the specified binary64 exp (+0 below e^-104): the graph softmax's e, as a GPU's
        return lambda x: n.result(exp_f64_specified(n.compute(x)))
    if fast or n.kind != "float":
        return lambda x: n.result(np.exp(n.compute(x)))
    # f32 and narrower floats: the specified exp_f32 (as a GPU's), narrow ones rounded again
    return lambda x: n.result(exp_f32(n.compute(x)))


#: Tile IR ops that are specified binary64 functions (numerics.transcendental)
_SPECIFIED = {tile_compute.Erf: erf64.erf_f64_specified, tile_compute.Tanh:
              tanh64.tanh_f64_specified, tile_compute.Erfc: erf64.erfc_f64_specified,
              tile_compute.Log: log64.log_f64_specified}


@rule(*_SPECIFIED)
def _specified(instr: Instr, fast: bool) -> Impl:
    """The specified function of the value widened exactly, rounded once (fast log: f32)."""
    fn, n = _SPECIFIED[type(instr.op)], _num_in(instr)
    if fast and isinstance(instr.op, tile_compute.Log):
        return lambda x: n.result(np.log(n.compute(x)))
    return lambda x: n.result(fn(to_f64(n.narrow(x))))


@rule(tile_compute.Sqrt, tile_compute.Trunc)
def _math(instr: Instr, fast: bool) -> Impl:
    """sqrt and trunc: correctly rounded in the compute dtype (f32 for narrow floats)."""
    fn = np.sqrt if isinstance(instr.op, tile_compute.Sqrt) else np.trunc
    n = _num_in(instr)
    return lambda x: n.result(fn(n.compute(x)))


@rule(tile_compute.Where)
def _where(instr: Instr, fast: bool) -> Impl:
    n = _num_out(instr)

    def impl(c: Any, x: Any, y: Any) -> Any:
        if n.can_be_wide and not fast and (x.dtype == F64 or y.dtype == F64):
            return np.where(c, to_f64(x), to_f64(y))
        return np.where(c, n.narrow(x), n.narrow(y))
    return impl


@rule(tile_compute.Cast)
def _cast(instr: Instr, fast: bool) -> Impl:
    op = instr.op
    assert isinstance(op, tile_compute.Cast)
    to = op.to
    src = _num_in(instr)
    if num(to).kind == "bool" and src.kind != "bool":
        return lambda x: np.asarray(x) != 0
    if num(to).sd == src.sd and storage_of(to) != storage_of(src.element):
        # one storage dtype, two formats (f32 into tf32): the values still round
        return lambda x: convert(np.asarray(src.narrow(x)), to)
    return lambda x: to_storage(x, to)


@rule(tile_compute.Full, tile_ir.Constant)
def _constant(instr: Instr, fast: bool) -> Impl:
    op = instr.op
    n = _num_out(instr)
    shape = op.shape if isinstance(op, tile_compute.Full) else ()
    value = to_storage(np.full(shape, op.value, dtype=np.float64 if n.kind == "float"
                               else n.sd), op.element)
    value = np.array(value, dtype=n.sd)
    value.setflags(write=False)
    return lambda: value


@rule(tile_memory.AllocRegister)
def _register(instr: Instr, fast: bool) -> Impl:
    op = instr.op
    assert isinstance(op, tile_memory.AllocRegister)
    value = poison(op.shape, num(op.element).sd)
    value.setflags(write=False)
    return lambda: value


@rule(tile_compute.Broadcast)
def _broadcast(instr: Instr, fast: bool) -> Impl:
    op = instr.op
    assert isinstance(op, tile_compute.Broadcast)
    src = instr.operands[0].type
    assert isinstance(src, TensorType)
    r_in = src.rank
    expand = [1] * len(op.shape)
    for size, d in zip(src.shape, op.dims):
        expand[d] = size
    ex, shape = tuple(expand), tuple(op.shape)

    def impl(x: Any) -> Any:
        x = np.asarray(x)
        lead = x.shape[:x.ndim - r_in]
        return np.broadcast_to(x.reshape(lead + ex), lead + shape)
    return impl


@rule(tile_compute.Reshape)
def _reshape(instr: Instr, fast: bool) -> Impl:
    op = instr.op
    assert isinstance(op, tile_compute.Reshape)
    src = instr.operands[0].type
    assert isinstance(src, TensorType)
    r_in, shape = src.rank, tuple(op.shape)
    return lambda x: np.reshape(x, np.shape(x)[:np.ndim(x) - r_in] + shape)


@rule(tile_compute.Transpose)
def _transpose(instr: Instr, fast: bool) -> Impl:
    return lambda x: np.swapaxes(x, -1, -2)


@rule(tile_compute.Reduce)
def _reduce(instr: Instr, fast: bool) -> Impl:
    op = instr.op
    assert isinstance(op, tile_compute.Reduce)
    src = instr.operands[0].type
    assert isinstance(src, TensorType)
    axis = op.axis % src.rank - src.rank  # from the end: works with program axes
    n = _num_in(instr)
    if len(instr.operands) == 2:  # a carried exact sum or mean (exact in both modes)
        to = _num_out(instr).element
        return lambda x, c: carried_reduce(n.narrow(x), c, axis, op.kind, op.count, to)
    if op.kind in ("max", "min"):
        kind = op.kind
        return lambda x: row_extreme(n.narrow(x), axis, kind)
    if op.to is not None or (op.kind == "mean" and not fast):  # (``to``: in fast mode too)
        return _exact_sum(n, axis, mean=op.kind == "mean", to=op.to)
    if op.kind == "mean":
        return lambda x: n.result(np.mean(n.compute(x), axis=axis))
    if fast or n.kind != "float":
        return lambda x: n.result(np.sum(n.compute(x), axis=axis))
    if op.exact:
        return _exact_sum(n, axis, mean=False)

    def exact_sum(x: Any) -> Any:
        # float64 accumulation in a fixed tree, rounded once to the element
        narrow = n.narrow(x)
        rows = np.moveaxis(narrow, axis, -1)
        if narrow.dtype != F32:
            return n.result(row_sum_f64(n.compute(rows)))
        if rows.shape[-1] < SHORT:
            # short rows: start from the shared float64 copy, which an mma of the same
            # tile reuses (and f64 pairs add faster than mixed ones)
            return n.result(row_sum_f64(rows, np.moveaxis(widened(narrow), axis, -1)))
        return n.result(row_sum_f64(rows))
    return exact_sum


def _exact_sum(n: Num, axis: int, mean: bool, to: Element | None = None) -> Impl:
    """The exact sum (or mean) along ``axis`` rounded once to the element (or ``to``):
    ``sum_rounded``, whose bits depend on the values alone; NaN is the default one."""
    def impl(x: Any) -> Any:
        narrow = n.narrow(x)
        count = narrow.shape[axis]
        if count == 0:
            empty = np.full(np.delete(narrow.shape, axis % narrow.ndim), np.nan if mean else 0.0)
            return n.result(empty) if to is None else convert(empty, to)
        out = sum_rounded(narrow, axis, False, to or n.element, divisor=count if mean else 1)
        nan = out != out
        return np.where(nan, out.dtype.type(np.nan), out) if nan.any() else out
    return impl


@rule(tile_compute.Mma)
def _mma(instr: Instr, fast: bool) -> Impl:
    op = instr.op
    assert isinstance(op, tile_compute.Mma)
    if op.exact and not fast:
        return _exact_mma(instr)
    return mma_rule(instr, fast)


def _exact_mma(instr: Instr) -> Impl:
    """An exact ``mma``: the exact products (and accumulator), an exact accumulator
    (:mod:`tessera.numerics.reductions.accumulator`) rounded once where it is used."""
    na, nb = _num_in(instr, 0), _num_in(instr, 1)
    if len(instr.operands) == 3:
        def accumulate(a: Any, b: Any, c: Any) -> Any:
            if type(c) is PendingMma:  # a deferred K loop accumulator: keep the operands
                return c.add(na.narrow(a), nb.narrow(b))
            return add_exact(to_exact(c), exact_products(na.narrow(a), nb.narrow(b)))
        return accumulate
    return lambda a, b: exact_products(na.narrow(a), nb.narrow(b))


def mma_rule(instr: Instr, fast: bool, columns: bool = False) -> Impl:
    """The ``tile.mma`` rule; ``columns`` picks the column layout for an accumulator-free
    product whose rows are reduced (see ``tile.mma.folded_matmul``)."""
    op = instr.op
    assert isinstance(op, tile_compute.Mma)
    acc = num(op.accum)
    na, nb = _num_in(instr, 0), _num_in(instr, 1)
    widen = (Widen(), Widen())
    if len(instr.operands) == 3:
        def accumulate(a: Any, b: Any, c: Any) -> Any:
            if type(c) is PendingMma:  # a deferred K loop accumulator: keep the operands
                return c.add(na.narrow(a), nb.narrow(b))
            return mma(na.narrow(a), nb.narrow(b), c, acc, fast, widen)
        return accumulate
    return lambda a, b: mma(na.narrow(a), nb.narrow(b), None, acc, fast, widen, columns)


@rule(tile_compute.CausalMask)
def _causal(instr: Instr, fast: bool) -> Impl:
    t = instr.operands[0].type
    assert isinstance(t, TensorType)
    m, n_ = t.shape
    rows = np.arange(m, dtype=np.int64)[:, None]
    cols = np.arange(n_, dtype=np.int64)[None, :]
    n = num(t.element)

    def impl(s: Any, q0: Any, k0: Any) -> Any:
        q = np.asarray(q0)[..., None, None] + rows
        k = np.asarray(k0)[..., None, None] + cols
        if not (n.can_be_wide and not fast and s.dtype == F64):
            s = n.narrow(s)
        return np.where(q >= k, s, np.array(-np.inf, dtype=s.dtype))
    return impl


@rule(tile_ir.LaneId)
def _lanes(instr: Instr, fast: bool) -> Impl:
    op = instr.op
    assert isinstance(op, tile_ir.LaneId)
    value = np.arange(op.lanes, dtype=np.int64)
    value.setflags(write=False)
    return lambda: value


@rule(tile_ir.Arange)
def _arange(instr: Instr, fast: bool) -> Impl:
    op = instr.op
    assert isinstance(op, tile_ir.Arange)
    value = np.arange(op.n, dtype=np.int64)
    value.setflags(write=False)
    return lambda: value


__all__ = ["BINARY_UFUNCS", "IMPLS", "WIDE_OK", "Impl", "mma_rule", "rule"]
