"""Numerics of tile values: storage, the *wide* accumulator form, rounding on the way out.

A tile value is held in its element's storage format (``float32`` for f32,
``ml_dtypes.bfloat16`` for bf16, ...), with one exception that makes ``mma``
accumulation independent of the tile shape: in exact mode an ``mma`` result is held
*wide*, as float64, and stays wide through the ops that only add, subtract, select or
move data (``+``, ``-``, unary ``-``, ``where``, ``causal_mask``, broadcast, reshape,
transpose, the accumulator operand of ``mma``). It is rounded once, to its element,
when it is stored (``C[...] = acc``, ``C[...] += acc``), cast, returned, or used by any
other op (``acc * alpha`` rounds ``acc`` to f32 first, then multiplies in f32).
Which values are wide is decided from the kernel's data flow
(:mod:`tessera.interp.tile.wide`): a variable of branches and loops that some path
makes wide is held wide on every path, so no tile's rounding depends on the tiles
that run with it.

Arithmetic on narrow values rounds every result to the element, as a GPU does:
f32, f64 and integers compute natively (``+ - * /`` and ``sqrt`` of float32 are
correctly rounded, so this equals computing in float64 and rounding once); 16-bit and
narrower floats compute in float32 and round once with round-to-nearest-even and the
format's saturation (double rounding is innocuous: 24 >= 2p + 2 for p <= 11).

An *exact* ``mma`` (``exact = true``) holds its result as an exact accumulator
(:mod:`tessera.numerics.reductions.accumulator`: the products' operands and exact start
values, unevaluated, or the reference's integer counts of ``2**-298``), carried through
exact ``mma`` accumulation and control flow; every other use rounds it once, to nearest
even, exactly as a wide value is rounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.numerics import Element, convert, storage_of
from tessera.numerics.reductions.accumulator import (
    EXACT,
    add_exact,
    negate_exact,
    round_exact,
    to_exact,
)

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class Num:
    """How values of one element are stored and computed."""

    element: Element
    sd: np.dtype  # storage dtype
    kind: str  # float, int, bool, complex
    native: bool  # arithmetic runs directly in the storage dtype

    @property
    def cd(self) -> np.dtype:
        """The dtype arithmetic runs in."""
        return self.sd if self.native else F32

    @property
    def can_be_wide(self) -> bool:
        return self.kind == "float" and self.sd != F64

    def is_wide(self, x: Any) -> bool:
        return self.can_be_wide and getattr(x, "dtype", None) == F64

    def narrow(self, x: Any) -> Any:
        """``x`` in the storage dtype (a wide value rounds once, here)."""
        dt = getattr(x, "dtype", None)
        if dt == self.sd:
            return x
        if self.sd == F32 and dt == F64:
            return x.astype(F32)
        if dt == EXACT:
            return round_exact(x, self.element)
        return convert(np.asarray(x), self.element)

    def compute(self, x: Any) -> Any:
        """A narrow operand in the compute dtype."""
        x = self.narrow(x)
        return x if self.native else widen(x, F32)

    def result(self, x: Any) -> Any:
        """A computed result rounded to the element."""
        if getattr(x, "dtype", None) == self.sd:
            return x
        if self.native and self.sd == F32:
            return np.asarray(x, dtype=F32) if not isinstance(x, np.ndarray) else x.astype(F32)
        return convert(np.asarray(x), self.element)


_CACHE: dict[Any, Num] = {}


def num(element: Element) -> Num:
    """The :class:`Num` of an element (cached)."""
    found = _CACHE.get(element)
    if found is None:
        s = storage_of(element)
        native = s.kind in ("int", "bool", "complex") or s.name in ("f32", "f64")
        found = Num(element, s.np_dtype, s.kind, native)
        _CACHE[element] = found
    return found


def to_storage(x: Any, element: Element) -> np.ndarray:
    """Any value (narrow or wide, any dtype) rounded once to ``element``'s storage."""
    n = num(element)
    dt = getattr(x, "dtype", None)
    if dt == n.sd:
        return x
    if n.sd == F32 and dt in (F64, np.dtype(np.float16)):
        return x.astype(F32)
    if dt == EXACT:
        return round_exact(x, element)
    return convert(np.asarray(x), element)


def for_copy(x: Any, element: Element) -> Any:
    """``x`` ready to be written into ``element``'s storage by NumPy's assignment: as it
    is when that assignment's cast is the element's rounding (a wide float64 value into
    float32: round to nearest even), else rounded by :func:`to_storage` (no temporary
    in the first case)."""
    if getattr(x, "dtype", None) == F64 and num(element).sd == F32:
        return x
    return to_storage(x, element)


def to_f64(x: Any) -> np.ndarray:
    """Widen exactly to float64 (every storage format widens exactly)."""
    return x if getattr(x, "dtype", None) == F64 else widen(np.asarray(x), F64)


#: (one-byte format, wider dtype) -> the wider value of each of the 256 bit patterns
_BYTE_TABLES: dict[tuple[np.dtype, np.dtype], np.ndarray] = {}


def widen(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``x.astype(dt)`` for a widening cast (a new array unless ``x`` has ``dt``). A
    one-byte format (fp8, fp6, fp4) looks its 256 bit patterns up in a table of their
    own casts, the same values about ten times faster than ml_dtypes' elementwise
    cast."""
    src = x.dtype
    if src.itemsize != 1 or src.kind in "iub":
        return x.astype(dt, copy=False)
    table = _BYTE_TABLES.get((src, dt))
    if table is None:
        with np.errstate(invalid="ignore"):
            table = np.arange(256, dtype=np.uint8).view(src).astype(dt)
        _BYTE_TABLES[src, dt] = table
    out = np.empty(x.shape, dt)
    np.take(table, x.view(np.uint8), out=out, mode="clip")  # (every index is in range)
    return out


UPDATE_FUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
                "floordiv": np.floor_divide, "mod": np.mod, "max": np.maximum,
                "min": np.minimum}


def combine(old: np.ndarray, value: Any, op: str, element: Element) -> np.ndarray:
    """``old <op> value`` rounded once to ``element`` (the read-modify-write of
    ``C[...] += x``); a wide value is combined in float64."""
    n = num(element)
    fn = UPDATE_FUNCS[op]
    if getattr(value, "dtype", None) == EXACT:
        if op in ("add", "sub") and n.kind == "float" and n.sd != F64:
            # an exact accumulator joins the stored value exactly and rounds once
            other = value if op == "add" else negate_exact(value)
            return round_exact(add_exact(to_exact(old), other), element)
        value = round_exact(value, element)
    if n.kind == "float" and (getattr(value, "dtype", None) == F64 or not n.native):
        wide = n.is_wide(value) or getattr(value, "dtype", None) == F64
        dt = F64 if wide else F32
        return to_storage(fn(old.astype(dt), np.asarray(value).astype(dt)), element)
    return to_storage(fn(old, n.narrow(value)), element)


__all__ = ["F32", "F64", "UPDATE_FUNCS", "Num", "combine", "for_copy", "num", "to_f64",
           "to_storage", "widen"]
