"""Numeric formats: the :class:`DType` values, their names and aliases, and promotion.

Low-precision floats are stored in ``ml_dtypes`` arrays so that every value a GPU
format can hold is held exactly. ``tf32`` has no storage type of its own: it lives in
``float32`` arrays whose mantissa has been rounded to 10 bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import ml_dtypes
import numpy as np

from tessera.errors import DTypeError, user_api
from tessera.numerics.formats.names import ALIASES as _ALIASES
from tessera.numerics.formats.promotion import promote as promote  # re-exported

if TYPE_CHECKING:
    from tessera.numerics.policy.modifiers import Policy


class FloatFormat(NamedTuple):
    """The parameters that define rounding into a binary floating-point format."""

    nmant: int  # stored mantissa bits (precision is nmant + 1)
    emin: int  # exponent of the smallest normal number
    max: float  # largest finite value
    has_inf: bool
    has_nan: bool
    saturating: bool  # conversion clamps to +-max (PTX .satfinite)
    nan_to_max: bool  # the format has no NaN: a NaN input becomes +max (PTX .satfinite)


@dataclass(frozen=True)
class DType:
    """A numeric element format: ``ts.f32``, ``ts.bf16``, ``ts.fp8_e4m3``, ...

    ``np_dtype`` is the NumPy (or ``ml_dtypes``) type arrays of this format are stored
    in; ``kind`` is one of ``'float'``, ``'int'``, ``'complex'``, ``'bool'``.
    """

    name: str
    np_dtype: np.dtype
    kind: str
    bits: int

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"ts.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Pickling and deep copies give back the canonical constant, so ``is`` holds.
        return (dtype, (self.name,))

    @property
    def text(self) -> str:
        """The spelling used in IR text (the canonical name)."""
        return self.name

    @property
    def is_float(self) -> bool:
        """True for real floating-point formats (including tf32 and the fp8/fp6/fp4 family)."""
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """True for the signed integer formats."""
        return self.kind == "int"

    @property
    def is_complex(self) -> bool:
        """True for c64 and c128."""
        return self.kind == "complex"

    @property
    def is_low_precision(self) -> bool:
        """True for the sub-16-bit floats (fp8, fp6, fp4 and the e8m0 scale format)."""
        return self.kind == "float" and self.bits <= 8

    @property
    def format(self) -> FloatFormat:
        """Rounding parameters of a real float format (DTypeError for other kinds)."""
        info = _FLOAT_FORMATS.get(self.name)
        if info is None:
            raise DTypeError(f"{self.name} is not a real floating-point format")
        return info

    @property
    def precision(self) -> int:
        """Significand bits needed to hold any value of this format exactly."""
        if self.kind == "float":
            return self.format.nmant + 1
        if self.kind == "complex":
            return _COMPONENT[self.name].precision
        return {"bool": 1, "int8": 8, "int32": 32, "int64": 64}[self.name]

    @property
    def max_finite(self) -> float | int:
        """The largest finite value (for complex formats: of each component)."""
        if self.kind == "float":
            return self.format.max
        if self.kind == "complex":
            return _COMPONENT[self.name].format.max
        if self.kind == "bool":
            return 1
        return int(np.iinfo(self.np_dtype).max)

    @property
    def component(self) -> DType:
        """The real format of each part of a complex format (the format itself otherwise)."""
        return _COMPONENT.get(self.name, self)

    def __matmul__(self, modifier: Any) -> Policy:
        # Deferred import: policy.py builds on this module.
        from tessera.numerics.policy.modifiers import Policy

        return Policy(self) @ modifier


def _float_format(np_type: Any, *, sat: bool, nan_to_max: bool = False) -> FloatFormat:
    info = ml_dtypes.finfo(np_type)
    has_nan = not nan_to_max
    has_inf = bool(np.isinf(np.array(np.inf).astype(np_type)))
    return FloatFormat(int(info.nmant), int(info.minexp), float(info.max), has_inf,
                       has_nan, sat, nan_to_max)


def _make(name: str, np_type: Any, kind: str, bits: int) -> DType:
    return DType(name, np.dtype(np_type), kind, bits)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        _make("f64", np.float64, "float", 64),
        _make("f32", np.float32, "float", 32),
        _make("tf32", np.float32, "float", 19),
        _make("bf16", ml_dtypes.bfloat16, "float", 16),
        _make("f16", np.float16, "float", 16),
        _make("fp8_e4m3", ml_dtypes.float8_e4m3fn, "float", 8),
        _make("fp8_e5m2", ml_dtypes.float8_e5m2, "float", 8),
        _make("fp6_e2m3", ml_dtypes.float6_e2m3fn, "float", 6),
        _make("fp6_e3m2", ml_dtypes.float6_e3m2fn, "float", 6),
        _make("fp4_e2m1", ml_dtypes.float4_e2m1fn, "float", 4),
        _make("e8m0", ml_dtypes.float8_e8m0fnu, "float", 8),
        _make("int8", np.int8, "int", 8),
        _make("int32", np.int32, "int", 32),
        _make("int64", np.int64, "int", 64),
        _make("bool", np.bool_, "bool", 1),
        _make("c64", np.complex64, "complex", 64),
        _make("c128", np.complex128, "complex", 128),
    )
}
"""Every canonical format, by canonical name."""

_FLOAT_FORMATS: dict[str, FloatFormat] = {
    "f64": _float_format(np.float64, sat=False),
    "f32": _float_format(np.float32, sat=False),
    # tf32: float32's exponent range with a 10-bit mantissa.
    "tf32": FloatFormat(10, -126, float((2 - 2.0**-10) * 2.0**127), True, True, False, False),
    "bf16": _float_format(ml_dtypes.bfloat16, sat=False),
    "f16": _float_format(np.float16, sat=False),
    "fp8_e4m3": _float_format(ml_dtypes.float8_e4m3fn, sat=True),
    "fp8_e5m2": _float_format(ml_dtypes.float8_e5m2, sat=True),
    "fp6_e2m3": _float_format(ml_dtypes.float6_e2m3fn, sat=True, nan_to_max=True),
    "fp6_e3m2": _float_format(ml_dtypes.float6_e3m2fn, sat=True, nan_to_max=True),
    "fp4_e2m1": _float_format(ml_dtypes.float4_e2m1fn, sat=True, nan_to_max=True),
    "e8m0": _float_format(ml_dtypes.float8_e8m0fnu, sat=True),
}

_COMPONENT: dict[str, DType] = {"c64": DTYPES["f32"], "c128": DTYPES["f64"]}

f64 = DTYPES["f64"]
f32 = DTYPES["f32"]
tf32 = DTYPES["tf32"]
bf16 = DTYPES["bf16"]
f16 = DTYPES["f16"]
fp8_e4m3 = DTYPES["fp8_e4m3"]
fp8_e5m2 = DTYPES["fp8_e5m2"]
fp6_e2m3 = DTYPES["fp6_e2m3"]
fp6_e3m2 = DTYPES["fp6_e3m2"]
fp4_e2m1 = DTYPES["fp4_e2m1"]
e8m0 = DTYPES["e8m0"]
int8 = DTYPES["int8"]
int32 = DTYPES["int32"]
int64 = DTYPES["int64"]
# ``bool`` would shadow the builtin in every module that star-imports this one.
bool_ = DTYPES["bool"]
c64 = DTYPES["c64"]
c128 = DTYPES["c128"]

# Aliases, as constants (every seed spelling works).
fp64 = float64 = f64
fp32 = float32 = f32
bfloat16 = bf16
fp16 = float16 = half = f16
fp8 = e4m3 = fp8_e4m3
e5m2 = fp8_e5m2
fp6 = e2m3 = fp6_e2m3
e3m2 = fp6_e3m2
fp4 = e2m1 = fp4_e2m1
ue8m0 = e8m0
i8 = int8
i32 = int32
i64 = int64
complex64 = c64
complex128 = c128

_BY_NUMPY: dict[np.dtype, DType] = {
    d.np_dtype: d for d in DTYPES.values() if d.name != "tf32"  # tf32 shares float32 storage
}


# ``DType(...)`` with the wrong arguments is an ArgumentError like any tessera call.
DType.__init__ = user_api(DType.__init__)  # type: ignore[method-assign]


def known_names() -> list[str]:
    """Every accepted spelling of a format name, canonical names first."""
    return list(DTYPES) + sorted(_ALIASES)


def from_numpy_dtype(np_dtype: Any) -> DType:
    """The format whose storage type is ``np_dtype`` (float32 gives f32, never tf32)."""
    try:
        key = np.dtype(np_dtype)
    except TypeError:
        key = None
    found = _BY_NUMPY.get(key) if key is not None else None
    if found is None:
        raise DTypeError(
            f"NumPy dtype {np_dtype!r} has no tessera format",
            hint="tessera stores " + ", ".join(str(d.np_dtype) for d in _BY_NUMPY.values()),
        )
    return found


@user_api
def dtype(x: Any) -> DType:
    """Normalise anything that names a format to its :class:`DType`.

    Accepts a DType, a Policy or ``@precision_policy`` class (giving its storage), a
    name or alias in any case (``"fp32"``, ``"bfloat16"``, ``"e4m3"``), a policy string
    (``"bf16 @accum(f32)"``, giving its storage), a NumPy or ``ml_dtypes`` dtype or
    scalar type, or the Python types ``float`` (f32), ``int`` (int32), ``bool`` and
    ``complex`` (c64).
    """
    if isinstance(x, DType):
        return x
    storage = getattr(x, "storage", None)
    if isinstance(storage, DType):  # Policy and PolicyClass
        return storage
    if x is bool:
        return DTYPES["bool"]
    if x is int:
        return DTYPES["int32"]
    if x is float:
        return DTYPES["f32"]
    if x is complex:
        return DTYPES["c64"]
    if isinstance(x, str):
        key = x.strip().lower()
        if key.startswith(("ts.", "tessera.")):
            key = key.split(".", 1)[1]
        if key in DTYPES:
            return DTYPES[key]
        if key in _ALIASES:
            return DTYPES[_ALIASES[key]]
        if "@" in key:
            from tessera.numerics.policy.modifiers import parse_policy, storage_of

            return storage_of(parse_policy(x))
        raise DTypeError(
            f"unknown numeric format {x!r}",
            hint="known formats: " + ", ".join(known_names()),
        )
    if isinstance(x, (np.dtype, type)):
        try:
            return from_numpy_dtype(x)
        except DTypeError:
            pass
    raise DTypeError(
        f"{x!r} does not name a numeric format",
        hint="use a tessera dtype such as ts.f32, or one of: " + ", ".join(DTYPES),
    )
