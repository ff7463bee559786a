"""The graph-level operators (``ts.*`` and ``op.*``).

Each operator normalises its operands (Python scalars take the other operand's format,
mixed formats are promoted, shapes are broadcast by NumPy's rules with explicit
``graph.broadcast``), then binds one Graph IR op: appended to the current trace when an
operand is traced, run by the interpreter at once otherwise.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.errors import (
    DTypeError,
    IRVerifyError,
    Loc,
    ShapeError,
    TraceError,
    user_api,
    user_location,
)
from tessera.frontend.graph.dist_arg import DistArg, DistValue
from tessera.frontend.graph.tensor import Tensor, as_tensor
from tessera.frontend.graph.trace import Tracer, current_trace
from tessera.ir.core import IRRegion, Op
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import Dense
from tessera.numerics import DType, element, promote, storage_of, to_f64

Operand = Tracer | Tensor
pi = math.pi
e = math.e


# ------------------------------------------------------------------------------ binding
def bind(op: Op, *operands: Operand, regions: Sequence[IRRegion] = (),
         result_types: Sequence[Any] | None = None, loc: Loc | None = None) -> list[Operand]:
    """Apply ``op``: trace it if any operand is traced, else run it now (on the mesh
    of the DistTensor operands when there are any)."""
    loc = loc or user_location()
    operands = tuple(operand(o) if isinstance(o, DistValue) else o for o in operands)
    if any(isinstance(o, Tracer) for o in operands) or regions:
        trace = current_trace()
        if trace is None:
            raise TraceError("a traced value was used after its function finished tracing",
                             hint="return values from traced functions instead of keeping "
                                  "them in globals")
        values = [trace.value_of(o) if isinstance(o, Tracer) else constant(o) for o in operands]
        try:
            return trace.emit(op, values, loc, regions, result_types)  # type: ignore[return-value]
        except IRVerifyError as err:
            raise ShapeError(err.message, hint=err.hint, loc=loc) from None
    if any(isinstance(o, DistArg) for o in operands):
        from tessera.mesh_sim.spmd.eager import run_eager

        return run_eager(op, operands, loc=loc, regions=regions,  # type: ignore[return-value]
                         result_types=result_types)
    from tessera.interp.graph import run_op

    types = [o.type for o in operands]
    try:
        results = list(op.infer(types)) if result_types is None else list(result_types)
        op.verify(types, results)
    except IRVerifyError as err:
        raise ShapeError(err.message, hint=err.hint, loc=loc) from None
    arrays = run_op(op, [o.array for o in operands], types, results)  # type: ignore[union-attr]
    return [Tensor(a, t.element) for a, t in zip(arrays, results)]


def constant(x: Tensor) -> Any:
    """Emit ``x`` as a ``graph.constant`` in the current trace and return its value."""
    trace = current_trace()
    assert trace is not None
    # Booleans stay booleans: the interpreter refuses to turn float values into bool.
    values = x.array if x.array.dtype == np.bool_ else to_f64(x.array)
    return trace.builder.create(graph_ir.Constant(Dense(values), x.type.element),
                                loc=user_location())[0]


def operand(x: Any, like: Operand | None = None) -> Operand:
    """``x`` as a tensor or tracer; a Python scalar takes the format of ``like``."""
    if isinstance(x, (Tracer, Tensor)):
        return x
    if isinstance(x, DistValue):
        return DistArg(x)
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return as_tensor(np.asarray(x), _weak_element(x, like))
    return as_tensor(x)


def _weak_element(x: Any, like: Operand | None) -> Any:
    kind = "complex" if isinstance(x, complex) else "bool" if isinstance(x, bool) else \
        "int" if isinstance(x, int) else "float"
    if like is not None:
        lk = storage_of(like.type.element).kind
        if lk == "complex" or lk == kind or (lk == "float" and kind in ("int", "bool")):
            return storage_of(like.type.element)
    return {"complex": "c64", "bool": "bool", "int": "int32", "float": "f32"}[kind]


# ---------------------------------------------------------------- promotion & broadcast
def broadcast_shapes(*shapes: tuple[Any, ...]) -> tuple[Any, ...]:
    """NumPy's broadcast rule, also for symbolic (string) dims that match exactly."""
    rank = builtins.max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(dims) > 1:
            raise ShapeError(f"shapes {', '.join(map(str, shapes))} do not broadcast",
                             hint="make the dims equal, or 1 where a value should repeat")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_to(x: Any, shape: Sequence[int]) -> Operand:
    """Broadcast ``x`` to ``shape`` by NumPy's rules."""
    x = operand(x)
    shape = _shape_arg(shape, "broadcast_to")
    if tuple(x.shape) == shape:
        return x
    broadcast_shapes(tuple(x.shape), shape)
    trace = current_trace()
    if trace is not None and isinstance(x, Tensor):
        # Inside a trace, keep small constants small: broadcast them in the graph.
        x = Tracer(trace, constant(x))
    return bind(graph_ir.Broadcast(shape), x)[0]


