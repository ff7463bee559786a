"""Lowering of masked accesses, ``ts.tile.load(ref, mask=, other=)`` and
``ts.tile.store(ref, value, mask=)``, and of the index tile ``ts.tile.arange(n)``
that masks are built from.

The reference of a masked access (``A[i:i+64, j:j+32]``) may extend past the memory's
edge: it is not compiled to a ``tile.view`` (which would be bounds-checked) but gives
its starts and sizes to ``tile.masked_load``/``tile.masked_store``, which check each
element the mask lets through.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from tessera.frontend.kernel.compiler import view
from tessera.frontend.kernel.compiler.rules import api_rule, expr
from tessera.frontend.kernel.compiler.state import CompileState, is_mem, is_value, kind_of
from tessera.ir.core import Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import BOOL, MemRefType
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType


def _reference(state: CompileState, name: str, node: ast.Call,
               ) -> tuple[MemRefType, list[Value], tuple[int, ...], tuple[int, ...]]:
    """The memory, operands, sizes and squeezed axes the first argument names."""
    if not node.args:
        raise state.error(f"ts.tile.{name}() needs the memory to access", node)
    arg = node.args[0]
    mem = expr(state, arg.value) if isinstance(arg, ast.Subscript) else expr(state, arg)
    if not is_mem(mem):
        raise state.error(f"ts.tile.{name}() accesses memory (a global tensor or shared "
                          f"buffer, or a slice of one), not a tile", arg)
    mt = mem.type
    assert isinstance(mt, MemRefType)
    if isinstance(arg, ast.Subscript):
        operands, sizes, squeeze = view.window(state, mem, arg.slice, arg)
    else:
        operands = [mem] + [state.as_index(0, arg) for _ in mt.shape]
        sizes, squeeze = tuple(mt.shape), ()
    return mt, operands, sizes, squeeze


def _keywords(state: CompileState, name: str, node: ast.Call, allowed: tuple[str, ...],
              npos: int) -> dict[str, ast.expr]:
    kw = {k.arg: k.value for k in node.keywords}
    for k in kw:
        if k not in allowed:
            raise state.error(f"ts.tile.{name}() has no argument {k!r}; it takes "
                              f"{', '.join(allowed)}", node)
    if len(node.args) > npos + 1:
        raise state.error(f"ts.tile.{name}() takes {npos + 1} positional arguments; pass "
                          f"{', '.join(allowed)} by keyword", node)
    if "mask" not in kw:
        raise state.error(f"ts.tile.{name}() needs mask=: a bool tile of the access's "
                          "shape (for an unmasked access, index the memory directly)", node)
    return kw  # type: ignore[return-value]


def _mask(state: CompileState, name: str, m: ast.expr, shape: tuple[int, ...]) -> Value:
    v = expr(state, m)
    if is_mem(v) or not is_value(v):
        raise state.error(f"the mask of ts.tile.{name}() must be a bool tile, got {v!r}", m,
                          hint="compare indices with dims: (i + ts.tile.arange(64)) < N")
    t = v.type
    assert isinstance(t, TensorType)
    if kind_of(t.element) != "bool":
        raise state.error(f"the mask of ts.tile.{name}() must be bool, got {t}", m,
                          hint="compare indices with dims: (i + ts.tile.arange(64)) < N")
    _fits(state, name, "mask", t.shape, shape, m)
    return state.broadcast(state.cast(v, BOOL, m), shape, m)


def _fits(state: CompileState, name: str, what: str, got: tuple[int, ...],
          shape: tuple[int, ...], node: ast.AST) -> None:
    try:
        ok = np.broadcast_shapes(got, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise state.error(f"the {what} of ts.tile.{name}() has shape {got}, which does not "
                          f"broadcast to the access's shape {shape}", node,
                          hint="use x[:, None] and x[None, :] to place 1-D index tiles")


@api_rule("load", raw=True)
def _load(state: CompileState, name: str, node: ast.Call) -> Value:
    """``load(ref, mask=m, other=0.0)``: ``ref`` where ``m``, else ``other``."""
    kw = _keywords(state, name, node, ("mask", "other"), 0)
    mt, operands, sizes, squeeze = _reference(state, name, node)
    shape = tuple(s for a, s in enumerate(sizes) if a not in squeeze)
    mask = _mask(state, name, kw["mask"], shape)
    onode = kw.get("other")
    other_x: Any = expr(state, onode) if onode is not None else 0
    other = state.as_tile(other_x, onode or node, mt.element)
    ot = other.type
    assert isinstance(ot, TensorType)
    if ot.rank:
        raise state.error(f"other= of ts.tile.load() must be a scalar, got a {ot.shape} "
                          "tile", onode or node)
    other = state.cast(other, mt.element, onode or node)
    return state.emit1(tile_memory.MaskedLoad(sizes, squeeze), [*operands, mask, other], node)


@api_rule("store", raw=True)
def _store(state: CompileState, name: str, node: ast.Call) -> None:
    """``store(ref, value, mask=m)``: write ``value`` where ``m``."""
    kw = _keywords(state, name, node, ("value", "mask"), 1)
    vnode = node.args[1] if len(node.args) > 1 else kw.get("value")
    if vnode is None:
        raise state.error("ts.tile.store(ref, value, mask=) needs the value to store", node)
    mt, operands, sizes, squeeze = _reference(state, name, node)
    shape = tuple(s for a, s in enumerate(sizes) if a not in squeeze)
    value = state.as_tile(expr(state, vnode), vnode, mt.element)
    vt = value.type
    assert isinstance(vt, TensorType)
    _fits(state, name, "value", vt.shape, shape, vnode)
    value = state.broadcast(value, shape, vnode)
    mask = _mask(state, name, kw["mask"], shape)
    state.emit(tile_memory.MaskedStore(sizes, squeeze), [*operands, value, mask], node)


@api_rule("arange", params=("n",))
def _arange(state: CompileState, node: ast.AST, n: Any) -> Value:
    """``arange(n)``: the int tile ``[0, 1, ..., n-1]`` (``n`` a compile-time int)."""
    if is_value(n) or not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise state.error(f"ts.tile.arange(n) needs a constant int n >= 0, got {n!r}", node,
                          hint="use a constant or a tile name (BM, ctx.BLOCK_M)")
    return state.emit1(tile_ir.Arange(n), [], node)


__all__: list[str] = []
