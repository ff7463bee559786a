"""The kernel compiler's state: source locations, IR emission, names and value coercions.

A :class:`CompileState` is everything one compilation carries from rule to rule: the
insertion point (``block``, ``builder``), the source position (``file``,
``first_line``), the variables (``env``), the free names (``scopes``), the
specialisation (``spec``) and the inlining depth. The rules themselves are functions
of it, registered in the tables of :mod:`~tessera.frontend.kernel.compiler.rules`.

Type rules of kernel expressions (documented for users in :mod:`tessera.frontend.kernel`):

* A Python number in a kernel is *weakly typed*, like a Triton constant: combined with a
  tile it takes the tile's element (``x * 2.0`` stays bf16 for a bf16 ``x``); alone it is
  ``int64`` (ints), ``f32`` (floats) or ``bool``.
* Two tiles of different formats promote with :func:`tessera.numerics.promote` (the
  narrower operand is cast exactly).
* ``a / b`` of integers is a float32 division (Python's true division); ``//`` and ``%``
  follow Python's floor semantics.
* Shapes broadcast by NumPy's rules, with one ruling first: a 1-D tile whose length is
  the row count of a 2-D tile broadcasts along rows (``alpha * acc``; ``l[:, None]``
  also works). A scalar broadcasts to any tile.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.errors import IRVerifyError, Loc
from tessera.frontend.kernel.errors import KernelCompileError
from tessera.ir.core import Block, Builder, IRRegion, Op, Type, Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import BOOL, INDEX, MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import Element, TensorType
from tessera.numerics import DType, dtype, promote, storage_of

F32 = dtype("f32")
SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


def is_value(x: Any) -> bool:
    """Whether ``x`` is a kernel value (an IR value), not a compile-time Python value."""
    return isinstance(x, Value)


def is_tile(x: Any) -> bool:
    """Whether ``x`` is a register tile or scalar of the kernel."""
    return isinstance(x, Value) and isinstance(x.type, TensorType)


def is_mem(x: Any) -> bool:
    """Whether ``x`` is memory: a global tensor, a shared buffer or a view of one."""
    return isinstance(x, Value) and isinstance(x.type, MemRefType)


def kind_of(e: Element) -> str:
    """The kind of an element's storage format: ``"float"``, ``"int"`` or ``"bool"``."""
    return storage_of(e).kind


