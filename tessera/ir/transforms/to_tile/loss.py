"""The mean squared error of a generated kernel, with the graph interpreter's bits.

The graph defines ``graph.mse`` as the exact ``sum((a - b)**2) / n`` rounded once
(:func:`tessera.interp.graph.reduce.mse`): ``a - b`` becomes an exact float64 pair by
TwoSum, Veltkamp's split cuts each half into two pieces of at most 26 bits, and the ten
pairwise products of the four pieces are exact float64 terms whose exact sum is the
sum of squares. The kernel performs the same IEEE float64 operations on f64 tiles, with
one change that cannot alter the value: the operands are first multiplied by 4 (exact:
a power of two, and 4 * 2**128 is far inside float64), so every piece is 4 times the
graph's and every term 16 times.

The exact ``tile.reduce`` that makes a mean divides by the number of terms it reduces.
The ten terms of each element go into a tile of 16 columns (the other six are zeros),
whose mean over all ``16 n`` terms is then ``16 * sum / (16 n)``: exactly the graph's
quotient, rounded once to the result element (``tile.reduce``'s ``to``: the mean is
not rounded to float64 first). Non-finite operands give the same terms
as in the graph (scaling keeps every infinity and NaN), so the same non-finite class.

The columns are chosen by masks that ``tile.causal_mask`` draws on a ``1 x 16`` tile
(column ``j`` is kept where ``k >= j``), so the kernel needs no constant tensor.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tessera.ir.core import Instr, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.transforms.to_tile import blocked
from tessera.ir.transforms.to_tile import ops as rules
from tessera.ir.types import TensorType
from tessera.numerics import DType, dtype, storage_of
from tessera.numerics.reductions.exact import VELTKAMP_SPLITTER

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter

F64 = dtype("f64")
I32 = dtype("int32")
#: columns of the term tile: the ten products, padded to a power of two
COLUMNS = 16


def _type(v: Value) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


class _Terms:
    """Emits the f64 tile ops of the graph's square terms, on ``(n,)`` tiles."""

    def __init__(self, em: Emitter, instr: Instr, n: int) -> None:
        self.em, self.instr = em, instr
        self.vec = TensorType((n,), F64)

    def op(self, op: object, *args: Value) -> Value:
        return self.em.create(op, list(args), self.instr)[0]  # type: ignore[arg-type]

    def const(self, value: float) -> Value:
        return self.em.full(self.vec, value)

    def split(self, x: Value) -> tuple[Value, Value]:
        """Dekker/Veltkamp: ``x == hi + lo`` with at most 26 significant bits each."""
        c = self.op(tc.Mul(), self.const(VELTKAMP_SPLITTER), x)
        hi = self.op(tc.Sub(), c, self.op(tc.Sub(), c, x))
        return hi, self.op(tc.Sub(), x, hi)

    def terms(self, a: Value, b: Value) -> list[Value]:
        """The ten products whose exact sum is ``sum((a - b)**2)`` (the graph's order)."""
        s = self.op(tc.Sub(), a, b)
        bb = self.op(tc.Sub(), s, a)
        e = self.op(tc.Add(), self.op(tc.Sub(), a, self.op(tc.Sub(), s, bb)),
                    self.op(tc.Sub(), self.op(tc.Neg(), b), bb))  # TwoSum of a and -b
        # isfinite(s): s - s is 0 exactly for finite s, NaN for an infinity or NaN
        finite = self.op(tc.Eq(), self.op(tc.Sub(), s, s), self.const(0.0))
        e = self.op(tc.Where(), finite, e, self.const(0.0))
        pieces = [*self.split(s), *self.split(e)]
        out = [self.op(tc.Mul(), p, p) for p in pieces]
        two = self.const(2.0)
        out += [self.op(tc.Mul(), self.op(tc.Mul(), two, pieces[i]), pieces[j])
                for i in range(4) for j in range(i + 1, 4)]
        return out


def _columns(em: Emitter, instr: Instr, n: int) -> list[Value]:
    """Boolean ``(n, COLUMNS)`` tiles, the ``k``-th true exactly in column ``k``."""
    row = TensorType((1, COLUMNS), F64)
    grid = TensorType((n, COLUMNS), F64)
    zero = em.full(row, 0.0)
    kept = []  # kept[k]: columns j <= k
    for k in range(COLUMNS):
        q0, k0 = em.full(TensorType((), I32), k), em.full(TensorType((), I32), 0)
        (m,) = em.create(tc.CausalMask(), [zero, q0, k0], instr)
        (wide,) = em.create(tc.Broadcast((n, COLUMNS), (0, 1)), [m], instr)
        (ok,) = em.create(tc.Eq(), [wide, em.full(grid, 0.0)], instr)
        kept.append(ok)
    out = [kept[0]]
    for k in range(1, COLUMNS):
        (later,) = em.create(tc.Not(), [kept[k - 1]], instr)
        out.append(em.create(tc.And(), [kept[k], later], instr)[0])
    return out


@rules.rule(graph_ops.Mse)
def _mse(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    a, b = args
    fmt = storage_of(_type(a).element)
    out_t = _type(instr.results[0])
    if fmt.kind != "float" or fmt.bits > 32 or not isinstance(out_t.element, DType) or \
            out_t.element.kind != "float":
        raise rules.refuse(instr, f"a mean squared error of {fmt} values",
                           hint="float formats of at most 32 bits have a tile-level mse; "
                                "run others with backend='interp'")
    n = math.prod(_type(a).shape)
    if n == 0:
        raise rules.refuse(instr, "a mean squared error of no elements")
    t = _Terms(em, instr, n)
    flat = []
    for v, x in zip(instr.operands, (a, b)):
        x = blocked.zero_outside(em, v, x, instr)  # (0 - 0: no terms past an edge)
        (v,) = em.create(tc.Reshape((n,)), [x], instr)
        (w,) = em.create(tc.Cast(F64), [v], instr)
        flat.append(t.op(tc.Mul(), t.const(4.0), w))  # exact: see the module docstring
    grid = TensorType((n, COLUMNS), F64)
    table = em.full(grid, 0.0)
    for column, term in zip(_columns(em, instr, n), t.terms(*flat)):
        (wide,) = em.create(tc.Broadcast((n, COLUMNS), (0,)), [term], instr)
        (table,) = em.create(tc.Where(), [column, wide, table], instr)
    (rows,) = em.create(tc.Reshape((n * COLUMNS,)), [table], instr)
    acc = blocked.exact_reduce(em, instr, rows, 0, to=out_t.element)
    if acc is not None:  # a block of a carried mean: finished after the loop
        return acc
    (mean,) = em.create(tc.Reduce("mean", 0, exact=True, to=out_t.element), [rows], instr)
    return rules.settle(em, instr, mean)


__all__ = ["COLUMNS"]
