"""Graph IR: the operator level.

Every op is a frozen dataclass whose fields are its attributes. Operand shapes are
explicit: elementwise ops take operands of one shape (the tracer inserts
``graph.broadcast``), so the interpreter and autodiff never guess a broadcast.

Element rules (documented in docs/numerics.md):
* elementwise ops need one storage format; a policy on either operand is kept;
* ``graph.matmul`` returns the accumulator format when an operand's policy declares one
  (fp8 @accum(f32) inputs give an f32 result), otherwise the promoted storage format;
* reductions keep the element of their input.

This module holds the typing helpers the ops share and re-exports every op, so each is
``graph.X``. The ops live in one module per family: :mod:`.structure` (constants,
terminators, ``graph.custom``), :mod:`.elementwise`, :mod:`.contraction` (matmul, DFTs,
reductions), :mod:`.shapes`, :mod:`.collective` and :mod:`.kernel` (``graph.kernel_call``,
a tile kernel launched from a graph function).
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count
from tessera.ir.types import Element, TensorType
from tessera.numerics import DType, dtype, storage_of

BOOL = dtype("bool")


def tensor(t: Type, op: Op) -> TensorType:
    """``t`` as a tensor type, or an IRVerifyError naming the op."""
    if not isinstance(t, TensorType):
        raise IRVerifyError(f"{op.name} expects tensor operands, got {t}")
    return t


def arity(op: Op, operands: Sequence[Type], n: int) -> list[TensorType]:
    """Exactly ``n`` operands, all tensors."""
    check_count(op, operands, n)
    return [tensor(t, op) for t in operands]


def join(op: Op, a: Element, b: Element) -> Element:
    """The element of an elementwise result: one storage format, policies kept."""
    if storage_of(a) != storage_of(b):
        raise IRVerifyError(f"{op.name} mixes {storage_of(a)} and {storage_of(b)}",
                            hint="cast one operand (the tracer promotes automatically)")
    return a if not isinstance(a, DType) else b


def real_of(e: Element) -> DType:
    """The real format matching a complex one (c64 -> f32, c128 -> f64)."""
    s = storage_of(e)
    return dtype({"c64": "f32", "c128": "f64"}.get(s.name, s.name))


def norm_axis(op: Op, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise IRVerifyError(f"{op.name}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


# The ops live in one module per family (structure, elementwise, contraction, shapes,
# collectives); importing them here registers them with the parser and keeps
# ``graph.Add`` etc. valid. They import the helpers above, so they come last.
from tessera.ir.dialects.graph.structure import (  # noqa: E402, I001 (registration order)
    Constant,
    Custom,
    Return,
    Yield,
)
from tessera.ir.dialects.graph.elementwise import (  # noqa: E402
    Abs,
    Add,
    Binary,
    Cast,
    Compare,
    Conj,
    Cos,
    Div,
    Eq,
    Erf,
    Exp,
    Ge,
    Gelu,
    Gt,
    Imag,
    Le,
    Log,
    Lt,
    Maximum,
    Minimum,
    Mul,
    Ne,
    Neg,
    Pow,
    Real,
    Relu,
    Round,
    Sign,
    Sin,
    Sqrt,
    Sub,
    Tanh,
    ToReal,
    Unary,
    Where,
)
from tessera.ir.dialects.graph.contraction import (  # noqa: E402
    Fft,
    Ifft,
    MatMul,
    Max,
    Mean,
    Min,
    Mse,
    Reduce,
    Softmax,
    Spectral,
    Sum,
    matmul_element,
)
from tessera.ir.dialects.graph.shapes import (  # noqa: E402
    Broadcast,
    Embed,
    Reshape,
    Slice,
    Transpose,
)
from tessera.ir.dialects.graph.collective import (  # noqa: E402
    COLLECTIVE_OPS,
    AllGather,
    AllReduce,
    AllToAll,
    AxisAttr,
    Collective,
    MeshBroadcast,
    Ppermute,
    ReduceScatter,
    Shard,
    axis_names,
)
from tessera.ir.dialects.graph.kernel import KernelCall  # noqa: E402

__all__ = [
    "BOOL", "COLLECTIVE_OPS", "Abs", "Add", "AllGather", "AllReduce", "AllToAll",
    "AxisAttr", "Binary", "Broadcast", "Cast", "Collective", "Compare", "Conj", "Constant",
    "Cos", "Custom", "Div", "Embed", "Eq", "Erf", "Exp", "Fft", "Ge", "Gelu", "Gt", "Ifft",
    "Imag", "KernelCall", "Le", "Log", "Lt", "MatMul", "Max", "Maximum", "Mean",
    "MeshBroadcast", "Min", "Minimum", "Mse", "Mul", "Ne", "Neg", "Pow", "Ppermute", "Real",
    "Reduce", "ReduceScatter", "Relu", "Reshape", "Return", "Round", "Shard", "Sign", "Sin",
    "Slice", "Softmax", "Spectral", "Sqrt", "Sub", "Sum", "Tanh", "ToReal", "Transpose", "Unary",
    "Where", "Yield", "arity", "axis_names", "join", "matmul_element", "norm_axis",
    "real_of", "tensor",
]
