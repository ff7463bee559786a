"""Checks of a kernel launch's arguments and size, made before anything runs.

* **Runtime scalars** (parameters annotated with a format, ``alpha: ts.f32``) take one
  real number: a Python or NumPy bool, int or float, a 0-d array, or a complex number
  whose imaginary part is 0. Anything else is an :class:`ArgumentError`; a number the
  format cannot hold is a :class:`DTypeError` (a nonzero imaginary part, a fraction or
  an out-of-range value for an integer format, a finite value that would round to
  infinity or saturate in a float format). Values are rounded like arrays are
  (:func:`tessera.numerics.convert`).
* **Launch size**: CUDA's limits (grid axes at most ``2**31 - 1 x 65535 x 65535``
  groups; a group is one block, at most 1024 threads, so at most 1024 tiles), and
  the simulator's budget of :data:`MAX_PROGRAMS` programs (tiles, over every batch
  index) per launch, checked from the sizes alone before anything is allocated.
* **Written arrays** must be writable: a kernel that writes a read-only array (or one
  converted for the launch, whose result is copied back into it) is refused before
  it runs.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from tessera.errors import ArgumentError, DTypeError
from tessera.numerics import DType, convert, storage_of

#: CUDA's grid limits per axis (x, y, z) and threads per block
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_GROUP_SIZE = 1024
#: programs (tiles, every batch index counted) the CPU simulator runs in one launch:
#: it keeps per-program coordinates and values for all of them at once
MAX_PROGRAMS = 1 << 24

_REAL = (bool, int, float, np.bool_, np.integer, np.floating)
INF = math.inf
#: per format (by id): the format, and its storage dtype and overflow threshold where a
#: NumPy cast converts to it (see _native)
_NATIVE: dict[int, tuple[Any, tuple[np.dtype, float] | None]] = {}
#: per storage dtype: the magnitude from which a finite value rounds past the largest
#: finite one (half an ulp above it), so it would become inf or saturate
_OVERFLOW: dict[np.dtype, float] = {}


def _overflow(sd: np.dtype) -> float:
    limit = _OVERFLOW.get(sd)
    if limit is None:
        fi = ml_dtypes.finfo(sd)
        limit = _OVERFLOW[sd] = float(fi.max) + 2.0 ** (fi.maxexp - 2 - fi.nmant)
    return limit


def _native(elem: Any) -> tuple[np.dtype, float] | None:
    """The storage dtype of ``elem`` and its overflow threshold when a NumPy cast is its
    conversion (f32 or f64, round to nearest even: no stochastic rounding), else None."""
    found = _NATIVE.get(id(elem))
    if found is None or found[0] is not elem:
        sd = storage_of(elem).np_dtype
        plain = isinstance(elem, DType) or not getattr(elem, "stochastic_round", False)
        cast = (sd, _overflow(sd)) if plain and sd in (np.float32, np.float64) else None
        found = _NATIVE[id(elem)] = (elem, cast)  # holding elem keeps its id unique
    return found[1]


def scalar_value(name: str, value: Any, elem: Any) -> np.ndarray:
    """The 0-d storage array a runtime scalar parameter ``name`` of format ``elem`` gets
    for ``value`` (see the module doc for what is refused)."""
    if type(value) is float:  # the common case, in a few hundred nanoseconds
        native = _native(elem)
        if native is not None and (abs(value) < native[1] or value != value or
                                   abs(value) == INF):
            return np.asarray(value, native[0])
    target = storage_of(elem)
    sd = target.np_dtype
    v = value.array if hasattr(value, "array") and not isinstance(value, np.ndarray) \
        else value
    if isinstance(v, np.ndarray):
        if v.ndim != 0:
            raise ArgumentError(f"kernel scalar '{name}' ({target}) got an array of shape "
                                f"{v.shape}", hint="pass one number, or annotate the "
                                "parameter as a ts.Tensor[...] to pass an array")
        v = v[()]
    if target.kind == "complex" and isinstance(v, (complex, np.complexfloating, *_REAL)):
        return np.asarray(v).astype(sd)
    if isinstance(v, (complex, np.complexfloating)):
        if v.imag != 0:
            raise DTypeError(f"kernel scalar '{name}' is {target} but got the complex "
                             f"number {v!r}: its imaginary part would be dropped",
                             hint="pass a real number (x.real, abs(x)), or annotate the "
                                  "parameter with a complex format")
        v = v.real
    if isinstance(v, np.generic) and not isinstance(v, _REAL) and \
            np.asarray(v).dtype.kind == "V":
        v = float(v)  # an ml_dtypes scalar (bfloat16, float8_*): its exact value
    if not isinstance(v, _REAL):
        raise ArgumentError(f"kernel scalar '{name}' ({target}) got {type(v).__name__} "
                            f"{v!r}", hint="pass a number (strings are not converted: "
                                           "write float(s) yourself)")
    if target.kind == "bool":
        if not isinstance(v, (bool, np.bool_)):
            raise DTypeError(f"kernel scalar '{name}' is bool but got {v!r}",
                             hint="pass True or False (compare explicitly: x != 0)")
        return np.asarray(bool(v))
    if target.kind == "int":
        if not isinstance(v, (bool, int, np.bool_, np.integer)) and \
                not float(v).is_integer():
            raise DTypeError(f"kernel scalar '{name}' is {target} but got {v!r}, which is "
                             "not a whole number", hint="round it yourself (int(), round())")
        info = np.iinfo(sd)
        if not info.min <= int(v) <= info.max:
            raise DTypeError(f"kernel scalar '{name}' is {target}: {int(v)} is outside "
                             f"[{info.min}, {info.max}]", hint="use a wider integer format")
        return np.asarray(int(v), sd)
    try:
        size = abs(float(v))
    except OverflowError:  # an int beyond float64
        size = math.inf
    if size >= _overflow(sd) and (size != math.inf or not isinstance(v, (float, np.floating))):
        raise DTypeError(f"kernel scalar '{name}' is {target}: {v!r} is beyond its largest "
                         f"finite value {float(ml_dtypes.finfo(sd).max)!r}",
                         hint="scale the value, or use a wider format")
    native = _native(elem)
    if native is not None:
        return np.asarray(v, native[0])  # one hardware RNE rounding, as convert() does
    return convert(np.asarray(v), elem)


def check_size(name: str, grid: tuple[int, ...], group_size: int, batch: int) -> None:
    """Refuse launches over CUDA's grid and block limits or the simulator's budget."""
    for axis, (n, limit) in enumerate(zip(grid, MAX_GRID)):
        if n > limit:
            raise ArgumentError(f"grid {grid} of kernel '{name}': axis {axis} has {n} "
                                f"groups; CUDA allows at most {limit} along axis {axis}",
                                hint=f"use at most {MAX_GRID} groups per axis (move work "
                                     "to another axis, or give each group more of it)")
    if group_size > MAX_GROUP_SIZE:
        raise ArgumentError(f"group_size {group_size} of kernel '{name}': a group runs as "
                            f"one CUDA block, at most {MAX_GROUP_SIZE} threads",
                            hint=f"use group_size <= {MAX_GROUP_SIZE} and more groups")
    programs = batch * math.prod(grid) * group_size
    if programs > MAX_PROGRAMS:
        raise ArgumentError(f"kernel '{name}' would run {programs:,} programs (batch "
                            f"{batch} x grid {grid} x group_size {group_size}); the CPU "
                            f"simulator runs at most {MAX_PROGRAMS:,} per launch",
                            hint="give each tile a block of elements instead of one "
                                 "(fewer, larger tiles), or split the work into launches")


def check_writable(kernel: str, names: tuple[str, ...], runtime: list[Any],
                   writeback: list[tuple[np.ndarray, np.ndarray]],
                   written: frozenset[int]) -> None:
    """Refuse a launch whose kernel writes a read-only array that was converted to its
    storage dtype (``writeback``: the caller's array and the copy the launch writes;
    ``written`` indexes ``runtime``, named by ``names``). The launcher checks the arrays
    it writes itself; only here is the caller's original still known."""
    for k in written:
        user = next((orig for orig, conv in writeback if conv is runtime[k]), None)
        if user is not None and not user.flags.writeable:
            raise ArgumentError(f"kernel '{kernel}' writes its argument '{names[k]}' "
                                f"(converted from {user.dtype} for the launch and copied "
                                "back after it), but the array is read-only",
                                hint=f"pass a writable array (np.array({names[k]}) is a "
                                     "writable copy)")


