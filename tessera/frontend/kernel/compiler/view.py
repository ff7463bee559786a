"""Subscripts: of memory (``A[i]``, ``A[m0:m0+64, k0:k0+32]``, ``Q[q:q+BM]``), of register
tiles (``l_i[:, None]``: new axes only) and of Python lists (a list of shared buffers
indexed by a kernel value becomes ``tile.select``; by a constant, the element).

An integer index selects (and drops) an axis; a slice ``lo:hi`` keeps it with size
``hi - lo``, which must be a compile-time constant: ``lo`` and ``hi`` may be runtime
values as long as their difference is not (``A[k:k+BK]``), found by an affine analysis
of the IR that computes them. Axes not indexed are kept whole; ``...`` stands for the
rest. Negative *constant* indices count from the end as in Python; runtime indices are
not wrapped: an index outside the tensor is an out-of-bounds report when the kernel
runs (Python's silent clamping of slices would hide bugs).
"""

from __future__ import annotations

import ast
from typing import Any

from tessera.frontend.kernel.compiler.rules import expr, expr_rule
from tessera.frontend.kernel.compiler.state import CompileState, is_mem, is_tile, is_value
from tessera.ir.core import Instr, Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType

Affine = tuple[dict[Any, int], int]
#: ops whose result is the same wherever they are emitted (compared by value)
_IDS = (tile_ir.GridCoord, tile_ir.LinearId, tile_ir.GroupId, tile_ir.LocalId)


def affine(x: Any) -> Affine:
    """``x`` as ``sum(coef * leaf) + const``; leaves are opaque IR values, or the id ops
    themselves (``tile_m`` emitted twice is the same leaf)."""
    if not is_value(x):
        return {}, int(x)
    instr = x.owner
    if isinstance(instr, Instr):
        op = instr.op
        if isinstance(op, tile_ir.Constant) and isinstance(op.value, int) and \
                not isinstance(op.value, bool):
            return {}, op.value
        if isinstance(op, (tile_compute.Add, tile_compute.Sub)):
            (va, ca), (vb, cb) = affine(instr.operands[0]), affine(instr.operands[1])
            sign = 1 if isinstance(op, tile_compute.Add) else -1
            out = dict(va)
            for v, c in vb.items():
                out[v] = out.get(v, 0) + sign * c
            return {v: c for v, c in out.items() if c}, ca + sign * cb
        if isinstance(op, tile_compute.Mul):
            (va, ca), (vb, cb) = affine(instr.operands[0]), affine(instr.operands[1])
            if not va:
                return {v: c * ca for v, c in vb.items()}, ca * cb
            if not vb:
                return {v: c * cb for v, c in va.items()}, ca * cb
        if isinstance(op, _IDS):
            return {op: 1}, 0
    return {x: 1}, 0


def _new_axes(index: ast.expr) -> bool:
    items = index.elts if isinstance(index, ast.Tuple) else [index]
    return any(isinstance(i, ast.Constant) and i.value is None for i in items)


@expr_rule(ast.Subscript)
def _subscript(state: CompileState, node: ast.Subscript) -> Any:
    value = expr(state, node.value)
    if is_mem(value) and _new_axes(node.slice):  # x[:, None] of a view: of its tile
        value = state.as_tile(value, node)
    if is_mem(value):
        return view(state, value, node.slice, node)
    if is_tile(value):
        return tile_index(state, value, node.slice, node)
    index = expr(state, node.slice)
    if is_value(index):
        if not isinstance(value, (list, tuple)) or not value or \
                not all(is_mem(v) for v in value):
            raise state.error("only a list of memories (shared buffers) can be indexed by "
                              "a kernel value", node, hint="index Python lists with "
                              "constants, or make the list hold buffers of one shape")
        return state.emit1(tile_memory.Select(), [state.as_index(index, node), *value], node)
    try:
        return value[index]
    except Exception as err:
        raise state.error(f"{err}", node) from None


def tile_index(state: CompileState, value: Value, index: ast.expr, node: ast.AST) -> Value:
    """``x[:, None]``-style indexing of a register tile (new axes only)."""
    items = index.elts if isinstance(index, ast.Tuple) else [index]
    t = value.type
    assert isinstance(t, TensorType)
    shape: list[int] = []
    axis = 0
    for k, item in enumerate(items):
        if isinstance(item, ast.Constant) and item.value is None:
            shape.append(1)
        elif isinstance(item, ast.Slice) and item.lower is None and item.upper is None \
                and item.step is None:
            if axis >= t.rank:
                raise state.error("too many indices for the tile", node)
            shape.append(t.shape[axis])
            axis += 1
        elif isinstance(item, ast.Constant) and item.value is Ellipsis:
            rest = sum(1 for i in items[k + 1:] if not (isinstance(i, ast.Constant) and
                                                        i.value is None))
            while axis < t.rank - rest:
                shape.append(t.shape[axis])
                axis += 1
        else:
            raise state.error("register tiles support only [:, None]-style indexing", node,
                              hint="index memory (a global tensor or shared buffer) "
                                   "instead, or use ts.tile ops")
    shape.extend(t.shape[axis:])
    return state.emit1(tile_compute.Reshape(tuple(shape)), [value], node)


