"""The row max of an f64 tile of any row length, through shared-memory atomics.

A softmax kernel's row max (``tile.reduce max`` over the last axis of f64 values) is
joined by a butterfly where the row is a power-of-two number of chunks
(:mod:`tessera.lower.rules.reduce`); any other row length takes this path, which, like
the exact sums, does not depend on how rows fall on threads:

1. the ``rows`` u64 slots in shared memory are zeroed; barrier;
2. every thread maps each element it holds to an order-preserving key and
   ``red.shared.max.u64``s it into its row's slot: a non-negative value's bits with bit
   63 set, a negative value's bits inverted, and a NaN all ones (the largest key, so a
   NaN anywhere gives NaN, as ``np.max``); every key is above 0; barrier;
3. every thread reads the keys of the rows it holds and maps them back (all ones is a
   NaN). The max is exact; -0 ranks below +0.
"""

from __future__ import annotations

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.ops import Reduce
from tessera.ir.types import TensorType
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.exact.longacc import zero_shared
from tessera.lower.exact.reduce import for_each_element, row_results
from tessera.lower.values import Dist, Lowered

_TOP = 1 << 63
_ONES = (1 << 64) - 1


def _key(e: TargetEmitter, x: Value) -> Value:
    u64 = "u64"
    b = e.pack([x], u64)
    neg = e.setp("ne", e.bin("and", b, e.const(_TOP, u64), u64), e.const(0, u64), u64)
    key = e.selp(e.bin("xor", b, e.const(_ONES, u64), u64),
                 e.bin("or", b, e.const(_TOP, u64), u64), neg, u64)
    return e.selp(e.const(_ONES, u64), key, e.setp("nan", x, x, "f64"), u64)


def _value(e: TargetEmitter, key: Value) -> Value:
    u64 = "u64"
    pos = e.setp("ne", e.bin("and", key, e.const(_TOP, u64), u64), e.const(0, u64), u64)
    b = e.selp(e.bin("xor", key, e.const(_TOP, u64), u64),
               e.bin("xor", key, e.const(_ONES, u64), u64), pos, u64)
    return e.pack([b], "f64")


def row_max_f64(low: Lowerer, instr: Instr, x: Dist) -> list[Lowered]:
    """Steps 1-3 above for the blocked f64 ``x``: the row maxima in the layout of
    ``instr``'s result."""
    st = instr.operands[0].type
    assert isinstance(st, TensorType)
    cols = st.shape[-1]
    rows = 1
    for d in st.shape[:-1]:
        rows *= d
    e = low.em
    base = low.shared_buffer("xmax", rows * 8, 8)
    zero_shared(e, base, rows)
    e.bar()

    def deposit(inner: TargetEmitter, row: Value, v: Value) -> None:
        slot = inner.add(base, inner.cvt(inner.mul(row, inner.const(8, "s32"), "s32"),
                                         "u32", "s32"), "u32")
        inner.op(Reduce("shared", "max", "u64"), [slot, _key(inner, v)])

    for_each_element(low, x, cols, deposit)
    e.bar()

    def read(inner: TargetEmitter, row: Value) -> Value:
        slot = inner.add(base, inner.cvt(inner.mul(row, inner.const(8, "s32"), "s32"),
                                         "u32", "s32"), "u32")
        return _value(inner, inner.ld("shared", slot, "u64"))

    out = row_results(low, instr, rows, read, "f64")
    e.bar()  # the slots may be zeroed again by a later row max
    return out


__all__ = ["row_max_f64"]
