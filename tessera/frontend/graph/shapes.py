"""Shape operators: transpose, reshape, indexing; and the check of a tile-shape hint."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, ShapeError, UnsupportedError, user_api
from tessera.frontend.graph.ops import Operand, bind, operand
from tessera.ir.dialects import graph as graph_ir


def tile_shape_hint(tile_shape: Any, what: str = "matmul") -> tuple[int, ...] | None:
    """``tile_shape=(BM, BN)`` or ``(BM, BN, BK)`` checked: a tuple or list of 2 or 3
    positive ints (NumPy ints too, not bools); None means no hint."""
    if tile_shape is None:
        return None
    items = tuple(tile_shape) if isinstance(tile_shape, (tuple, list)) else None
    ok = items is not None and len(items) in (2, 3) and all(
        isinstance(t, (int, np.integer)) and not isinstance(t, (bool, np.bool_)) and t > 0
        for t in items)
    if not ok:
        raise ArgumentError(f"{what}: tile_shape={tile_shape!r} is not a tile shape",
                            hint="give 2 or 3 positive ints, e.g. tile_shape=(128, 128, 32) "
                                 "for (BM, BN, BK)")
    return tuple(int(t) for t in items)  # type: ignore[union-attr]


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _ints(value: Any, what: str, hint: str) -> tuple[int, ...]:
    """An int or a sequence of ints (NumPy ints too, never bools) as a tuple of ints."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]  # a 0-d array stands for its scalar
    if _is_int(value):
        return (int(value),)
    items = tuple(value) if isinstance(value, (tuple, list, np.ndarray)) else None
    if items is None or not all(_is_int(v) for v in items):
        raise ArgumentError(f"{what} {value!r} is not an int or a sequence of ints",
                            hint=hint)
    return tuple(int(v) for v in items)


@user_api
def transpose(x: Any, axes: Any = None) -> Any:
    """Permute axes (reverse them by default, as ``.T`` does)."""
    x = operand(x)
    if axes is None:
        perm = tuple(reversed(range(x.ndim)))
    else:
        hint = f"give a permutation of the {x.ndim} axes, e.g. {tuple(reversed(range(x.ndim)))}"
        given = _ints(axes, "transpose axes", hint)
        for a in given:
            if not -x.ndim <= a < x.ndim:
                raise ShapeError(f"transpose axis {a} is out of range for a tensor of rank "
                                 f"{x.ndim}", hint=hint)
        perm = tuple(a % x.ndim for a in given)
        if sorted(perm) != list(range(x.ndim)):
            raise ShapeError(f"transpose axes {axes} are not a permutation of {x.ndim} axes",
                             hint=hint)
    if perm == tuple(range(x.ndim)):
        return x
    return bind(graph_ir.Transpose(perm), x)[0]


@user_api
def reshape(x: Any, shape: Any) -> Any:
    """Reshape (row-major); one dim may be -1."""
    x = operand(x)
    shape = _ints(shape, "reshape to", "give the new shape as ints, e.g. (2, -1)")
    if any(d < -1 for d in shape):
        raise ShapeError(f"reshape to {shape}: dims are sizes >= 0, or -1 for one inferred dim")
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape to {shape}: at most one dim may be -1")
    if -1 in shape:
        known = 1
        for d in shape:
            known *= d if d != -1 else 1
        if known == 0 or x.size % known:
            raise ShapeError(f"cannot reshape {x.shape} into {shape}")
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if math.prod(shape) != x.size:
        raise ShapeError(f"cannot reshape {tuple(x.shape)} ({x.size} elements) into {shape}",
                         hint="the new shape must hold the same number of elements")
    if shape == tuple(x.shape):
        return x
    return bind(graph_ir.Reshape(shape), x)[0]


def getitem(x: Operand, index: Any) -> Any:
    """Basic indexing: ints, slices with positive steps, ``None`` and ``...``."""
    index = index if isinstance(index, tuple) else (index,)
    if any(not isinstance(i, (int, slice)) and i is not None and i is not Ellipsis
           for i in index):
        raise UnsupportedError(f"indexing with {index!r} is not supported in graph code",
                               hint="use ints, slices, None and ... (basic indexing)")
    if index.count(Ellipsis) > 1:
        raise ShapeError("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise ShapeError(f"too many indices ({used}) for a tensor of rank {x.ndim}")
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (x.ndim - used) + index[k + 1:]
    else:
        index = index + (slice(None),) * (x.ndim - used)
    starts, stops, steps, out_shape = [], [], [], []
    axis = 0
    for i in index:
        if i is None:
            out_shape.append(1)
            continue
        dim = int(x.shape[axis])
        if isinstance(i, int):
            if not -dim <= i < dim:
                raise ShapeError(f"index {i} is out of bounds for axis {axis} of size {dim}")
            lo = i % dim
            starts.append(lo)
            stops.append(lo + 1)
            steps.append(1)
        else:
            lo, hi, st = i.indices(dim)
            if st <= 0:
                raise UnsupportedError("negative slice steps are not supported",
                                       hint="slice forwards and use a reversed index map")
            hi = max(hi, lo)
            starts.append(lo)
            stops.append(hi)
            steps.append(st)
            out_shape.append(len(range(lo, hi, st)))
        axis += 1
    y = x
    if (tuple(starts), tuple(stops)) != ((0,) * x.ndim, tuple(x.shape)) or any(
            s != 1 for s in steps):
        y = bind(graph_ir.Slice(tuple(starts), tuple(stops), tuple(steps)), x)[0]
    from tessera.frontend.graph.ops import reshape as _reshape

    return _reshape(y, tuple(out_shape))