class CompileState:
    """One kernel compilation: insertion point, source position, variables and names."""

    def __init__(self, file: str, first_line: int, spec: Any, scope: dict[str, Any]) -> None:
        self.file = file
        self.first_line = first_line
        self.name: str = spec.name
        #: the specialisation (:class:`~tessera.frontend.kernel.compiler.scope.Spec`)
        self.spec = spec
        self.block = Block()
        self.builder = Builder(self.block)
        self._consts: dict[Any, Value] = {}
        #: variables: Python values (folded) or IR values; ``Undefined`` where unbound
        self.env: dict[str, Any] = {}
        #: free names: the kernel's (or inlined function's) globals and closure
        self.scopes: list[dict[str, Any]] = [scope]
        #: how deep inlined functions are nested (recursion guard)
        self.depth = 0

    # -- locations and errors
    def loc(self, node: ast.AST | None) -> Loc:
        """The user's file and line of ``node``."""
        line = getattr(node, "lineno", 1) if node is not None else 1
        return Loc(self.file, self.first_line + line - 1)

    def error(self, message: str, node: ast.AST | None, hint: str | None = None,
              cls: type[KernelCompileError] = KernelCompileError) -> KernelCompileError:
        """The error to raise for ``node``, naming the kernel and the user's line."""
        return cls(f"in kernel '{self.name}': {message}", hint=hint, loc=self.loc(node))

    # -- emission
    def emit(self, op: Op, operands: Sequence[Value], node: ast.AST | None, *,
             result_types: Sequence[Type] | None = None,
             regions: Sequence[IRRegion] = ()) -> list[Value]:
        """Append ``op`` at the insertion point; a type error becomes the user's error."""
        try:
            return self.builder.create(op, operands, loc=self.loc(node), regions=regions,
                                       result_types=result_types)
        except IRVerifyError as err:
            raise self.error(err.message, node, err.hint) from None

    def emit1(self, op: Op, operands: Sequence[Value], node: ast.AST | None) -> Value:
        """:meth:`emit` of a one-result op: its result."""
        return self.emit(op, operands, node)[0]

    def enter(self, block: Block) -> tuple[Block, Builder]:
        """Make ``block`` the insertion point; return the previous one."""
        prev = self.block, self.builder
        self.block, self.builder = block, Builder(block)
        return prev

    def leave(self, prev: tuple[Block, Builder]) -> None:
        """Restore the insertion point :meth:`enter` returned."""
        self.block, self.builder = prev

    # -- constants
    def constant(self, value: Any, element: Element, node: ast.AST | None) -> Value:
        """A scalar constant of ``element`` (one per block and value)."""
        kind = kind_of(element)
        if kind == "bool":
            value = bool(value)
        elif kind == "int":
            if isinstance(value, float) and not float(value).is_integer():
                raise self.error(f"the constant {value!r} is not an integer", node)
            value = int(value)
            if not -2**63 <= value < 2**63:
                raise self.error(f"the constant {value} does not fit int64", node)
        else:
            value = float(value)
        key = (id(self.block), type(value), value, element)
        found = self._consts.get(key)
        if found is None or found.owner is None:
            found = self.emit1(tile_ir.Constant(value, element), [], node)
            self._consts[key] = found
        return found

    def materialise(self, x: Any, node: ast.AST | None, like: Element | None = None) -> Value:
        """A Python scalar as an IR scalar (weakly typed by ``like``)."""
        if isinstance(x, (bool, np.bool_)):
            elem: Element = like if like is not None else BOOL
        elif isinstance(x, (int, np.integer)):
            elem = like if like is not None and kind_of(like) in ("int", "float") else INDEX
        elif isinstance(x, (float, np.floating)):
            elem = like if like is not None and kind_of(like) == "float" else F32
        else:
            raise self.error(f"{type(x).__name__} value {x!r} cannot be used as a tile value",
                             node, hint="kernel values are tiles, scalars and memory")
        return self.constant(x, elem, node)

    def as_tile(self, x: Any, node: ast.AST | None, like: Element | None = None) -> Value:
        """``x`` as a register tile: memory is loaded, Python numbers materialised."""
        if is_tile(x):
            return x
        if is_mem(x):
            return self.emit1(tile_memory.Load(), [x], node)
        if isinstance(x, SCALARS):
            return self.materialise(x, node, like)
        raise self.error(f"expected a tile or a number, got {_describe(x)}", node)

    def as_index(self, x: Any, node: ast.AST | None) -> Value:
        """``x`` as an int64 scalar (for indices and loop bounds)."""
        v = self.as_tile(x, node, INDEX)
        t = v.type
        assert isinstance(t, TensorType)
        if t.rank != 0 or kind_of(t.element) not in ("int", "bool"):
            raise self.error(f"an index must be an integer scalar, got {t}", node,
                             hint="indices and loop bounds are int scalars")
        return self.cast(v, INDEX, node)

    def as_bool(self, x: Any, node: ast.AST | None) -> Value:
        """``x`` as a bool scalar (``x != 0`` for numbers)."""
        v = self.as_tile(x, node)
        t = v.type
        assert isinstance(t, TensorType)
        if t.rank != 0:
            raise self.error(f"a condition must be a scalar, got a {t.shape} tile", node,
                             hint="reduce the tile first, or use ts.tile.where for "
                                  "elementwise choices")
        if kind_of(t.element) == "bool":
            return v
        zero = self.constant(0, t.element, node)
        return self.emit1(tile_compute.Ne(), [v, zero], node)

    # -- coercions
    def cast(self, v: Value, element: Element, node: ast.AST | None) -> Value:
        """``v`` converted to ``element`` (nothing when its storage already is)."""
        t = v.type
        assert isinstance(t, TensorType)
        if t.element == element:
            return v
        if storage_of(t.element) == storage_of(element) and isinstance(element, DType):
            return v
        if kind_of(element) == "bool" and kind_of(t.element) != "bool":
            zero = self.constant(0, t.element, node)
            v = self.emit1(tile_compute.Ne(), [v, zero], node)
            return v
        return self.emit1(tile_compute.Cast(element), [v], node)

    def broadcast(self, v: Value, shape: tuple[int, ...], node: ast.AST | None,
                  dims: tuple[int, ...] | None = None) -> Value:
        """``v`` broadcast to ``shape`` (trailing axes by default, else ``dims``)."""
        t = v.type
        assert isinstance(t, TensorType)
        if t.shape == shape:
            return v
        if dims is None:
            dims = tuple(range(len(shape) - t.rank, len(shape)))
        return self.emit1(tile_compute.Broadcast(shape, dims), [v], node)

    def broadcast_pair(self, a: Value, b: Value, node: ast.AST | None) -> tuple[Value, Value]:
        """Broadcast two tiles to one shape (the row rule, then NumPy's)."""
        sa, sb = a.type.shape, b.type.shape  # type: ignore[attr-defined]
        if sa == sb:
            return a, b
        if len(sa) == 1 and len(sb) == 2 and sa[0] == sb[0]:
            return self.broadcast(a, sb, node, (0,)), b
        if len(sb) == 1 and len(sa) == 2 and sb[0] == sa[0]:
            return a, self.broadcast(b, sa, node, (0,))
        try:
            shape = tuple(int(d) for d in np.broadcast_shapes(sa, sb))
        except ValueError:
            raise self.error(f"tiles of shapes {sa} and {sb} do not broadcast", node,
                             hint="a 1-D tile broadcasts along the rows of a 2-D tile when "
                                  "its length is the row count; or use x[:, None]") from None
        return self.broadcast(a, shape, node), self.broadcast(b, shape, node)

    def unify(self, a: Any, b: Any, node: ast.AST | None) -> tuple[Value, Value]:
        """Two operands as tiles of one element and shape (weak constants adapt)."""
        if not is_value(a) and is_value(b):
            b = self.as_tile(b, node)
            a = self.as_tile(a, node, b.type.element)  # type: ignore[attr-defined]
        elif is_value(a) and not is_value(b):
            a = self.as_tile(a, node)
            b = self.as_tile(b, node, a.type.element)  # type: ignore[attr-defined]
        else:
            a, b = self.as_tile(a, node), self.as_tile(b, node)
        ea, eb = a.type.element, b.type.element  # type: ignore[attr-defined]
        if storage_of(ea) != storage_of(eb):
            target = promote(storage_of(ea), storage_of(eb))
            a, b = self.cast(a, target, node), self.cast(b, target, node)
        return self.broadcast_pair(a, b, node)


def _describe(x: Any) -> str:
    if isinstance(x, Value):
        return str(x.type)
    return f"{type(x).__name__} {x!r}"[:80]


__all__ = ["F32", "SCALARS", "CompileState", "is_mem", "is_tile", "is_value", "kind_of"]
