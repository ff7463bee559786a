"""Graph IR contractions and reductions along axes: ``graph.matmul``, the DFTs, sums,
means, extrema, ``graph.softmax`` and ``graph.mse``.

``graph.matmul`` returns the accumulator format when an operand's policy declares one,
otherwise the promoted storage format; reductions keep the element of their input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, register_op
from tessera.ir.dialects.graph import arity, join, norm_axis
from tessera.ir.types import Element, TensorType
from tessera.numerics import Policy, PolicyClass, promote, storage_of


@register_op
@dataclass(frozen=True)
class MatMul(Op):
    """``a @ b`` over the last two axes; leading batch dims must match.

    The product is accumulated exactly and rounded once to the accumulator format
    (then to the result format when narrower). ``tile_shape`` is a schedule hint.
    """

    name: ClassVar[str] = "graph.matmul"
    tile_shape: tuple[int, ...] | None = None

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        a, b = arity(self, operands, 2)
        if a.rank < 2 or b.rank < 2:
            raise IRVerifyError(f"graph.matmul needs rank >= 2 operands, got {a.shape} and "
                                f"{b.shape}")
        if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
            raise IRVerifyError(f"graph.matmul shapes {a.shape} and {b.shape} do not contract",
                                hint="the last dim of A must equal the second-to-last of B")
        return (TensorType(a.shape[:-1] + b.shape[-1:], matmul_element(a.element, b.element)),)


def matmul_element(a: Element, b: Element) -> Element:
    """The result element of a matmul: a declared accumulator, else promoted storage."""
    for e in (a, b):
        if isinstance(e, (Policy, PolicyClass)) and e.accum is not None:
            return e.accum
    return promote(storage_of(a), storage_of(b))


@dataclass(frozen=True)
class Reduce(Op):
    """A reduction over ``axes`` (empty tuple: all axes)."""

    axes: tuple[int, ...] = ()
    keepdims: bool = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        axes = {norm_axis(self, a, x.rank) for a in self.axes} if self.axes else \
            set(range(x.rank))
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)
                      if self.keepdims or i not in axes)
        return (x.with_shape(shape),)

    def reduced_axes(self, rank: int) -> tuple[int, ...]:
        return tuple(sorted({a % rank for a in self.axes})) if self.axes else tuple(range(rank))


def _reduce(opname: str, doc: str) -> type[Reduce]:
    cls = dataclass(frozen=True)(type(opname.split(".")[1].title(), (Reduce,),
                                      {"name": opname, "__doc__": doc, "__module__": __name__}))
    return register_op(cls)  # type: ignore[return-value]


Sum = _reduce("graph.sum", "Sum over axes: exact, rounded once.")
Mean = _reduce("graph.mean", "Mean over axes: exact sum divided exactly, rounded once.")
Max = _reduce("graph.max", "Maximum over axes.")
Min = _reduce("graph.min", "Minimum over axes.")


@register_op
@dataclass(frozen=True)
class Softmax(Op):
    """Softmax along ``axis`` (computed in float64 with the max subtracted)."""

    name: ClassVar[str] = "graph.softmax"
    axis: int = -1

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        norm_axis(self, self.axis, x.rank)
        return (x,)


@register_op
@dataclass(frozen=True)
class Mse(Op):
    """Mean squared error ``mean((a - b)**2)`` over all elements: a scalar."""

    name: ClassVar[str] = "graph.mse"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        a, b = arity(self, operands, 2)
        if a.shape != b.shape:
            raise IRVerifyError(f"graph.mse operands have shapes {a.shape} and {b.shape}")
        return (TensorType((), join(self, a.element, b.element)),)


@dataclass(frozen=True)
class Spectral(Op):
    """A discrete Fourier transform along ``axis`` of a complex tensor."""

    axis: int = -1

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        if storage_of(x.element).kind != "complex":
            raise IRVerifyError(f"{self.name} needs a complex operand, not {x.element}",
                                hint="cast to c64 or c128 first (the tracer does)")
        norm_axis(self, self.axis, x.rank)
        return (x,)


@register_op
@dataclass(frozen=True)
class Fft(Spectral):
    """Forward DFT (unnormalised, NumPy's convention)."""

    name: ClassVar[str] = "graph.fft"


@register_op
@dataclass(frozen=True)
class Ifft(Spectral):
    """Inverse DFT (scaled by 1/n, NumPy's convention)."""

    name: ClassVar[str] = "graph.ifft"
