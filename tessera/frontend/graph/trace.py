"""Tracing Python functions into Graph IR.

While a function runs under a :class:`Trace`, tessera operators receive
:class:`Tracer` objects and append Graph IR instructions instead of computing. A
tracer of an enclosing trace used inside an inner one (a closure) is *captured*: it
becomes an extra argument of the inner function, passed in when the inner function is
inlined back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.errors import Loc, TraceError, user_location
from tessera.frontend.graph.arraylike import ArrayMethods
from tessera.ir.core import Block, Builder, Function, IRRegion, Op, Value
from tessera.ir.dialects.graph import Return
from tessera.ir.types import TensorType

_STACK: list[Trace] = []


def current_trace() -> Trace | None:
    """The innermost active trace, or None when running eagerly."""
    return _STACK[-1] if _STACK else None


class Tracer(ArrayMethods):
    """A symbolic tensor: an SSA value of a trace, with NumPy-like operators."""

    __slots__ = ("trace", "value")
    __array_priority__ = 1000  # so ndarray @ tracer defers to the tracer

    def __init__(self, trace: Trace, value: Value) -> None:
        self.trace = trace
        self.value = value

    @property
    def type(self) -> TensorType:
        return self.value.type  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"Tracer({self.type})"

    # == builds an elementwise comparison, so identity is the hash (as for NumPy arrays,
    # tracers are never meant as dict keys; hashing by identity keeps them usable in sets).
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TraceError("a traced tensor has no concrete value, so it cannot decide Python "
                         "control flow (if/while/and/or)",
                         hint="use ts.where(cond, a, b) in graph functions, or write a "
                              "@ts.kernel, whose if/while are compiled")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        # NumPy functions and other eager code meet tracers here.
        raise TraceError("a traced tensor cannot be turned into a NumPy array inside a traced "
                         "function (it has no value until the function runs)",
                         hint="use ts.* operators or a @ts.kernel on it; call NumPy code "
                              "outside @ts.jit, or call the function without @ts.jit")

    def __float__(self) -> float:
        return self.__bool__()  # same message: no concrete value

    __int__ = __float__
    __index__ = __float__


class Trace:
    """A function being built: its block, builder and captured outer values."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.block = Block()
        self.builder = Builder(self.block)
        self.parent = current_trace()
        self.captured: list[Tracer] = []
        self._capture_values: dict[int, Value] = {}
        self.num_params = 0
        self.done = False

    def __enter__(self) -> Trace:
        _STACK.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _STACK.pop()

    def param(self, type: TensorType, hint: str = "") -> Tracer:
        """Add a function parameter (before any capture)."""
        self.num_params += 1
        return Tracer(self, self.block.add_arg(type, hint))

    def ancestors(self) -> list[Trace]:
        out, t = [], self.parent
        while t is not None:
            out.append(t)
            t = t.parent
        return out

    def value_of(self, x: Tracer) -> Value:
        """The SSA value standing for ``x`` in this trace (capturing outer tracers)."""
        if x.trace is self:
            if self.done:
                raise _escaped()
            return x.value
        if x.trace.done or x.trace not in self.ancestors():
            raise _escaped()
        key = id(x.value)
        if key not in self._capture_values:
            self._capture_values[key] = self.block.add_arg(x.type, f"captured{len(self.captured)}")
            self.captured.append(x)
        return self._capture_values[key]

    def emit(self, op: Op, operands: Sequence[Value], loc: Loc | None = None,
             regions: Sequence[IRRegion] = (), result_types: Sequence[Any] | None = None,
             ) -> list[Tracer]:
        """Append ``op`` and return tracers of its results."""
        results = self.builder.create(op, operands, loc=loc or user_location(),
                                      regions=regions, result_types=result_types)
        return [Tracer(self, v) for v in results]

    def finish(self, outputs: Sequence[Tracer], kind: str = "graph.func") -> Function:
        """Close the trace with a return of ``outputs`` and build its Function."""
        values = [self.value_of(o) for o in outputs]
        self.builder.create(Return(), values, loc=user_location())
        self.done = True
        return Function(self.name, self.block, [v.type for v in values], kind,
                        {"captures": len(self.captured)} if self.captured else {})


def _escaped() -> TraceError:
    return TraceError("a traced value escaped the function it was traced in (stored in a "
                      "global, or returned through a side channel)",
                      hint="return values from the traced function instead of storing them")
