"""Instructions the reader writes as a few Target IR instructions (``sad``, ``mul24``,
``dp4a``, ``dp2a``, ``szext``, ``cnot``, ``testp``, the hints, the SIMD video
instructions, carry chains, ``bmsk``, ``bfind.shiftamt``, saturating float ``cvt``,
``set``): each
against its PTX ISA formula computed here in Python integers and NumPy float classes."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.ir.text.ptx import PtxSyntaxError, PtxUnsupportedError
from tests.interp.target.ptx.harness import run_elementwise

rng = np.random.default_rng(21)
A, B, C = (rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32) for _ in "abc")


def field(x: np.ndarray, start: int, width: int, signed: bool) -> np.ndarray:
    """Bits ``start .. start + width`` of ``x`` as Python-sized integers (int64)."""
    v = (x.astype(np.int64) >> start) & ((1 << width) - 1)
    return np.where(signed & ((v >> (width - 1)) == 1), v - (1 << width), v)


def word(v: np.ndarray) -> np.ndarray:
    """The low 32 bits, as a u32 register holds them."""
    return (v & 0xFFFFFFFF).astype(np.uint32)


def s32(x: np.ndarray) -> np.ndarray:
    return x.view(np.int32).astype(np.int64)


@pytest.mark.parametrize("body, want", [
    ("sad.s32 %d, %a, %b, %c;", word(s32(C) + np.abs(s32(A) - s32(B)))),
    ("sad.u32 %d, %a, %b, %c;", word(C.astype(np.int64) + np.abs(A.astype(np.int64) - B))),
    ("mul24.lo.u32 %d, %a, %b;", word(field(A, 0, 24, False) * field(B, 0, 24, False))),
    ("mul24.hi.s32 %d, %a, %b;", word((field(A, 0, 24, True) * field(B, 0, 24, True)) >> 16)),
    ("dp4a.s32.u32 %d, %a, %b, %c;", word(s32(C) + sum(
        field(A, 8 * i, 8, True) * field(B, 8 * i, 8, False) for i in range(4)))),
    ("dp4a.u32.u32 %d, %a, %b, %c;", word(C.astype(np.int64) + sum(
        field(A, 8 * i, 8, False) * field(B, 8 * i, 8, False) for i in range(4)))),
    ("dp2a.hi.u32.s32 %d, %a, %b, %c;", word(s32(C) + sum(
        field(A, 16 * i, 16, False) * field(B, 8 * (2 + i), 8, True) for i in range(2)))),
    ("cnot.b32 %d, %c;", (C == 0).astype(np.uint32)),
])
def test_integer_instructions(body: str, want: np.ndarray) -> None:
    np.testing.assert_array_equal(run_elementwise(body, A, B, C), want)


@pytest.mark.parametrize("mode", ["clamp", "wrap"])
def test_szext_extends_the_low_bits(mode: str) -> None:
    n = (B % 40).astype(np.uint32)
    bits = np.minimum(n, 32) if mode == "clamp" else n % 32
    want = [int(field(np.array([x]), 0, int(k), True)[0]) if k else 0 for x, k in zip(A, bits)]
    got = run_elementwise(f"szext.{mode}.s32 %d, %a, %b;", A, n, C)
    np.testing.assert_array_equal(got, word(np.array(want, np.int64)))


def test_testp_classes() -> None:
    x = np.array([1.0, np.inf, -np.inf, np.nan, 1e-40, 0.0, -(2.0**-126), 3e38], np.float32)
    classes = {"finite": np.isfinite(x), "infinite": np.isinf(x), "number": ~np.isnan(x),
               "notanumber": np.isnan(x),
               "normal": np.isfinite(x) & (np.abs(x) >= np.finfo(np.float32).tiny),
               "subnormal": (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)}
    bits = x.view(np.uint32)
    for test, want in classes.items():
        got = run_elementwise(f"testp.{test}.f32 %p, %a;\n    selp.u32 %d, 1, 0, %p;",
                              bits, bits, bits)
        np.testing.assert_array_equal(got.astype(bool), want, err_msg=test)


def test_hints_change_nothing() -> None:
    body = "prefetch.global.L2 [%rd0];\n    prefetchu.L1 [%rd0];\n    nanosleep.u32 %a;\n" \
           "    mov.u32 %d, %b;"
    np.testing.assert_array_equal(run_elementwise(body, A % 100, B, C), B)


def video(op: str, lanes: int, types: tuple[str, str, str], mode: str, a: np.ndarray,
          b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The PTX ISA's semantics of the SIMD video instructions (sec. 9.7.16.2), written
    out lane by lane: extended lanes, the operation, then ``.sat`` clamping and a merge
    into ``c``, or with ``.add`` the sum of the lanes added to ``c``."""
    width = 32 // lanes
    dt, at, bt = (t == "s32" for t in types)
    out = c.astype(np.int64)
    for i in range(lanes):
        va, vb = field(a, width * i, width, at), field(b, width * i, width, bt)
        total = va + vb
        t = {"vadd": total, "vsub": va - vb, "vabsdiff": np.abs(va - vb),
             "vavrg": np.where(total >= 0, (total + 1) >> 1, total >> 1),
             "vmin": np.minimum(va, vb), "vmax": np.maximum(va, vb)}[op]
        if mode == "add":
            out = out + t
            continue
        if mode == "sat":
            low, high = (-(1 << width - 1), (1 << width - 1) - 1) if dt else (0, (1 << width) - 1)
            t = np.clip(t, low, high)
        lane = ((1 << width) - 1) << (width * i)
        out = (out & ~lane) | ((t << (width * i)) & lane)
    return word(out)


