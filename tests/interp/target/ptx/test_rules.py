"""Bit instructions of PTX read from text, against the PTX ISA's pseudocode written
out with Python integers (sec. 9.7.8: shf, prmt, bfe, bfi, bfind, popc, clz, brev)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.interp.target.ptx.harness import run_elementwise

M32 = (1 << 32) - 1
rng = np.random.default_rng(3)


def _bit(x: int, i: int) -> int:
    return (x >> i) & 1


def prmt(a: int, b: int, c: int) -> int:
    wide = (b << 32) | a
    out = 0
    for i in range(4):
        sel = (c >> (4 * i)) & 15
        byte = (wide >> (8 * (sel & 7))) & 0xFF
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def bfe(a: int, b: int, c: int, signed: bool) -> int:
    pos, length, msb = b & 0xFF, c & 0xFF, 31
    sbit = 0 if not signed or length == 0 else _bit(a, min(pos + length - 1, msb))
    return sum(((_bit(a, pos + i) if i < length and pos + i <= msb else sbit) << i)
               for i in range(32))


def bfi(f: int, b: int, pos: int, length: int) -> int:
    d = b
    for i in range(length):
        if pos + i <= 31:
            d = (d & ~(1 << (pos + i))) | (_bit(f, i) << (pos + i))
    return d & M32


def bfind(a: int, signed: bool) -> int:
    if signed and a >> 31:
        a = ~a & M32
    return a.bit_length() - 1 if a else M32


CASES: dict[str, tuple[str, Callable[[int, int, int], int]]] = {
    "prmt": ("prmt.b32 %d, %a, %b, %c;", prmt),
    "shf.l.wrap": ("shf.l.wrap.b32 %d, %a, %b, %c;",
                   lambda a, b, c: ((((b << 32) | a) << (c & 31)) >> 32) & M32),
    "shf.l.clamp": ("shf.l.clamp.b32 %d, %a, %b, %c;",
                    lambda a, b, c: ((((b << 32) | a) << min(c, 32)) >> 32) & M32),
    "shf.r.wrap": ("shf.r.wrap.b32 %d, %a, %b, %c;",
                   lambda a, b, c: (((b << 32) | a) >> (c & 31)) & M32),
    "shf.r.clamp": ("shf.r.clamp.b32 %d, %a, %b, %c;",
                    lambda a, b, c: (((b << 32) | a) >> min(c, 32)) & M32),
    "bfe.u32": ("bfe.u32 %d, %a, %b, %c;", lambda a, b, c: bfe(a, b, c, False)),
    "bfe.s32": ("bfe.s32 %d, %a, %b, %c;", lambda a, b, c: bfe(a, b, c, True)),
    "bfi": ("shr.u32 %e, %c, 8;\n bfi.b32 %d, %a, %b, %c, %e;",
            lambda a, b, c: bfi(a, b, c & 0xFF, (c >> 8) & 0xFF)),
    "bfind.u32": ("bfind.u32 %d, %a;", lambda a, b, c: bfind(a, False)),
    "bfind.s32": ("bfind.s32 %d, %a;", lambda a, b, c: bfind(a, True)),
    "popc": ("popc.b32 %d, %a;", lambda a, b, c: bin(a).count("1")),
    "clz": ("clz.b32 %d, %a;", lambda a, b, c: 32 - a.bit_length()),
    "brev": ("brev.b32 %d, %a;", lambda a, b, c: int(f"{a:032b}"[::-1], 2)),
    "mul.hi.u32": ("mul.hi.u32 %d, %a, %b;", lambda a, b, c: (a * b) >> 32),
    "mad.lo.s32": ("mad.lo.s32 %d, %a, %b, %c;", lambda a, b, c: (a * b + c) & M32),
    "setp.and|selp": ("setp.lt.and.u32 %p|%q, %a, %b, 1;\n selp.b32 %e, %a, %b, %q;\n"
                      " selp.b32 %d, %c, %e, %p;",
                      lambda a, b, c: c if a < b else (a if a >= b else b)),
    "shr.s32": ("and.b32 %e, %b, 63;\n shr.s32 %d, %a, %e;",
                lambda a, b, c: ((a - (1 << 32) if a >> 31 else a) >> min(b & 63, 31)) & M32),
    "cvt.s32.s16": ("cvt.u16.u32 %rs, %a;\n cvt.s32.s16 %d, %rs;",
                    lambda a, b, c: (a & 0xFFFF) - (0x10000 if a & 0x8000 else 0) & M32),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bit_instruction(name: str) -> None:
    body, ref = CASES[name]
    n = 96
    a = rng.integers(0, 2**32, n, dtype=np.uint64)
    b = rng.integers(0, 2**32, n, dtype=np.uint64)
    c = rng.integers(0, 2**32, n, dtype=np.uint64)
    a[:8] = [0, 1, 0x80000000, M32, 0xFF, 0x7FFFFFFF, 0xFFFF0000, 12345]
    c[8:40] = np.arange(32) + 1  # small shift counts and positions
    c[40:48] = [0x3210, 0x7654, 0x8888, 0x1F05, 0x2008, 0x0000, 0x0820, 0x1010]
    got = run_elementwise(body, a, b, c, decls=".reg .b16 %rs;\n.reg .b32 %x<4>;")
    want = np.array([ref(int(x), int(y), int(z)) for x, y, z in zip(a, b, c)], np.uint64)
    np.testing.assert_array_equal(got, want.astype(np.uint32))


def _sext8(x: int) -> int:
    return (x & 0xFF) - (0x100 if x & 0x80 else 0)


BYTES: dict[str, tuple[str, Callable[[int, int, int], int]]] = {
    "cvt.s32.s8": ("cvt.s32.s8 %d, %a;", lambda a, b, c: _sext8(a) & M32),
    "cvt.u8.u32": ("cvt.u8.u32 %rs, %a;\n cvt.u32.u16 %d, %rs;", lambda a, b, c: a & 0xFF),
    "cvt.s8.s32 into b16": ("cvt.s8.s32 %rs, %a;\n cvt.s32.s16 %d, %rs;",
                            lambda a, b, c: _sext8(a) & M32),
    "st/ld.u8/s8 global": ("st.global.u8 [%rd5+1], %a;\n ld.global.s8 %d, [%rd5+1];\n"
                           " ld.global.u8 %e, [%rd5+2];\n add.s32 %d, %d, %e;",
                           lambda a, b, c: (_sext8(a) + ((c >> 16) & 0xFF)) & M32),
    "st/ld.v2/v4.u8/s8 global": (
        "st.global.v2.u8 [%rd5+2], {%a, %b};\n ld.global.v4.s8 {%x0, %x1, %x2, %x3}, [%rd5];\n"
        " add.s32 %d, %x0, %x3;\n ld.global.v2.u8 {%x1, %x2}, [%rd5+2];\n"
        " sub.s32 %d, %d, %x2;\n add.s32 %d, %d, %x1;",
        lambda a, b, c: (_sext8(c) + _sext8(b) - (b & 0xFF) + (a & 0xFF)) & M32),
}


@pytest.mark.parametrize("name", list(BYTES))
def test_byte_types(name: str) -> None:
    body, ref = BYTES[name]
    n = 64
    a = rng.integers(0, 2**32, n, dtype=np.uint64)
    b = rng.integers(0, 2**32, n, dtype=np.uint64)
    c = rng.integers(0, 2**32, n, dtype=np.uint64)
    a[:4] = [0x7F, 0x80, 0xFF, 0x1234]
    got = run_elementwise(body, a, b, c, decls=".reg .b16 %rs;\n.reg .b32 %x<4>;")
    want = np.array([ref(int(x), int(y), int(z)) for x, y, z in zip(a, b, c)], np.uint64)
    np.testing.assert_array_equal(got, want.astype(np.uint32))
