"""``cvt``, ``pack`` and ``unpack`` (PTX ISA, "cvt" and "mov").

``cvt`` follows :mod:`tessera.interp.target.numeric` (one rounding, directed modes,
saturation). A *wide* ``f32`` source (an exact ``mma`` accumulator) is converted once,
straight from its float64 value, as Tile IR's cast rounds a wide value once to its
destination; ``cvt.rn.f32.f32`` of a wide value is the plain rounding to float32.

``pack`` concatenates registers, the first operand in the low bits, or builds a register
vector (a wide ``f32`` element keeps the vector wide); ``unpack`` is its inverse.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from tessera.interp.target import numeric as tn
from tessera.interp.target.regs import pure, unsupported
from tessera.interp.target.state import (
    DTYPES,
    F64,
    Step,
    TargetCompiler,
    TargetFrame,
    narrow,
    step_rule,
)
from tessera.ir.core import Instr
from tessera.ir.dialects.target import FP8X2, REG_TYPES, RegType
from tessera.ir.dialects.target import ops as target_ops
from tessera.numerics.formats.convert import convert


@step_rule(target_ops.Cvt)
def _cvt(c: TargetCompiler, instr: Instr) -> Step:
    to, frm, rnd, sat = instr.op.to, instr.op.frm, instr.op.rnd, instr.op.sat
    if to in FP8X2 or frm in FP8X2:
        return pure(c, instr, _fp8_pair(to, frm))
    tkind, fkind = REG_TYPES[to][1], REG_TYPES[frm][1]
    if to in ("f16x2", "bf16x2"):
        half = DTYPES[to[:-2]]

        def pack2(hi: Any, lo: Any) -> Any:
            h, low = (tn.cvt_float(v, half, rnd, bool(sat)).view(np.uint16).astype(np.uint32)
                      for v in (hi, lo))
            return (h << np.uint32(16)) | low
        return pure(c, instr, pack2)
    if "x2" in frm or tkind not in "usf" or fkind not in "usf":
        raise unsupported(instr, f"cvt from {frm} to {to}")
    dt = DTYPES[to]
    if fkind == "f" and tkind == "f":
        if rnd in ("rzi", "rni", "rmi", "rpi"):
            return pure(c, instr, lambda x: tn.round_integral(
                tn.cvt_float(x, dt, "rn", False), rnd))
        return pure(c, instr, lambda x: tn.cvt_float(x, dt, rnd, bool(sat)))
    if fkind == "f":
        return pure(c, instr, lambda x: tn.cvt_float_to_int(x, dt, rnd))
    if tkind == "f":
        if rnd not in ("", "rn"):
            raise unsupported(instr, f"integer to float conversion with .{rnd}")
        return pure(c, instr, lambda x: convert(x, to).astype(dt))
    if sat:
        info = np.iinfo(dt)
        return pure(c, instr, lambda x: np.clip(x.astype(object), info.min, info.max)
                    .astype(dt))
    # integers: extend per the source's signedness, then keep the low bits
    return pure(c, instr, lambda x: x.astype(np.int64 if fkind == "s" else np.uint64)
                .astype(dt))


#: the fp8 pair types: the format of each element, and its NumPy type
_FP8 = {"e4m3x2": ("fp8_e4m3", np.dtype(ml_dtypes.float8_e4m3fn)),
        "e5m2x2": ("fp8_e5m2", np.dtype(ml_dtypes.float8_e5m2))}
_U16, _U32 = np.dtype(np.uint16), np.dtype(np.uint32)


def _fp8_pair(to: str, frm: str) -> Any:
    """The fp8 pair conversions (sm_89). Narrowing rounds once to nearest even and
    saturates (``.satfinite``: beyond the largest finite value, infinities included, gives
    that value with its sign); a NaN becomes the canonical ``0x7F``. Widening to f16 is
    exact (every e4m3 and e5m2 value is an f16 value); a NaN becomes f16's canonical NaN,
    as every conversion to 16 bits writes (not measured on a GPU for fp8 sources)."""
    if to in _FP8:
        fmt = _FP8[to][0]

        def byte(v: Any) -> Any:
            return tn.canonical_nans(convert(v, fmt)).view(np.uint8).astype(_U16)
        if frm == "f32":  # d = {hi, lo}: the first operand in the high byte
            return lambda hi, lo: (byte(narrow(hi, frm)) << _U16.type(8)) | byte(narrow(lo, frm))

        def halves(x: Any) -> Any:
            lo, hi = ((x >> _U32.type(k)).astype(_U16).view(np.float16) for k in (0, 16))
            return (byte(hi) << _U16.type(8)) | byte(lo)
        return halves
    fp8 = _FP8[frm][1]

    def widen(x: Any) -> Any:
        lo, hi = (tn.canonical_nans((x >> _U16.type(k)).astype(np.uint8).view(fp8)
                                    .astype(np.float16)).view(_U16).astype(_U32) for k in (0, 8))
        return (hi << _U32.type(16)) | lo
    return widen


def _bits(x: np.ndarray, t: RegType) -> np.ndarray:
    """Element bit patterns of a register value, (N, count) unsigned."""
    u = np.dtype(f"u{max(1, t.bits // 8)}")
    v = narrow(x, t.elem)
    if v.dtype == np.bool_:
        raise TypeError("predicates cannot be packed")
    return v.view(u).reshape(len(v), -1)


@step_rule(target_ops.Pack)
def _pack(c: TargetCompiler, instr: Instr) -> Step:
    res = instr.results[0].type
    assert isinstance(res, RegType)
    if res.count > 1:  # a register vector of the operands
        def stack(*xs: Any) -> Any:
            if any(x.dtype == F64 for x in xs) and res.elem == "f32":
                xs = tuple(x.astype(F64) for x in xs)
            return np.stack(xs, axis=1)
        return pure(c, instr, stack)
    types = [v.type for v in instr.operands]
    dt = DTYPES[res.elem]
    wide = np.dtype(np.uint64)

    def concat(*xs: Any) -> Any:
        acc = np.zeros(len(xs[0]), wide)
        shift = 0
        for x, t in zip(xs, types):
            parts = _bits(x, t).astype(wide)
            for k in range(parts.shape[1]):
                acc |= parts[:, k] << np.uint64(shift)
                shift += t.bits
        return acc.astype(np.dtype(f"u{dt.itemsize}")).view(dt)
    return pure(c, instr, concat)


@step_rule(target_ops.Unpack)
def _unpack(c: TargetCompiler, instr: Instr) -> Step:
    src = instr.operands[0].type
    part = RegType(instr.op.type)
    count = instr.op.count
    ins = c.slot(instr.operands[0])
    outs = [c.slot(r) for r in instr.results]
    dt = DTYPES[part.elem]
    if src.count == count and src.elem == part.elem:
        def split(fr: TargetFrame) -> None:
            x = fr.regs[ins]
            for k, o in enumerate(outs):
                fr.regs[o] = x[:, k]
        return split
    mask = np.uint64((1 << part.bits) - 1)

    def unpack(fr: TargetFrame) -> None:
        bits = _bits(fr.regs[ins], src)[:, 0].astype(np.uint64)
        for k, o in enumerate(outs):
            piece = (bits >> np.uint64(k * part.bits)) & mask
            fr.regs[o] = piece.astype(np.dtype(f"u{max(1, part.bits // 8)}")).view(dt)
    return unpack


__all__: list[str] = []