def extent(state: CompileState, lo: Any, hi: Any, node: ast.AST) -> int:
    """``hi - lo`` as a compile-time int, or a compile error."""
    (va, ca), (vb, cb) = affine(lo), affine(hi)
    diff = dict(vb)
    for v, c in va.items():
        diff[v] = diff.get(v, 0) - c
    if any(diff.values()):
        raise state.error("the size of a slice must be a compile-time constant", node,
                          hint="write slices as A[i:i+64] (start plus a constant), or "
                               "use constants and tile names (BM, BN)")
    size = cb - ca
    if size < 0:
        raise state.error(f"a slice of size {size} is negative", node)
    return size


def view(state: CompileState, mem: Value, index: ast.expr, node: ast.AST, width: int = 0) -> Value:
    """The view ``mem[index]``; ``width`` > 0 makes the last axis a vector of that many
    elements starting at its index (``load_vector`` / ``store_vector``)."""
    operands, sizes, squeeze = window(state, mem, index, node, width)
    return state.emit1(tile_memory.View(sizes, squeeze), operands, node)


def window(state: CompileState, mem: Value, index: ast.expr, node: ast.AST,
           width: int = 0) -> tuple[list[Value], tuple[int, ...], tuple[int, ...]]:
    """The operands (memory, then one start per axis), sizes and squeezed axes of
    ``mem[index]``, without emitting the view (masked accesses take them directly)."""
    mt = mem.type
    assert isinstance(mt, MemRefType)
    items = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    if any(isinstance(i, ast.Constant) and i.value is Ellipsis for i in items):
        k = next(n for n, i in enumerate(items)
                 if isinstance(i, ast.Constant) and i.value is Ellipsis)
        fill = mt.rank - (len(items) - 1)
        items = items[:k] + [ast.Slice()] * fill + items[k + 1:]
    if len(items) > mt.rank:
        raise state.error(f"{len(items)} indices for a rank-{mt.rank} memory {mt}", node,
                          hint="a batch dimension is not indexed: the body sees the "
                               "tensor without it")
    starts: list[Any] = []
    sizes: list[int] = []
    squeeze: list[int] = []
    for d, dim in enumerate(mt.shape):
        if d >= len(items):
            starts.append(0)
            sizes.append(dim)
            continue
        item = items[d]
        if isinstance(item, ast.Slice):
            if item.step is not None:
                step = expr(state, item.step)
                if is_value(step) or step != 1:
                    raise state.error("memory slices take no step (or step 1)", node)
            lo = expr(state, item.lower) if item.lower is not None else 0
            hi = expr(state, item.upper) if item.upper is not None else dim
            lo = lo + dim if not is_value(lo) and lo < 0 else lo
            hi = hi + dim if not is_value(hi) and hi < 0 else hi
            starts.append(lo)
            sizes.append(extent(state, lo, hi, item))
        elif isinstance(item, ast.Constant) and item.value is None:
            raise state.error("memory cannot get new axes (None); load it first", node)
        else:
            i = expr(state, item)
            if isinstance(i, slice):
                raise state.error("slice objects are not supported; write lo:hi", node)
            i = i + dim if not is_value(i) and isinstance(i, int) and i < 0 else i
            starts.append(i)
            sizes.append(1)
            squeeze.append(d)
    if width:
        last = mt.rank - 1
        if last in squeeze:
            squeeze.remove(last)
        sizes[last] = width
        for d in range(mt.rank - 1):
            if d not in squeeze and sizes[d] != 1:
                raise state.error("a vector access needs one row: index every axis but "
                                  "the last", node)
            if d not in squeeze:
                squeeze.append(d)
        squeeze.sort()
    operands = [mem] + [state.as_index(s, node) for s in starts]
    return operands, tuple(sizes), tuple(squeeze)


def vector_view(state: CompileState, ref: Any, node: ast.expr, width: int) -> Value:
    """The vector of ``width`` elements an argument of load_vector/store_vector names."""
    if isinstance(node, ast.Subscript):
        mem = expr(state, node.value)
        if is_mem(mem):
            return view(state, mem, node.slice, node, width)
    if not is_mem(ref):
        raise state.error("load_vector/store_vector need memory (a view such as "
                          "src[row] or smem[i])", node)
    mt = ref.type
    starts = [0] * mt.rank
    sizes = [1] * (mt.rank - 1) + [width]
    operands = [ref] + [state.as_index(s, node) for s in starts]
    return state.emit1(tile_memory.View(tuple(sizes), tuple(range(mt.rank - 1))), operands, node)


__all__ = ["Affine", "affine", "extent", "tile_index", "vector_view", "view", "window"]
