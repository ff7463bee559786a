"""Tile IR compute ops: elementwise arithmetic, reductions, ``mma`` and tile reshaping.

Shapes are explicit, as in Graph IR: elementwise ops take operands of one shape and
one storage format (the front end inserts ``tile.broadcast`` and ``tile.cast``), so
the simulator never guesses a broadcast. A scalar is a rank-0 tile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.tile import BOOL, scalar_of, tensor_of
from tessera.ir.types import Element, TensorType
from tessera.numerics import DType, accum_of, storage_of


def _same(op: Op, operands: Sequence[Type], n: int) -> list[TensorType]:
    check_count(op, operands, n)
    ts = [tensor_of(op, t) for t in operands]
    if any(t.shape != ts[0].shape for t in ts):
        raise IRVerifyError(f"{op.name} operands have shapes "
                            f"{', '.join(str(t.shape) for t in ts)}",
                            hint="broadcast explicitly with tile.broadcast")
    if any(storage_of(t.element) != storage_of(ts[0].element) for t in ts):
        raise IRVerifyError(f"{op.name} mixes {', '.join(str(t.element) for t in ts)}",
                            hint="cast one operand with tile.cast")
    return ts


def _pick(a: Element, b: Element) -> Element:
    # A policy on either operand is kept (as Graph IR does).
    return a if not isinstance(a, DType) else b


# ------------------------------------------------------------------------ elementwise
@dataclass(frozen=True)
class Binary(Op):
    """An elementwise op of two operands of one shape and storage format."""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        a, b = _same(self, operands, 2)
        return (a.with_element(self.result(_pick(a.element, b.element))),)

    def result(self, e: Element) -> Element:
        return e


@dataclass(frozen=True)
class Compare(Binary):
    """An elementwise comparison; the result is bool."""

    def result(self, e: Element) -> Element:
        return BOOL


@dataclass(frozen=True)
class Logical(Binary):
    """An elementwise op on bool operands."""

    def result(self, e: Element) -> Element:
        if storage_of(e) != BOOL:
            raise IRVerifyError(f"{self.name} needs bool operands, not {e}")
        return BOOL


@dataclass(frozen=True)
class Unary(Op):
    """An elementwise op of one operand, result of the operand's type."""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = _same(self, operands, 1)
        return (x,)


def _make(base: type[Op], opname: str, doc: str) -> type[Op]:
    cls_name = "".join(p.title() for p in opname.split(".")[1].split("_"))
    cls = dataclass(frozen=True)(type(cls_name, (base,), {
        "name": opname, "__doc__": doc, "__module__": __name__}))
    return register_op(cls)


Add = _make(Binary, "tile.add", "a + b")
Sub = _make(Binary, "tile.sub", "a - b")
Mul = _make(Binary, "tile.mul", "a * b")
Div = _make(Binary, "tile.div", "a / b (true division; float operands)")
FloorDiv = _make(Binary, "tile.floordiv", "a // b (Python's floor division)")
Mod = _make(Binary, "tile.mod", "a % b (Python's modulo: the sign of b)")
Pow = _make(Binary, "tile.pow", "a ** b")
Maximum = _make(Binary, "tile.maximum", "elementwise maximum (NaN propagates)")
Minimum = _make(Binary, "tile.minimum", "elementwise minimum (NaN propagates)")
Lt = _make(Compare, "tile.lt", "a < b")
Le = _make(Compare, "tile.le", "a <= b")
Gt = _make(Compare, "tile.gt", "a > b")
Ge = _make(Compare, "tile.ge", "a >= b")
Eq = _make(Compare, "tile.eq", "a == b")
Ne = _make(Compare, "tile.ne", "a != b")
And = _make(Logical, "tile.and", "a and b (both sides are evaluated)")
Or = _make(Logical, "tile.or", "a or b (both sides are evaluated)")
Neg = _make(Unary, "tile.neg", "-x")
Not = _make(Unary, "tile.not", "not x (bool)")
Exp = _make(Unary, "tile.exp", "e ** x")
Log = _make(Unary, "tile.log", "natural logarithm (the specified binary64 log of "
            "numerics.transcendental.log64, rounded once)")
Tanh = _make(Unary, "tile.tanh", "hyperbolic tangent (the specified binary64 tanh of "
             "numerics.transcendental.tanh64, rounded once)")
Erf = _make(Unary, "tile.erf", "the error function (the specified binary64 erf of "
            "numerics.transcendental.erf64, rounded once)")
Erfc = _make(Unary, "tile.erfc", "the complementary error function 1 - erf (the specified "
             "binary64 erfc of numerics.transcendental.erf64, rounded once)")
Sqrt = _make(Unary, "tile.sqrt", "square root")
Abs = _make(Unary, "tile.abs", "absolute value")
Trunc = _make(Unary, "tile.trunc", "round toward zero (Python's int())")