@pytest.mark.parametrize("op", ["vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax"])
@pytest.mark.parametrize("lanes", [2, 4])
@pytest.mark.parametrize("types, mode", [(("u32", "u32", "u32"), ""),
                                         (("s32", "s32", "s32"), "sat"),
                                         (("u32", "s32", "u32"), "sat"),
                                         (("s32", "u32", "s32"), "add"),
                                         (("u32", "u32", "u32"), "add")])
def test_simd_video_instructions(op: str, lanes: int, types: tuple[str, str, str],
                                 mode: str) -> None:
    edges = np.array([0x80808080, 0x7F7F7F7F, 0xFFFFFFFF, 0, 0x80007FFF, 0x7FFF8000],
                     np.uint32)
    a, b = A.copy(), B.copy()
    a[:6], b[:6] = edges, edges[::-1]
    name = f"{op}{lanes}.{'.'.join(types)}{'.' + mode if mode else ''}"
    got = run_elementwise(f"{name} %d, %a, %b, %c;", a, b, C)
    np.testing.assert_array_equal(got, video(op, lanes, types, mode, a, b, C), err_msg=name)


def carry(x: np.ndarray) -> np.ndarray:
    """Whether an exact sum (or difference) left the 32-bit range: the carry (borrow)."""
    return ((x < 0) | (x >= 2**32)).astype(np.int64)


U, V, W = (x.astype(np.int64) for x in (A, B, C))


@pytest.mark.parametrize("body, want", [
    ("add.cc.u32 %e, %a, %b;\n    addc.u32 %d, %c, 0;", word(W + carry(U + V))),
    ("sub.cc.u32 %e, %a, %b;\n    subc.u32 %d, %c, 0;", word(W - carry(U - V))),
    ("add.cc.u32 %e, %a, %b;\n    addc.cc.u32 %e, %c, %a;\n    addc.u32 %d, 0, 0;",
     carry(W + U + carry(U + V))),
    ("sub.cc.s32 %e, %a, %b;\n    subc.cc.s32 %e, %c, %a;\n    subc.u32 %d, 0, 0;",
     word(-carry(W - U - carry(U - V)))),
    ("mad.hi.cc.s32 %e, %a, %b, %c;\n    addc.u32 %d, %e, %e;",
     word(2 * (((s32(A) * s32(B)) >> 32) + W) + carry(((s32(A) * s32(B)) >> 32 & 0xFFFFFFFF)
                                                      + W))),
    ("mad.lo.cc.u32 %e, %a, %b, %c;\n    madc.hi.u32 %d, %a, %b, %e;",
     word((U * V >> 32) + (U * V + W) + carry((U * V & 0xFFFFFFFF) + W))),
    ("mov.b64 %rd6, {%a, %b};\n    mov.b64 %rd7, {%c, %a};\n"
     "    add.cc.u64 %rd6, %rd6, %rd7;\n    addc.u32 %d, 0, 0;",
     np.array([int(u) + (int(v) << 32) + int(w) + (int(u) << 32) >= 2**64
               for u, v, w in zip(A, B, C)], np.int64)),
])
def test_carry_chains(body: str, want: np.ndarray) -> None:
    """Extended-precision arithmetic through the carry flag, against Python integers."""
    np.testing.assert_array_equal(run_elementwise(body, A, B, C), word(np.asarray(want)))


@pytest.mark.parametrize("body, message", [
    ("vadd4.u32.u32.u32 %d, %a, %b, 0;", "vadd4 takes its sources in registers"),
    ("add.cc.f32 %d, %a, %b;", r"add.cc takes .u32, .s32, .u64 or .s64"),
    ("add.cc.sat.s32 %d, %a, %b;", "no other modifier"),
    ("madc.u32 %d, %a, %b, %c;", "madc.lo and madc.hi take .u32"),
    ("bmsk.b32 %d, %a, %b;", "bmsk is bmsk.clamp.b32 or bmsk.wrap.b32"),
    ("vadd4.u32.u32.u32.sat.add %d, %a, %b, %c;", "vadd4 is vadd4.dtype.atype.btype"),
])
def test_malformed_integer_forms(body: str, message: str) -> None:
    with pytest.raises(PtxSyntaxError, match=message):
        run_elementwise(body, A, B, C)
    with pytest.raises(PtxUnsupportedError, match="byte selectors and masks"):
        run_elementwise("vadd4.u32.u32.u32 %d.b10, %a, %b, %c;", A, B, C)
    with pytest.raises(PtxUnsupportedError, match=r"addc reads the carry flag, which no "
                       r"earlier \.cc instruction of this function writes"):
        run_elementwise("addc.u32 %d, %a, %b;", A, B, C)


