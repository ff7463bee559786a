"""Graph IR elementwise ops: unary and binary arithmetic, comparisons, ``graph.where``
and ``graph.cast``.

Operands have one shape (the tracer inserts ``graph.broadcast``) and one storage
format; a policy on either operand is kept in the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, register_op
from tessera.ir.dialects.graph import BOOL, arity, join, real_of
from tessera.ir.types import Element
from tessera.numerics import storage_of


@dataclass(frozen=True)
class Unary(Op):
    """An elementwise op of one operand with the operand's type."""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        return (x,)


def _unary(opname: str, doc: str) -> type[Unary]:
    cls = dataclass(frozen=True)(type(opname.split(".")[1].title().replace("_", ""), (Unary,),
                                      {"name": opname, "__doc__": doc, "__module__": __name__}))
    return register_op(cls)  # type: ignore[return-value]


Neg = _unary("graph.neg", "Elementwise negation.")
Exp = _unary("graph.exp", "Elementwise e**x.")
Log = _unary("graph.log", "Elementwise natural logarithm.")
Tanh = _unary("graph.tanh", "Elementwise hyperbolic tangent.")
Sqrt = _unary("graph.sqrt", "Elementwise square root.")
Relu = _unary("graph.relu", "Elementwise max(x, 0).")
Sign = _unary("graph.sign", "Elementwise sign (-1, 0, 1).")
Sin = _unary("graph.sin", "Elementwise sine.")
Erf = _unary("graph.erf", "Elementwise error function.")
Cos = _unary("graph.cos", "Elementwise cosine.")
Round = _unary("graph.round", "Elementwise round half to even.")
Conj = _unary("graph.conj", "Elementwise complex conjugate (identity on reals).")


@register_op
@dataclass(frozen=True)
class Gelu(Unary):
    """GELU: the tanh approximation (``approximate=True``) or the exact erf form."""

    name: ClassVar[str] = "graph.gelu"
    approximate: bool = True


@dataclass(frozen=True)
class ToReal(Op):
    """An elementwise op from complex (or real) to the matching real format."""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        return (x.with_element(real_of(x.element) if storage_of(x.element).kind == "complex"
                               else x.element),)


@register_op
@dataclass(frozen=True)
class Abs(ToReal):
    """Elementwise absolute value (modulus for complex input)."""

    name: ClassVar[str] = "graph.abs"


@register_op
@dataclass(frozen=True)
class Real(ToReal):
    """Real part."""

    name: ClassVar[str] = "graph.real"


@register_op
@dataclass(frozen=True)
class Imag(ToReal):
    """Imaginary part."""

    name: ClassVar[str] = "graph.imag"


@dataclass(frozen=True)
class Binary(Op):
    """An elementwise op of two operands of one shape and storage format."""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        a, b = arity(self, operands, 2)
        if a.shape != b.shape:
            raise IRVerifyError(f"{self.name} operands have shapes {a.shape} and {b.shape}",
                                hint="broadcast explicitly with graph.broadcast")
        return (a.with_element(self.result_element(join(self, a.element, b.element))),)

    def result_element(self, e: Element) -> Element:
        return e


def _binary(opname: str, doc: str, base: type[Binary] = Binary) -> type[Binary]:
    cls = dataclass(frozen=True)(type(opname.split(".")[1].title(), (base,),
                                      {"name": opname, "__doc__": doc, "__module__": __name__}))
    return register_op(cls)  # type: ignore[return-value]


Add = _binary("graph.add", "Elementwise sum.")
Sub = _binary("graph.sub", "Elementwise difference.")
Mul = _binary("graph.mul", "Elementwise product.")
Div = _binary("graph.div", "Elementwise quotient.")
Pow = _binary("graph.pow", "Elementwise power.")
Maximum = _binary("graph.maximum", "Elementwise maximum (NaN propagates).")
Minimum = _binary("graph.minimum", "Elementwise minimum (NaN propagates).")


@dataclass(frozen=True)
class Compare(Binary):
    """An elementwise comparison with a boolean result."""

    def result_element(self, e: Element) -> Element:
        return BOOL


Gt = _binary("graph.gt", "a > b", Compare)
Ge = _binary("graph.ge", "a >= b", Compare)
Lt = _binary("graph.lt", "a < b", Compare)
Le = _binary("graph.le", "a <= b", Compare)
Eq = _binary("graph.eq", "a == b", Compare)
Ne = _binary("graph.ne", "a != b", Compare)


@register_op
@dataclass(frozen=True)
class Where(Op):
    """``cond ? a : b`` elementwise; ``cond`` is boolean of the same shape."""

    name: ClassVar[str] = "graph.where"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        c, a, b = arity(self, operands, 3)
        if storage_of(c.element) != BOOL:
            raise IRVerifyError(f"graph.where condition must be bool, not {c.element}")
        if not c.shape == a.shape == b.shape:
            raise IRVerifyError(f"graph.where shapes differ: {c.shape}, {a.shape}, {b.shape}")
        return (a.with_element(join(self, a.element, b.element)),)


@register_op
@dataclass(frozen=True)
class Cast(Op):
    """Convert to another format or policy (round to nearest even, satfinite)."""

    name: ClassVar[str] = "graph.cast"
    to: Element

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        return (x.with_element(self.to),)