@register_op
@dataclass(frozen=True)
class Where(Op):
    """``cond ? a : b`` elementwise; ``cond`` is bool of the same shape."""

    name: ClassVar[str] = "tile.where"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        c = tensor_of(self, operands[0])
        a, b = _same(self, operands[1:], 2)
        if storage_of(c.element) != BOOL or c.shape != a.shape:
            raise IRVerifyError(f"tile.where needs a bool condition of shape {a.shape}, "
                                f"got {c}")
        return (a.with_element(_pick(a.element, b.element)),)


@register_op
@dataclass(frozen=True)
class Cast(Op):
    """Convert to another element format (round to nearest even, satfinite)."""

    name: ClassVar[str] = "tile.cast"
    to: Element

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        return (tensor_of(self, operands[0]).with_element(self.to),)


@register_op
@dataclass(frozen=True)
class Full(Op):
    """A tile of ``shape`` filled with ``value`` (``zeros`` is ``value = 0``)."""

    name: ClassVar[str] = "tile.full"
    shape: tuple[int, ...]
    value: float | int | bool
    element: Element

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return (TensorType(self.shape, self.element),)


# ------------------------------------------------------------------------------ shapes
@register_op
@dataclass(frozen=True)
class Broadcast(Op):
    """Broadcast to ``shape``: operand axis ``i`` becomes result axis ``dims[i]`` (it
    must have size 1 or the result's size); other result axes are new."""

    name: ClassVar[str] = "tile.broadcast"
    shape: tuple[int, ...]
    dims: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        x = tensor_of(self, operands[0])
        if len(self.dims) != x.rank or list(self.dims) != sorted(set(self.dims)) or \
                any(not 0 <= d < len(self.shape) for d in self.dims):
            raise IRVerifyError(f"tile.broadcast dims {self.dims} do not map the axes of "
                                f"{x.shape} into {self.shape}")
        for size, d in zip(x.shape, self.dims):
            if size not in (1, self.shape[d]):
                raise IRVerifyError(f"tile.broadcast cannot stretch an axis of {size} to "
                                    f"{self.shape[d]}")
        return (x.with_shape(self.shape),)


@register_op
@dataclass(frozen=True)
class Reshape(Op):
    """Reshape (row-major; ``x[:, None]`` inserts an axis of 1)."""

    name: ClassVar[str] = "tile.reshape"
    shape: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        x = tensor_of(self, operands[0])
        new = x.with_shape(self.shape)
        if new.size != x.size:
            raise IRVerifyError(f"tile.reshape cannot turn {x.shape} into {self.shape}")
        return (new,)


@register_op
@dataclass(frozen=True)
class Transpose(Op):
    """Swap the last two axes of a tile (``x.T`` of a 2-D tile)."""

    name: ClassVar[str] = "tile.transpose"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        x = tensor_of(self, operands[0])
        if x.rank < 2:
            raise IRVerifyError(f"tile.transpose needs rank >= 2, got {x}")
        return (x.with_shape((*x.shape[:-2], x.shape[-1], x.shape[-2])),)


# -------------------------------------------------------------------------- reductions
@register_op
@dataclass(frozen=True)
class Reduce(Op):
    """Reduce ``axis`` away with ``kind`` (sum, max, min; mean when ``exact``).
    ``row_sum`` / ``row_max`` reduce the last axis. Sums are float64 pairwise over the
    axis, rounded once; with ``exact`` a sum is the exact real sum (a mean: that sum
    divided by the axis length) rounded once, to nearest even, to the element, whatever
    the order of the terms (NaN is the default quiet NaN). ``to`` (exact sums and means
    only) rounds that once to another float element instead of the operand's: a sum of
    float64 terms rounded once to f32 is not the f64 sum rounded again.

    **Carried sums.** An exact sum or mean may take a second operand ``c``, an exact
    accumulator of the result's type, and continue it: a row too long for one program
    is summed block by block in a ``tile.for`` whose carried value starts from zeros
    (``tile.full`` 0). A *sum* then returns the exact accumulator ``c + sum(x)``, held
    without rounding through further carried sums and loop-carried values, and rounded
    once, to nearest even, where any other op uses it (as an exact ``mma``'s result).
    A *mean* ends the chain: it returns ``(c + sum(x)) / count`` rounded once, where
    ``count`` (required) is the number of terms of the whole chain. The terms must be
    float values of at most 32 bits, or float64 values that are whole multiples of
    ``2**-298`` (products of two such values): the accumulator counts that quantum."""

    name: ClassVar[str] = "tile.reduce"
    kind: str
    axis: int = -1
    exact: bool = False
    to: Element | None = None
    count: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if len(operands) not in (1, 2):
            raise IRVerifyError("tile.reduce takes a tile and, for a carried exact sum, "
                                "its accumulator")
        x = tensor_of(self, operands[0])
        kinds = ("sum", "max", "min", "mean") if self.exact else ("sum", "max", "min")
        if self.kind not in kinds:
            raise IRVerifyError(f"tile.reduce kind must be {', '.join(kinds)}, not "
                                f"{self.kind!r}", hint="a mean is an exact reduction: "
                                "exact = true" if self.kind == "mean" else None)
        if self.exact and self.kind in ("sum", "mean") and \
                storage_of(x.element).kind != "float":
            raise IRVerifyError(f"an exact tile.reduce {self.kind} needs float values, "
                                f"not {x.element}", hint="integer sums are exact already")
        if not -x.rank <= self.axis < x.rank:
            raise IRVerifyError(f"tile.reduce axis {self.axis} is out of range for {x}")
        axis = self.axis % x.rank
        out = x.with_shape(x.shape[:axis] + x.shape[axis + 1:])
        if self.to is not None:
            if not self.exact or self.kind not in ("sum", "mean") or \
                    storage_of(self.to).kind != "float":
                raise IRVerifyError(f"tile.reduce to {self.to}: only an exact sum or mean "
                                    "rounds to another element, and only to a float one")
            out = out.with_element(self.to)
        carried = len(operands) == 2
        if (self.count != 0) != (carried and self.kind == "mean") or self.count < 0:
            raise IRVerifyError("tile.reduce count is the length of a carried mean and "
                                "only that", hint="a mean that continues an accumulator "
                                "needs count = the number of terms of the whole chain")
        if carried:
            if not self.exact or self.kind not in ("sum", "mean"):
                raise IRVerifyError("only an exact sum or mean continues an accumulator")
            c = tensor_of(self, operands[1])
            if c.shape != out.shape or storage_of(c.element) != storage_of(out.element):
                raise IRVerifyError(f"tile.reduce accumulator {c} should be {out}")
        return (out,)