def check_converted_overlap(kernel: str, names: tuple[str, ...], runtime: list[Any],
                            params: dict[str, Any], written: frozenset[int]) -> None:
    """Refuse overlapping array arguments when one of them is converted to its storage
    dtype and one of them is written: the conversion makes a separate copy, so the
    kernel would no longer see one memory through two names (as a GPU would)."""
    users: list[np.ndarray | None] = []
    converted = []
    for name, arr in zip(names, runtime):
        value = params.get(name)
        if value is not arr:  # a converted copy or a Tensor's array (rare): look closer
            value = getattr(value, "array", value)
            if isinstance(value, np.ndarray) and isinstance(arr, np.ndarray) \
                    and value is not arr:
                converted.append(len(users))
        users.append(value if isinstance(value, np.ndarray) else None)
    if not converted:
        return
    for k in converted:
        for j, other in enumerate(users):
            if j == k or other is None or (k not in written and j not in written):
                continue
            if np.may_share_memory(users[k], other) and np.shares_memory(users[k], other):
                raise ArgumentError(
                    f"kernel '{kernel}': arguments '{names[k]}' and '{names[j]}' share "
                    f"memory, and '{names[k]}' ({users[k].dtype}) is converted to a "
                    "separate copy for the launch, so the kernel would not see one "
                    "memory through both", hint="pass the overlapping arrays in the "
                    "parameters' storage dtype (or pass separate arrays)")


__all__ = ["MAX_GRID", "MAX_GROUP_SIZE", "MAX_PROGRAMS", "check_converted_overlap",
           "check_size", "check_writable", "scalar_value"]
