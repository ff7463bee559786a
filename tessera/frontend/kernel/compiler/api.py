"""Lowering of the ``ts.tile.*`` ids, synchronisation and memory calls to Tile IR.

Argument rules: shapes (``zeros((BM, D))``, ``alloc_shared((64, 32), bf16)``), dtypes,
``swizzle``/``alignment``, ``width`` and ``cp_wait_group``'s count are compile-time
values; tiles and memory are kernel values (memory is loaded where a tile is needed).
``group_size()`` is a specialisation constant. The compute calls are in
:mod:`~tessera.frontend.kernel.compiler.api_compute`; each rule registers in
``API_RULES`` with its parameters.
"""

from __future__ import annotations

import ast
from typing import Any

from tessera.frontend.kernel.compiler import view
from tessera.frontend.kernel.compiler.rules import api_rule, expr
from tessera.frontend.kernel.compiler.scope import TileContext
from tessera.frontend.kernel.compiler.state import F32, CompileState, is_mem, is_value
from tessera.ir.core import Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.numerics import DType, Policy, PolicyClass, element

_SWIZZLES = {None: "none", "none": "none", "xor": "xor", "32B": "32B", "64B": "64B",
             "128B": "128B"}


def element_arg(state: CompileState, x: Any, node: ast.AST, default: Any = None) -> Any:
    """A dtype argument (``None``: ``default``, else f32) as an element or policy."""
    if x is None:
        x = default if default is not None else F32
    if isinstance(x, (DType, Policy, PolicyClass)):
        return x
    try:
        return element(x)
    except Exception:
        raise state.error(f"{x!r} is not a dtype", node, hint="use ts.f32, ts.bf16, ...") \
            from None


def shape_arg(state: CompileState, x: Any, node: ast.AST) -> tuple[int, ...]:
    """A shape argument: an int or a tuple of compile-time ints >= 0."""
    if isinstance(x, int) and not isinstance(x, bool):
        x = (x,)
    if not isinstance(x, (tuple, list)) or any(
            is_value(d) or not isinstance(d, int) or d < 0 for d in x):
        raise state.error(f"a tile shape must be a tuple of constant ints >= 0, got {x!r}",
                          node, hint="use constants, dims and tile names (BM, ctx.D)")
    return tuple(int(d) for d in x)


# -- ids, sync
@api_rule("linear_id")
def _linear_id(state: CompileState, node: ast.AST) -> Value:
    return state.emit1(tile_ir.LinearId(), [], node)


@api_rule("group_id")
def _group_id(state: CompileState, node: ast.AST) -> Value:
    return state.emit1(tile_ir.GroupId(), [], node)


@api_rule("local_id")
def _local_id(state: CompileState, node: ast.AST) -> Value:
    return state.emit1(tile_ir.LocalId(), [], node)


@api_rule("lane_id")
def _lane_id(state: CompileState, node: ast.AST) -> Value:
    return state.emit1(tile_ir.LaneId(state.spec.lanes), [], node)


@api_rule("group_size")
def _group_size(state: CompileState, node: ast.AST) -> int:
    return int(state.spec.group_size)


@api_rule("context")
def _context(state: CompileState, node: ast.AST) -> TileContext:
    return TileContext()


@api_rule("barrier")
def _barrier(state: CompileState, node: ast.AST) -> None:
    state.emit(tile_memory.Barrier(), [], node)


@api_rule("cp_commit_group")
def _cp_commit_group(state: CompileState, node: ast.AST) -> None:
    state.emit(tile_memory.CpCommitGroup(), [], node)


@api_rule("cp_wait_group", params=("n",), defaults={"n": 0})
def _cp_wait_group(state: CompileState, node: ast.AST, n: Any) -> None:
    if is_value(n) or not isinstance(n, int) or n < 0:
        raise state.error("cp_wait_group(n) needs a constant n >= 0", node)
    state.emit(tile_memory.CpWaitGroup(n), [], node)


# -- memory
@api_rule("alloc_shared", params=("shape", "dtype", "swizzle", "alignment"),
          defaults={"dtype": None, "swizzle": None, "alignment": 16})
def _alloc_shared(state: CompileState, node: ast.AST, shape: Any, dtype: Any, swizzle: Any,
                  alignment: Any) -> Value:
    if swizzle not in _SWIZZLES:
        raise state.error(f"unknown swizzle {swizzle!r}", node,
                          hint="use 'xor', '32B', '64B', '128B' or None")
    op = tile_memory.AllocShared(shape_arg(state, shape, node), element_arg(state, dtype, node),
                       _SWIZZLES[swizzle], int(alignment))
    return state.emit1(op, [], node)


@api_rule("alloc_register", params=("dtype", "shape"), defaults={"shape": ()})
def _alloc_register(state: CompileState, node: ast.AST, dtype: Any, shape: Any) -> Value:
    op = tile_memory.AllocRegister(element_arg(state, dtype, node), shape_arg(state, shape, node))
    return state.emit1(op, [], node)


@api_rule("cp_async", params=("dst", "src"))
def _cp_async(state: CompileState, node: ast.AST, dst: Any, src: Any) -> None:
    if not is_mem(dst) or not is_mem(src):
        raise state.error("cp_async(dst, src) copies memory: dst a shared buffer (or a "
                          "view of one), src a view of a global tensor", node)
    state.emit(tile_memory.CpAsync(), [dst, src], node)


@api_rule("load_vector", "store_vector", raw=True)
def _vector(state: CompileState, name: str, node: ast.Call) -> Any:
    """load_vector(ref, width=) / store_vector(ref, tile): ``ref`` names the start."""
    if not node.args:
        raise state.error(f"ts.tile.{name}() needs the memory to access", node)
    kw = {k.arg: k.value for k in node.keywords}
    if name == "load_vector":
        wnode = node.args[1] if len(node.args) > 1 else kw.get("width")
        width = expr(state, wnode) if wnode is not None else 4
        if is_value(width) or not isinstance(width, int):
            raise state.error("load_vector width must be a constant int", node)
        ref = view.vector_view(state, None, node.args[0], width)
        return state.emit1(tile_memory.LoadVector(width), [ref], node)
    vnode = node.args[1] if len(node.args) > 1 else kw.get("value")
    if vnode is None:
        raise state.error("store_vector(ref, tile) needs the tile to store", node)
    value = state.as_tile(expr(state, vnode), node)
    t = value.type
    assert isinstance(t, TensorType)
    if t.rank != 1:
        raise state.error(f"store_vector stores a 1-D tile, got {t}", node)
    ref = view.vector_view(state, None, node.args[0], t.shape[0])
    state.emit(tile_memory.StoreVector(), [ref, value], node)
    return None


__all__ = ["element_arg", "shape_arg"]