def bmsk(a: int, b: int, clamp: bool) -> int:
    """``bmsk``'s semantics as the PTX ISA writes them (sec. 9.7.1.25)."""
    a1, b1 = a & 31, b & 31
    mask0, total = (0xFFFFFFFF << a1) & 0xFFFFFFFF, a1 + b1
    mask1 = (0xFFFFFFFF << total) & 0xFFFFFFFF if total < 32 else 0
    big_a, big_b = clamp and a >= 32, clamp and b >= 32
    if big_a:
        mask0 = 0
    if total >= 32 or big_a or big_b:
        mask1 = 0
    elif b1 == 0:
        mask1 = 0xFFFFFFFF
    return mask0 & ~mask1 & 0xFFFFFFFF


@pytest.mark.parametrize("mode", ["clamp", "wrap"])
def test_bmsk_against_its_formula(mode: str) -> None:
    values = [*range(35), 63, 64, 2**31, 2**32 - 1]
    pairs = np.array([(a, b) for a in values for b in values], np.uint64).astype(np.uint32)
    for part in np.array_split(pairs, 2):
        got = run_elementwise(f"bmsk.{mode}.b32 %d, %a, %b;", part[:, 0], part[:, 1],
                              part[:, 0])
        want = [bmsk(int(a), int(b), mode == "clamp") for a, b in part]
        np.testing.assert_array_equal(got, np.array(want, np.uint32))


def test_bfind_shift_amount() -> None:
    x = np.r_[A[:60] >> (B[:60] % 32), [0, 1, 0x80000000, 0xFFFFFFFF]].astype(np.uint32)
    got = run_elementwise("bfind.shiftamt.u32 %d, %a;", x, x, x)
    want = [32 - int(v).bit_length() if v else 0xFFFFFFFF for v in x]
    np.testing.assert_array_equal(got, np.array(want, np.uint32))
    signed = run_elementwise("bfind.shiftamt.s32 %d, %a;", x, x, x)
    flipped = [int(v) ^ 0xFFFFFFFF if v >> 31 else int(v) for v in x]
    want = [32 - v.bit_length() if v else 0xFFFFFFFF for v in flipped]
    np.testing.assert_array_equal(signed, np.array(want, np.uint32))


def test_saturating_float_conversions() -> None:
    """``.sat`` of a float result clamps it to [0, 1], NaN and -0 to +0 (sec. 9.7.9.21);
    with ``.ftz`` a subnormal becomes +0."""
    x = np.array([-1.0, -0.0, 0.0, 0.5, 1.0, 2.0, np.nan, np.inf, -np.inf, 1e-40, 0.75],
                 np.float32)
    bits = x.view(np.uint32)

    def sat(body: str) -> np.ndarray:
        return run_elementwise(body, bits, bits, bits)
    clamped = np.where(np.isnan(x), 0, np.clip(x, 0, 1)).astype(np.float32) + np.float32(0)
    np.testing.assert_array_equal(sat("cvt.sat.f32.f32 %d, %a;"), clamped.view(np.uint32))
    flushed = np.where(clamped < 2.0**-126, 0, clamped).astype(np.float32)
    np.testing.assert_array_equal(sat("cvt.ftz.sat.f32.f32 %d, %a;"), flushed.view(np.uint32))
    rounded = np.where(np.isnan(x), 0, np.clip(np.round(x), 0, 1)).astype(np.float32)
    np.testing.assert_array_equal(sat("cvt.rni.sat.f32.f32 %d, %a;"),
                                  (rounded + np.float32(0)).view(np.uint32))
    half = sat("cvt.rn.sat.f16.f32 %d, %a;")
    np.testing.assert_array_equal(half, clamped.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("body, want", [
    ("set.lo.u32.u32 %d, %a, %b;", np.where(A < B, 0xFFFFFFFF, 0)),
    ("set.lt.f32.s32 %d, %a, %b;",
     np.where(s32(A) < s32(B), 1.0, 0.0).astype(np.float32).view(np.uint32)),
    ("setp.lo.u32 %p, %c, %a;\n    set.ge.xor.s32.s32 %d, %a, %b, !%p;",
     np.where((s32(A) >= s32(B)) ^ ~(C < A), 0xFFFFFFFF, 0)),
])
def test_set_writes_a_comparison_as_a_number(body: str, want: np.ndarray) -> None:
    """``set``: 1.0 or 0.0 for a float destination, every bit or none for an integer
    one, after combining with a predicate."""
    np.testing.assert_array_equal(run_elementwise(body, A, B, C), want.astype(np.uint32))
