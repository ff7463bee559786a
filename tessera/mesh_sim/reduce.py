"""The order-pinned reduction every collective uses.

``reduce_in_order(arrays, element)`` combines the arrays left to right, in the order
given (rank order), in the element's accumulation format (``numerics.accum_of``: f32 for
f32, bf16, f16 and the fp8 family, f64 for f64), and rounds once to the storage format at
the end. For f32 the sum is therefore bit for bit ``functools.reduce(np.add, arrays)``.

The loop runs chunk by chunk (about 1 MiB of accumulator at a time) and, inside a chunk,
device by device: every element still sees the same additions in the same order, so the
bits do not change, but the accumulator chunk stays in cache while all the summands
stream past it. With 72 summands of 64 MB this is about twice as fast as adding whole
arrays one after another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import ml_dtypes
import numpy as np

from tessera.errors import DTypeError, MeshShapeError, TesseraError, user_api
from tessera.mesh_checks import as_tuple
from tessera.numerics import accum_of, convert, storage_of

ReduceOp = Literal["sum", "mean", "max", "min"]
"""The reductions a collective can apply."""

REDUCE_OPS: dict[str, np.ufunc] = {"sum": np.add, "mean": np.add, "max": np.maximum,
                                   "min": np.minimum}

#: Bytes of accumulator processed per chunk: small enough to stay in a core's L2 cache.
CHUNK_BYTES = 1 << 20


def _arrays(arrays: Any) -> list[np.ndarray]:
    """The operands of a reduction: a sequence of numeric NumPy arrays."""
    items = as_tuple(arrays, "the operands", MeshShapeError, "pass a list of arrays, one "
                     "per device in rank order")
    # A NumPy scalar (a 0-d block indexed with ()) counts as its 0-d array.
    arrays = [np.asarray(a) if isinstance(a, np.generic) else a for a in items]
    if not all(isinstance(a, np.ndarray) and a.dtype.kind in "biufcV" for a in arrays):
        raise MeshShapeError("reduce_in_order takes a list of numeric NumPy arrays",
                             hint="pass a list of arrays, one per device in rank order")
    return arrays


def check_op(op: str) -> np.ufunc:
    """The ufunc of a reduction name (DTypeError for an unknown name)."""
    if not isinstance(op, str) or op not in REDUCE_OPS:
        raise DTypeError(f"unknown reduction op {op!r}",
                         hint=f"use one of {sorted(REDUCE_OPS)}")
    return REDUCE_OPS[op]


def _chunks(shape: tuple[int, ...], contiguous: bool, itemsize: int) -> list[Any]:
    """Index expressions that cover the (flattened, when contiguous) arrays in chunks."""
    if not shape:
        return [Ellipsis]  # a 0-d array: ``out[...]`` is a view, ``out[()]`` a scalar
    if contiguous:
        n = int(np.prod(shape, dtype=np.int64))
        step = max(1, CHUNK_BYTES // itemsize)
        return [slice(i, min(i + step, n)) for i in range(0, n, step)] or [slice(0, 0)]
    row = int(np.prod(shape[1:], dtype=np.int64)) * itemsize
    step = max(1, CHUNK_BYTES // max(row, 1))
    return [slice(i, min(i + step, shape[0])) for i in range(0, shape[0], step)] or \
        [slice(0, 0)]


def identity(element: Any, op: str) -> Any:
    """The value a device with nothing to reduce contributes to a max or min: below
    (above) every value of the storage format, so it never wins. -inf (+inf) where the
    format has infinities, else its lowest (highest) finite value; for ints the
    extreme of the type."""
    dt = storage_of(element).np_dtype
    sign = -1 if op == "max" else 1
    if np.dtype(dt).kind in "iub":
        info = np.iinfo(dt)
        return info.min if op == "max" else info.max
    if np.isinf(np.asarray(sign * np.inf).astype(dt)):
        return sign * np.inf
    info = ml_dtypes.finfo(dt)  # knows the ml_dtypes formats (fp8, fp6, fp4) too
    return float(info.min if op == "max" else info.max)


def _settle_extreme(out: np.ndarray, arrays: Sequence[np.ndarray], is_max: bool) -> None:
    """Make a rank-order max/min independent of the order, as the Graph IR
    interpreter's ``graph.max``/``graph.min`` are: +0 is above -0 (``np.maximum``
    returns its first operand for equal zeros), and NaN is the default quiet NaN."""
    zero = out == 0
    if zero.any():
        found = np.zeros(out.shape, bool)
        for a in arrays:
            a = a.astype(out.dtype, copy=False)  # signbit knows no ml_dtypes formats
            found |= (a == 0) & (np.signbit(a) != is_max)
        negative = zero & (~found if is_max else found)
        out[zero] = 0.0
        out[negative] = -0.0
    nan = np.isnan(out)
    if nan.any():
        out[nan] = np.nan


@user_api
def reduce_in_order(arrays: Sequence[np.ndarray], element: Any, op: str = "sum", *,
                    counter_offset: int = 0) -> np.ndarray:
    """Reduce ``arrays`` left to right in the accumulation format, rounding once.

    ``element`` is the element type of the operands (a DType, Policy or string); the
    result is in its storage format. ``op`` is ``"sum"``, ``"mean"`` (the rank-order sum
    divided by the count in the accumulation format, then rounded), ``"max"`` or
    ``"min"`` (in which +0 is above -0 and a NaN result is the default NaN, as in the
    interpreter's ``graph.max``). ``counter_offset`` feeds stochastic rounding when
    the policy asks for it.
    The result is a new array, except that a single operand is returned as it is.
    """
    ufunc = check_op(op)
    arrays = _arrays(arrays)
    if not arrays:
        raise MeshShapeError("nothing to reduce", hint="pass at least one array")
    try:
        storage_of(element)
    except TesseraError:
        raise
    except Exception:
        raise DTypeError(f"{element!r} is not an element type",
                         hint='name a format: "f32", ts.bf16, "bf16 @accum(f32)"') from None
    shape = arrays[0].shape
    for k, a in enumerate(arrays):
        if a.shape != shape:
            raise MeshShapeError(f"operand {k} of the reduction has shape {a.shape}, "
                                 f"operand 0 has {shape}",
                                 hint="every device must contribute an array of one shape")
    storage = storage_of(element)
    acc_dt = accum_of(element)
    if op == "mean" and acc_dt.kind not in ("float", "complex"):
        raise DTypeError(f"mean of {storage} values is not defined in {acc_dt}",
                         hint="reduce with op='sum' and divide in a float format")
    if len(arrays) == 1:
        return arrays[0]
    out = np.empty(shape, acc_dt.np_dtype)
    contiguous = all(a.flags.c_contiguous for a in arrays)
    flat = [a.reshape(-1) for a in arrays] if contiguous and shape else list(arrays)
    dest = out.reshape(-1) if contiguous and shape else out
    for c in _chunks(shape, contiguous, out.itemsize):
        acc = dest[c]
        np.copyto(acc, flat[0][c])
        for a in flat[1:]:
            ufunc(acc, a[c], out=acc)
    if op == "mean":
        np.divide(out, len(arrays), out=out)
    if op in ("max", "min") and out.dtype.kind == "f":
        _settle_extreme(out, arrays, op == "max")
    if out.dtype == storage.np_dtype and storage.name != "tf32":
        return out
    return convert(out, element, counter_offset=counter_offset)


__all__ = ["CHUNK_BYTES", "REDUCE_OPS", "ReduceOp", "check_op", "identity",
           "reduce_in_order"]