broadcast = broadcast_to


def _shape_arg(shape: Any, what: str) -> tuple[int, ...]:
    """A shape argument: a sequence of non-negative ints (an int is one dim)."""
    dims = [shape] if isinstance(shape, (int, np.integer)) else shape
    if isinstance(dims, np.ndarray):
        dims = list(dims) if dims.ndim == 1 else None
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence) or \
            any(isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer))
                or d < 0 for d in dims):
        raise ShapeError(f"{what}: {shape!r} is not a shape",
                         hint="pass a tuple of non-negative ints, e.g. (4, 8)")
    return tuple(int(d) for d in dims)


def promote_operands(*xs: Any) -> list[Operand]:
    """Tensors of one storage format (scalars adopt it) and one broadcast shape."""
    like = next((x for x in xs if isinstance(x, (Tracer, Tensor, np.ndarray))), None)
    if isinstance(like, np.ndarray):
        like = as_tensor(like)
    ops = [operand(x, like) for x in xs]
    target: DType = storage_of(ops[0].type.element)
    for o in ops[1:]:
        target = promote(target, storage_of(o.type.element))
    ops = [o if storage_of(o.type.element) == target else cast(o, target) for o in ops]
    shape = broadcast_shapes(*(tuple(o.shape) for o in ops))
    return [broadcast_to(o, shape) for o in ops]


def _binary(op: Op, a: Any, b: Any) -> Any:
    return bind(op, *promote_operands(a, b))[0]


def _unary(op: Op, x: Any) -> Any:
    return bind(op, operand(x))[0]


# --------------------------------------------------------------------------- elementwise
def add(a: Any, b: Any) -> Any:
    """Elementwise ``a + b``."""
    return _binary(graph_ir.Add(), a, b)


def sub(a: Any, b: Any) -> Any:
    """Elementwise ``a - b``."""
    return _binary(graph_ir.Sub(), a, b)


def mul(a: Any, b: Any) -> Any:
    """Elementwise ``a * b``."""
    return _binary(graph_ir.Mul(), a, b)


def div(a: Any, b: Any) -> Any:
    """Elementwise ``a / b``."""
    return _binary(graph_ir.Div(), a, b)


def pow(a: Any, b: Any) -> Any:
    """Elementwise ``a ** b``."""
    return _binary(graph_ir.Pow(), a, b)


def maximum(a: Any, b: Any) -> Any:
    """Elementwise maximum (NaN propagates)."""
    return _binary(graph_ir.Maximum(), a, b)


def minimum(a: Any, b: Any) -> Any:
    """Elementwise minimum (NaN propagates)."""
    return _binary(graph_ir.Minimum(), a, b)


def greater(a: Any, b: Any) -> Any:
    """Elementwise ``a > b`` (bool)."""
    return _binary(graph_ir.Gt(), a, b)


def greater_equal(a: Any, b: Any) -> Any:
    """Elementwise ``a >= b`` (bool)."""
    return _binary(graph_ir.Ge(), a, b)


def less(a: Any, b: Any) -> Any:
    """Elementwise ``a < b`` (bool)."""
    return _binary(graph_ir.Lt(), a, b)


def less_equal(a: Any, b: Any) -> Any:
    """Elementwise ``a <= b`` (bool)."""
    return _binary(graph_ir.Le(), a, b)


def equal(a: Any, b: Any) -> Any:
    """Elementwise ``a == b`` (bool)."""
    return _binary(graph_ir.Eq(), a, b)


