"""Graph IR: the operator level.

Every op is a frozen dataclass whose fields are its attributes. Operand shapes are
explicit: elementwise ops take operands of one shape (the tracer inserts
``graph.broadcast``), so the interpreter and autodiff never guess a broadcast.

Element rules (documented in docs/numerics.md):
* elementwise ops need one storage format; a policy on either operand is kept;
* ``graph.matmul`` returns the accumulator format when an operand's policy declares one
  (fp8 @accum(f32) inputs give an f32 result), otherwise the promoted storage format;
* reductions keep the element of their input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Instr, Op, Terminator, Type, check_count, register_op
from tessera.ir.types import Dense, Element, TensorType
from tessera.numerics import DType, Policy, PolicyClass, dtype, promote, storage_of

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


# --------------------------------------------------------------------------- structure
@register_op
@dataclass(frozen=True)
class Constant(Op):
    """A constant tensor; ``value`` holds exact values, ``element`` the format."""

    name: ClassVar[str] = "graph.constant"
    value: Dense
    element: Element

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        arity(self, operands, 0)
        return (TensorType(self.value.array.shape, self.element),)


@register_op
@dataclass(frozen=True)
class Return(Terminator):
    """Ends a function; its operands are the function's results."""

    name: ClassVar[str] = "graph.return"


@register_op
@dataclass(frozen=True)
class Yield(Terminator):
    """Ends a region; its operands are the region's results."""

    name: ClassVar[str] = "graph.yield"


@register_op
@dataclass(frozen=True)
class Custom(Op):
    """A call of a function with a user-defined derivative rule.

    The region is the primal body (what the interpreter runs); ``rule`` names the
    registered ``custom_vjp`` / ``custom_jvp`` object that autodiff asks for the rule.
    The last ``captures`` operands are outer values the body closes over; the rule
    sees only the ones before them.
    """

    name: ClassVar[str] = "graph.custom"
    num_regions: ClassVar[int] = 1
    rule: str
    kind: str = "vjp"
    captures: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        raise IRVerifyError("graph.custom takes its result types from its region")

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        if self.kind not in ("vjp", "jvp"):
            raise IRVerifyError(f"graph.custom kind must be 'vjp' or 'jvp', not {self.kind!r}")

    def verify_regions(self, instr: Instr) -> None:
        # Placements are compared only once both sides have them: a region traced on
        # one device is placed by shard propagation together with its operands.
        block = instr.regions[0].block
        if not _alike([a.type for a in block.args], [v.type for v in instr.operands]):
            raise IRVerifyError("graph.custom region arguments must match its operands")
        term = block.terminator
        if term is None or not _alike([v.type for v in term.operands],
                                      [r.type for r in instr.results]):
            raise IRVerifyError("graph.custom region must yield its result types")


def _alike(a: Sequence[Type], b: Sequence[Type]) -> bool:
    """Equal types, or equal but for a placement that one side does not have yet."""
    return len(a) == len(b) and all(
        x == y or (isinstance(x, TensorType) and isinstance(y, TensorType) and
                   (x.sharding is None or y.sharding is None) and x.unplaced() == y.unplaced())
        for x, y in zip(a, b))


# ------------------------------------------------------------------------- elementwise
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


# ------------------------------------------------------------------- contractions etc.
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


# ------------------------------------------------------------------------------ shapes
@register_op
@dataclass(frozen=True)
class Transpose(Op):
    """Permute axes: result axis i is operand axis ``perm[i]``."""

    name: ClassVar[str] = "graph.transpose"
    perm: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        if sorted(self.perm) != list(range(x.rank)):
            raise IRVerifyError(f"graph.transpose perm {self.perm} is not a permutation of "
                                f"{x.rank} axes")
        return (x.with_shape(tuple(x.shape[p] for p in self.perm)),)


@register_op
@dataclass(frozen=True)
class Reshape(Op):
    """Reshape to ``shape`` (same number of elements, row-major order)."""

    name: ClassVar[str] = "graph.reshape"
    shape: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        new = TensorType(self.shape, x.element)
        if new.size != x.size or any(d < 0 for d in self.shape):
            raise IRVerifyError(f"graph.reshape cannot turn {x.shape} into {self.shape}")
        return (new,)


@register_op
@dataclass(frozen=True)
class Broadcast(Op):
    """Broadcast to ``shape`` by NumPy's rules (trailing axes aligned)."""

    name: ClassVar[str] = "graph.broadcast"
    shape: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        lead = len(self.shape) - x.rank
        if lead < 0 or any(d not in (1, s) for d, s in zip(x.shape, self.shape[lead:])):
            raise IRVerifyError(f"graph.broadcast cannot broadcast {x.shape} to {self.shape}")
        return (x.with_shape(self.shape),)


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


@register_op
@dataclass(frozen=True)
class Slice(Op):
    """Strided slice: axis i keeps ``starts[i] : stops[i] : steps[i]`` (steps > 0)."""

    name: ClassVar[str] = "graph.slice"
    starts: tuple[int, ...]
    stops: tuple[int, ...]
    steps: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        if not len(self.starts) == len(self.stops) == len(self.steps) == x.rank:
            raise IRVerifyError(f"graph.slice needs one start/stop/step per axis of {x.shape}")
        shape = []
        for lo, hi, st, dim in zip(self.starts, self.stops, self.steps, x.shape):
            if st <= 0 or not 0 <= lo <= hi <= dim:
                raise IRVerifyError(f"graph.slice {lo}:{hi}:{st} is outside an axis of {dim}")
            shape.append(len(range(lo, hi, st)))
        return (x.with_shape(tuple(shape)),)


@register_op
@dataclass(frozen=True)
class Embed(Op):
    """The transpose of ``graph.slice``: place the operand into zeros of ``shape``.

    Element ``j`` of axis ``i`` lands at ``starts[i] + j * steps[i]``.
    """

    name: ClassVar[str] = "graph.embed"
    shape: tuple[int, ...]
    starts: tuple[int, ...]
    steps: tuple[int, ...]

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        if not len(self.shape) == len(self.starts) == len(self.steps) == x.rank:
            raise IRVerifyError(f"graph.embed needs one shape/start/step per axis of {x.shape}")
        for n, lo, st, dim in zip(x.shape, self.starts, self.steps, self.shape):
            if st <= 0 or lo < 0 or (n and lo + (n - 1) * st >= dim):
                raise IRVerifyError(f"graph.embed of {n} elements from {lo} by {st} does not "
                                    f"fit an axis of {dim}")
        return (x.with_shape(self.shape),)


# The collectives live in their own module; importing them here registers them and keeps
# ``graph.AllGather`` etc. valid.
from tessera.ir.dialects.graph.collective import (  # noqa: E402, F401, I001
    AllGather,
    AllReduce,
    AllToAll,
    AxisAttr,
    COLLECTIVE_OPS,
    Collective,
    MeshBroadcast,
    Ppermute,
    ReduceScatter,
    Shard,
    axis_names,
)
