"""fp8 values (e4m3 and e5m2) in f32 registers: widened from their byte exactly,
rounded back as the interpreters round, and packed into their byte for a store.

From sm_89 on, rounding is ``cvt.rn.satfinite.e4m3x2.f32`` (or ``e5m2x2``; PTX ISA,
"cvt"), which rounds once to nearest even and saturates as the interpreters do, read
back by ``cvt.rn.f16x2.e4m3x2``; only its NaN, the unsigned ``0x7F``, is given the
NaN's sign, which the interpreters keep. Neither sm_80 nor sm_86 converts fp8, so there
the conversions are integer and f16 arithmetic that every target has:

* **widening** goes through f16, which holds every fp8 value: an e5m2 byte is the high
  byte of the f16 of the same value; an e4m3 byte shifted into an f16's exponent and
  mantissa bits is the value times 2^-8 (normal and subnormal alike, the biases being
  7 and 15), so ``cvt.f32.f16`` and a multiplication by 256 give it exactly;
* **rounding** an f32 to the format's grid, to nearest even: the bits of a normal
  value round at the format's mantissa width with one integer addition (a carry moves
  into the exponent, as it should); a value below the smallest normal rounds by adding
  and subtracting ``2^(23 + e_min_sub)`` (whose f32 ulp is the format's subnormal
  quantum: ``add.rn`` rounds to nearest even there). Then, as
  :mod:`tessera.numerics.formats.convert` has it (PTX ``cvt.rn.satfinite``), a value
  beyond the largest finite one, an infinity included, becomes that largest value
  with its sign, and a NaN the format's NaN, which widens to the quiet f32 NaN of its
  sign (``ml_dtypes`` widens every fp8 NaN so);
* **packing** a value of the grid into its byte is the reverse of the widening.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.ir.core import Value
from tessera.lower.emit import TargetEmitter
from tessera.numerics import Element


@dataclass(frozen=True)
class Fp8:
    """An 8-bit float format: its f32 mantissa bits dropped, smallest normal, subnormal
    quantum and largest finite value (exponents of two, and a float)."""

    drop: int
    min_normal: int
    quantum: int
    max: float


FORMATS = {"float8_e4m3fn": Fp8(20, -6, -9, 448.0), "float8_e5m2": Fp8(21, -14, -16, 57344.0)}
#: the targets with fp8 conversions (sm_89 and later), and each format's pair type
CONVERTING = ("sm_89", "sm_90a")
_PAIR = {"float8_e4m3fn": "e4m3x2", "float8_e5m2": "e5m2x2"}
_QNAN = 0x7FC00000
_SIGN = 0x80000000


def _bits(e: TargetEmitter, x: Value) -> Value:
    return e.pack([x], "u32")


def _float(e: TargetEmitter, bits: Value) -> Value:
    return e.pack([bits], "f32")


def _u32(e: TargetEmitter, op: str, a: Value, k: int) -> Value:
    return e.bin(op, a, e.const(k, "u32"), "u32")


def _nan_of_sign(e: TargetEmitter, sign: Value) -> Value:
    """The quiet f32 NaN with the sign bit ``sign`` (u32 bits: 0 or 0x80000000)."""
    return _float(e, _u32(e, "or", sign, _QNAN))


def widen(e: TargetEmitter, byte: Value, name: str) -> Value:
    """The f32 of the fp8 ``byte`` (a ``u32`` register holding it zero-extended)."""
    b = byte
    if name == "float8_e5m2":
        half = _u32(e, "shl", b, 8)
        nan = e.setp("gt", _u32(e, "and", b, 0x7F), e.const(0x7C, "u32"), "u32")
    else:  # e4m3: the exponent and mantissa 7 bits up, the sign to bit 15
        half = e.bin("or", _u32(e, "shl", _u32(e, "and", b, 0x7F), 7),
                     _u32(e, "shl", _u32(e, "and", b, 0x80), 8), "u32")
        nan = e.setp("eq", _u32(e, "and", b, 0x7F), e.const(0x7F, "u32"), "u32")
    low, _ = e.unpack(half, "b16", 2)
    value = e.cvt(e.pack([low], "f16"), "f32", "f16")
    if name != "float8_e5m2":
        value = e.mul(value, e.const(256.0, "f32"), "f32")
    sign = _u32(e, "shl", _u32(e, "and", b, 0x80), 24)
    return e.selp(_nan_of_sign(e, sign), value, nan, "f32")


def _converted(e: TargetEmitter, x: Value, name: str) -> Value:
    """``x`` (f32) rounded to ``name`` by sm_89's ``cvt``: a ``b16`` pair holding the
    byte twice."""
    return e.cvt([x, x], _PAIR[name], "f32", "rn", "satfinite")


def round_value(e: TargetEmitter, x: Value, name: str) -> Value:
    """``x`` (f32) rounded to the fp8 format ``name``, as an f32 register."""
    if e.target in CONVERTING:
        low, _ = e.unpack(e.cvt(_converted(e, x, name), "f16x2", _PAIR[name], "rn"), "f16", 2)
        sign = _u32(e, "and", _bits(e, x), _SIGN)
        return e.selp(_nan_of_sign(e, sign), e.cvt(low, "f32", "f16"),
                      e.setp("nan", x, x, "f32"), "f32")
    fmt = FORMATS[name]
    bits = _bits(e, x)
    sign = _u32(e, "and", bits, _SIGN)
    mag = _u32(e, "and", bits, 0x7FFFFFFF)
    # normal: round the dropped bits to nearest even (an odd kept bit rounds a tie up)
    odd = _u32(e, "and", _u32(e, "shr", mag, fmt.drop), 1)
    up = e.add(e.add(mag, e.const((1 << (fmt.drop - 1)) - 1, "u32"), "u32"), odd, "u32")
    normal = _float(e, _u32(e, "and", up, -(1 << fmt.drop) & 0xFFFFFFFF))
    # subnormal: the f32 ulp of 2^(23 + quantum) is the format's quantum
    magic = e.const(float(2.0 ** (23 + fmt.quantum)), "f32")
    a = _float(e, mag)
    small = e.bin("sub", e.add(a, magic, "f32"), magic, "f32")
    tiny = e.setp("lt", a, e.const(float(2.0 ** fmt.min_normal), "f32"), "f32")
    r = e.bin("min", e.selp(small, normal, tiny, "f32"), e.const(fmt.max, "f32"), "f32")
    signed = _float(e, e.bin("or", _bits(e, r), sign, "u32"))
    return e.selp(_nan_of_sign(e, sign), signed, e.setp("nan", x, x, "f32"), "f32")


def to_byte(e: TargetEmitter, x: Value, name: str) -> Value:
    """The byte (in a ``u32`` register) of the fp8 format ``name`` nearest ``x``."""
    nan_byte = 0x7E if name == "float8_e5m2" else 0x7F
    if e.target in CONVERTING:
        pair = e.pack([_converted(e, x, name), e.const(0, "b16")], "u32")
        byte = _u32(e, "and", pair, 0xFF)
        if name != "float8_e5m2":
            return byte  # a NaN is 0x7F, the byte the arithmetic below writes too
        sign = _u32(e, "shr", _u32(e, "and", _bits(e, x), _SIGN), 24)
        return e.selp(_u32(e, "or", sign, nan_byte), byte, e.setp("nan", x, x, "f32"), "u32")
    r = round_value(e, x, name)
    if name == "float8_e4m3fn":
        r = e.mul(r, e.const(2.0 ** -8, "f32"), "f32")  # exact: the f16 holds it
    half = e.pack([e.pack([e.cvt(r, "f16", "f32", "rn")], "b16"), e.const(0, "b16")], "u32")
    if name == "float8_e5m2":
        byte = _u32(e, "shr", half, 8)
    else:
        byte = e.bin("or", _u32(e, "and", _u32(e, "shr", half, 7), 0x7F),
                     _u32(e, "and", _u32(e, "shr", half, 8), 0x80), "u32")
    sign = _u32(e, "shr", _u32(e, "and", _bits(e, r), _SIGN), 24)
    return e.selp(_u32(e, "or", sign, nan_byte), byte, e.setp("nan", r, r, "f32"), "u32")


def constant(value: float, element: Element) -> float:
    """A constant of the fp8 ``element``: ``value`` rounded as the interpreters round a
    constant (from float64, once)."""
    from tessera.numerics.formats.convert import convert

    return float(convert(np.float64(value), element).astype(np.float32))


__all__ = ["CONVERTING", "FORMATS", "Fp8", "constant", "round_value", "to_byte", "widen"]
