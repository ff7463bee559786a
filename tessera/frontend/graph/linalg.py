"""Contractions, reductions, normalisations and spectral operators."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, DTypeError, ShapeError
from tessera.frontend.graph.ops import (
    bind,
    broadcast_shapes,
    broadcast_to,
    cast,
    operand,
    promote_operands,
    reshape,
)
from tessera.frontend.graph.shapes import tile_shape_hint
from tessera.ir.dialects import graph as graph_ir
from tessera.numerics import storage_of


def matmul(a: Any, b: Any, tile_shape: Sequence[int] | None = None) -> Any:
    """Matrix product over the last two axes (1-D operands as in NumPy).

    The product is accumulated exactly and rounded once to the accumulator format of
    the operands' policy. ``tile_shape=(BM, BN, BK)`` is kept as a schedule hint.
    """
    a, b = operand(a), operand(b)
    for x in (a, b):
        if storage_of(x.type.element).kind not in ("float", "int", "complex"):
            raise DTypeError(f"matmul of {x.type.element} tensors is not defined")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul needs operands of rank >= 1", hint="use * for scalars")
    squeeze = []
    if a.ndim == 1:
        a = reshape(a, (1, a.shape[0]))
        squeeze.append(-2)
    if b.ndim == 1:
        b = reshape(b, (b.shape[0], 1))
        squeeze.append(-1)
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul of {tuple(a.shape)} and {tuple(b.shape)}: inner dims "
                         f"{a.shape[-1]} and {b.shape[-2]} differ",
                         hint="the last dim of A must equal the second-to-last dim of B")
    batch = broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])) \
        if a.ndim > 2 or b.ndim > 2 else ()
    a = broadcast_to(a, batch + tuple(a.shape[-2:]))
    b = broadcast_to(b, batch + tuple(b.shape[-2:]))
    hint = tile_shape_hint(tile_shape)  # 2 or 3 positive ints, else ArgumentError
    y = bind(graph_ir.MatMul(hint), a, b)[0]
    if squeeze:
        shape = list(y.shape)
        for axis in sorted(squeeze):
            shape.pop(axis + len(shape) if axis < 0 else axis)
        y = reshape(y, tuple(shape))
    return y


gemm = matmul


def axis_index(a: Any, rank: int, what: str) -> int:
    """One axis of a rank-``rank`` tensor as a non-negative int, as NumPy checks it:
    an int (not a bool) in ``-rank .. rank-1``."""
    if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
        raise ArgumentError(f"{what}: axis {a!r} is not an integer",
                            hint="pass an int axis (negative ones count from the end), a "
                                 "tuple of them, or None for all axes")
    if not -rank <= a < rank:
        raise ShapeError(f"{what}: axis {a} is out of range for a tensor of rank {rank}",
                         hint=f"use an axis between {-rank} and {rank - 1}" if rank else
                         "a 0-d tensor has no axes: pass axis=None")
    return int(a) % rank


def reduction_axes(x: Any, axis: Any, what: str) -> tuple[int, ...] | None:
    """The sorted axes ``axis`` names (None: all of them), each checked once."""
    if axis is None:
        return None
    items = list(axis) if isinstance(axis, (tuple, list)) else [axis]
    seen: dict[int, Any] = {}
    for a in items:
        k = axis_index(a, x.ndim, what)
        if k in seen:
            raise ShapeError(f"{what}: axis {k} is named twice (as {seen[k]!r} and {a!r})",
                             hint="name each axis once")
        seen[k] = a
    return tuple(sorted(seen))


_EXTREME = {graph_ir.Max: "maximum", graph_ir.Min: "minimum"}


def _reduce(op_cls: type[graph_ir.Reduce], x: Any, axis: Any, keepdims: bool) -> Any:
    x = operand(x)
    what = f"ts.{op_cls.name.split('.')[1]}"
    if not isinstance(keepdims, (bool, np.bool_, int, np.integer)):
        raise ArgumentError(f"{what}: keepdims={keepdims!r} is not a bool",
                            hint="pass keepdims=True or keepdims=False")
    axes = reduction_axes(x, axis, what)
    if storage_of(x.type.element).kind == "bool":
        x = cast(x, "int32")
    if axes == ():
        return x  # NumPy's axis=(): a reduction over no axis leaves every element alone
    reduced = axes if axes is not None else tuple(range(x.ndim))
    empty = [a for a in reduced if x.shape[a] == 0]
    if empty and op_cls in (graph_ir.Max, graph_ir.Min):
        raise ShapeError(f"{what} over axis {empty[0]} of a {tuple(x.shape)} tensor: the "
                         f"axis is empty, and the {_EXTREME[op_cls]} of no values does not "
                         "exist",
                         hint="reduce only non-empty axes (check the shape first); "
                              "ts.sum and ts.mean accept empty axes (0 and NaN)")
    if empty and op_cls is graph_ir.Mean and storage_of(x.type.element).kind != "float" and \
            storage_of(x.type.element).kind != "complex":
        raise DTypeError(f"{what} over the empty axis {empty[0]} is NaN, which "
                         f"{storage_of(x.type.element)} cannot hold",
                         hint="cast to a float format first: ts.mean(ts.cast(x, 'f32'), ...)")
    return bind(op_cls(axes or (), bool(keepdims)), x)[0]


def sum(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Sum over ``axis`` (all axes by default): exact, rounded once."""
    return _reduce(graph_ir.Sum, x, axis, keepdims)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Mean over ``axis`` (all axes by default): exact, rounded once."""
    return _reduce(graph_ir.Mean, x, axis, keepdims)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Maximum over ``axis`` (all axes by default)."""
    return _reduce(graph_ir.Max, x, axis, keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Minimum over ``axis`` (all axes by default)."""
    return _reduce(graph_ir.Min, x, axis, keepdims)


def softmax(x: Any, axis: int = -1) -> Any:
    """Softmax along ``axis``."""
    x = operand(x)
    axis_index(axis, x.ndim, "ts.softmax")
    return bind(graph_ir.Softmax(int(axis)), x)[0]


def mse(pred: Any, target: Any) -> Any:
    """Mean squared error over all elements (a scalar)."""
    a, b = promote_operands(pred, target)
    return bind(graph_ir.Mse(), a, b)[0]


def _complex(x: Any) -> Any:
    x = operand(x)
    kind = storage_of(x.type.element).kind
    if kind == "complex":
        return x
    return cast(x, "c128" if storage_of(x.type.element).name == "f64" else "c64")


def fft(x: Any, axis: int = -1) -> Any:
    """Discrete Fourier transform along ``axis`` (unnormalised); real input is made complex."""
    x = _complex(x)
    axis_index(axis, x.ndim, "ts.fft")
    return bind(graph_ir.Fft(int(axis)), x)[0]


def ifft(x: Any, axis: int = -1) -> Any:
    """Inverse DFT along ``axis`` (scaled by 1/n)."""
    x = _complex(x)
    axis_index(axis, x.ndim, "ts.ifft")
    return bind(graph_ir.Ifft(int(axis)), x)[0]
