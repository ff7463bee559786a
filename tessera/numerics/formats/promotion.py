"""Type promotion for elementwise ops on two formats (a JAX-like lattice)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tessera.numerics.formats.dtypes import DType


def promote(a: Any, b: Any) -> DType:
    """The result format of an elementwise op on ``a`` and ``b`` (JAX-like lattice).

    =============================================  =====================================
    operands                                       result
    =============================================  =====================================
    the same format                                that format
    bool with anything                             the other
    int with int                                   the wider int
    int with float / complex                       the float / complex
    f64 with any float                             f64
    f32 with any float (tf32 included)             f32
    tf32 with a 16-bit or low-precision float      tf32 (it holds every such value)
    bf16 with f16                                  f32
    fp8/fp6/fp4 with bf16 or f16                   the 16-bit float
    e8m0 with f16                                  f32 (f16 cannot reach 2**127)
    two different fp8/fp6/fp4/e8m0 formats         bf16
    complex with complex                           the wider
    c64 with f64 (or int64)                        c128; otherwise complex wins
    =============================================  =====================================

    Every float result holds both operands' values exactly; int with float is the one
    lossy rule (as in JAX and NumPy).
    """
    from tessera.numerics.formats.dtypes import DTYPES, dtype  # formats imports this module

    a, b = dtype(a), dtype(b)
    if a == b:
        return a
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    if a.kind == "complex" or b.kind == "complex":
        wide = any(d.name in ("c128", "f64", "int64") for d in (a, b))
        return DTYPES["c128"] if wide else DTYPES["c64"]
    if a.kind == "int" and b.kind == "int":
        return a if a.bits >= b.bits else b
    if a.kind == "int":
        return b
    if b.kind == "int":
        return a
    return _promote_floats(a, b)


def _promote_floats(a: DType, b: DType) -> DType:
    from tessera.numerics.formats.dtypes import DTYPES

    names = {a.name, b.name}
    for wide in ("f64", "f32", "tf32"):
        if wide in names:
            return DTYPES[wide]
    if names == {"bf16", "f16"}:
        return DTYPES["f32"]
    if names == {"e8m0", "f16"}:
        return DTYPES["f32"]
    for half in ("bf16", "f16"):
        if half in names:
            return DTYPES[half]
    return DTYPES["bf16"]  # two different low-precision formats