@register_op
@dataclass(frozen=True)
class Mma(Op):
    """``a @ b`` (+ ``c`` when a third operand is given), accumulated in ``accum``.

    In exact mode the inputs are widened exactly, the products accumulate in float64
    and the result is rounded once, when it is stored or cast; fast mode uses float32
    BLAS (labelled non-bitwise). With ``exact`` the result is an *exact accumulator*:
    the exact real value of ``c + a @ b``, held without rounding through further exact
    ``mma`` accumulation and loop-carried or branch-merged values, and rounded once,
    to nearest even, to ``accum`` when anything else uses it (a cast, a store).
    """

    name: ClassVar[str] = "tile.mma"
    accum: Element
    exact: bool = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if len(operands) not in (2, 3):
            raise IRVerifyError("tile.mma takes a, b and optionally the accumulator c")
        a, b = (tensor_of(self, t) for t in operands[:2])
        if a.rank != 2 or b.rank != 2 or a.shape[1] != b.shape[0]:
            raise IRVerifyError(f"tile.mma shapes {a.shape} and {b.shape} do not contract",
                                hint="a is (M, K) and b is (K, N)")
        if storage_of(self.accum).kind != "float" and storage_of(a.element).kind == "float":
            raise IRVerifyError(f"tile.mma accumulates float inputs in {self.accum}")
        if self.exact:
            for e in (a.element, b.element, self.accum):
                fmt = storage_of(e)
                if fmt.kind != "float" or fmt.bits > 32:
                    raise IRVerifyError(f"an exact tile.mma takes float formats of at most "
                                        f"32 bits (operands and accumulator), not {fmt}")
        out = TensorType((a.shape[0], b.shape[1]), self.accum)
        if len(operands) == 3:
            c = tensor_of(self, operands[2])
            if c.shape != out.shape or storage_of(c.element) != storage_of(self.accum):
                raise IRVerifyError(f"tile.mma accumulator {c} should be {out}")
        return (out,)


def default_accum(a: Element) -> Element:
    """The accumulator of ``mma`` when none is given: the policy's, else the default."""
    return accum_of(a)


@register_op
@dataclass(frozen=True)
class CausalMask(Op):
    """``where(q0 + i >= k0 + j, scores[i, j], -inf)`` for a 2-D score tile."""

    name: ClassVar[str] = "tile.causal_mask"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        s = tensor_of(self, operands[0])
        if s.rank != 2 or storage_of(s.element).kind != "float":
            raise IRVerifyError(f"tile.causal_mask needs a 2-D float tile, got {s}")
        scalar_of(self, operands[1], "int")
        scalar_of(self, operands[2], "int")
        return (s,)


__all__ = ["Abs", "Add", "And", "Binary", "Broadcast", "Cast", "CausalMask", "Compare",
           "Div", "Eq", "Erf", "Erfc", "Exp", "FloorDiv", "Full", "Ge", "Gt", "Le", "Log",
           "Logical", "Lt", "Maximum", "Minimum", "Mma", "Mod", "Mul", "Ne", "Neg", "Not", "Or",
           "Pow", "Reduce", "Reshape", "Sqrt", "Sub", "Tanh", "Transpose", "Trunc", "Unary",
           "Where", "default_accum"]