def not_equal(a: Any, b: Any) -> Any:
    """Elementwise ``a != b`` (bool)."""
    return _binary(graph_ir.Ne(), a, b)


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` holds, else ``b`` (broadcast together)."""
    c = operand(cond)
    if storage_of(c.type.element).kind != "bool":
        raise DTypeError(f"where() needs a boolean condition, got {c.type.element}",
                         hint="compare first, e.g. ts.where(x > 0, x, 0)")
    a, b = promote_operands(a, b)
    shape = broadcast_shapes(tuple(c.shape), tuple(a.shape))
    return bind(graph_ir.Where(), broadcast_to(c, shape), broadcast_to(a, shape),
                broadcast_to(b, shape))[0]


def neg(x: Any) -> Any:
    """Elementwise ``-x``."""
    return _unary(graph_ir.Neg(), x)


def exp(x: Any) -> Any:
    """Elementwise ``e ** x``."""
    return _unary(graph_ir.Exp(), x)


def log(x: Any) -> Any:
    """Elementwise natural logarithm."""
    return _unary(graph_ir.Log(), x)


def tanh(x: Any) -> Any:
    """Elementwise hyperbolic tangent."""
    return _unary(graph_ir.Tanh(), x)


def sqrt(x: Any) -> Any:
    """Elementwise square root."""
    return _unary(graph_ir.Sqrt(), x)


def sin(x: Any) -> Any:
    """Elementwise sine."""
    return _unary(graph_ir.Sin(), x)


def cos(x: Any) -> Any:
    """Elementwise cosine."""
    return _unary(graph_ir.Cos(), x)


def abs(x: Any) -> Any:
    """Elementwise absolute value (modulus of complex values)."""
    return _unary(graph_ir.Abs(), x)


def sign(x: Any) -> Any:
    """Elementwise sign: -1, 0 or 1."""
    return _unary(graph_ir.Sign(), x)


def round(x: Any) -> Any:
    """Elementwise round half to even."""
    return _unary(graph_ir.Round(), x)


def relu(x: Any) -> Any:
    """Elementwise ``max(x, 0)``."""
    return _unary(graph_ir.Relu(), x)


def gelu(x: Any, approximate: bool = True) -> Any:
    """GELU; ``approximate=True`` is the tanh form, ``False`` the exact erf form."""
    return bind(graph_ir.Gelu(approximate), operand(x))[0]


def real(x: Any) -> Any:
    """Real part."""
    return _unary(graph_ir.Real(), x)


def imag(x: Any) -> Any:
    """Imaginary part."""
    return _unary(graph_ir.Imag(), x)


def conj(x: Any) -> Any:
    """Complex conjugate (identity on real tensors, which are returned unchanged)."""
    x = operand(x)
    if storage_of(x.type.element).kind != "complex":
        return x
    return _unary(graph_ir.Conj(), x)


def erf(x: Any) -> Any:
    """Elementwise error function."""
    return _unary(graph_ir.Erf(), x)


def cast(x: Any, to: Any) -> Any:
    """Convert to another format or policy (round to nearest even, satfinite)."""
    x = operand(x)
    target = element(to)
    if target == x.type.element:
        return x
    return bind(graph_ir.Cast(target), x)[0]


# The remaining operators live in their own modules; they are re-exported here so that
# ``ops`` is the one table the array methods and the public namespaces read.
from tessera.frontend.graph.shapes import getitem, reshape, transpose  # noqa: E402, I001
from tessera.frontend.graph.linalg import (  # noqa: E402
    fft,
    ifft,
    matmul,
    max,
    mean,
    min,
    mse,
    softmax,
    sum,
)

# Every operator is a public entry point: a call that does not bind (a wrong number or
# name of arguments) is an ArgumentError at the user's line, not Python's TypeError.
for _name in ("abs", "add", "broadcast_to", "cast", "conj", "cos", "div", "equal", "erf",
              "exp", "fft", "gelu", "greater", "greater_equal", "ifft", "imag",
              "less", "less_equal", "log", "matmul", "max", "maximum", "mean", "min",
              "minimum", "mse", "mul", "neg", "not_equal", "pow", "real", "relu", "round",
              "sign", "sin", "softmax", "sqrt", "sub", "sum", "tanh", "where"):
    globals()[_name] = user_api(globals()[_name])
broadcast = broadcast_to  # the aliases of the wrapped functions
gemm = matmul

__all__ = [
    "abs", "add", "bind", "broadcast", "broadcast_to", "cast", "conj", "cos", "div", "e",
    "equal", "erf", "exp", "fft", "gelu", "gemm", "getitem", "greater", "greater_equal", "ifft",
    "imag", "less", "less_equal", "log", "matmul", "max", "maximum", "mean", "min",
    "minimum", "mse", "mul", "neg", "not_equal", "pi", "pow", "real", "relu", "reshape",
    "round", "sign", "sin", "softmax", "sqrt", "sub", "sum", "tanh", "transpose", "where",
]
