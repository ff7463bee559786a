"""Directed rounding (``.rz``, ``.rm``, ``.rp``) of f32 and f64 ``add``, ``sub``, ``mul``,
``div``, ``rcp``, ``sqrt`` and ``fma``, as CUDA's math library and intrinsics use it
(Triton's ``libdevice.log1p`` is ``add.rz.ftz.f32``; ``__fdiv_rz``, ``__fsqrt_rd``,
``__fma_rz``): each result against the exact rational value rounded in its direction
(IEEE 754), read from PTX text and run by the interpreter."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.backend.ptx.render import render
from tessera.errors import IRVerifyError
from tessera.interp.target import run_target
from tessera.ir.dialects.target import U64
from tessera.ir.dialects.target.ops import Binary, Fma
from tests.backend.ptx.render.test_render import ptxas
from tests.interp.target.kit import Kernel
from tests.interp.target.ptx.harness import HEADER

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
DIRECTIONS = ("rz", "rm", "rp")


def rounded(v: Fraction, dt: np.dtype, rnd: str) -> float:
    """The exact nonzero ``v`` rounded to ``dt`` toward zero, -inf or +inf."""
    top = np.finfo(dt).max
    if abs(v) > Fraction(float(top)):  # beyond the largest finite value
        lo, hi = (dt.type(top), dt.type(np.inf)) if v > 0 else (dt.type(-np.inf), -top)
    else:
        near = dt.type(float(v))  # one of v's two neighbours in dt
        at = Fraction(float(near))
        if at == v:
            return float(near)
        lo = near if at < v else np.nextafter(near, dt.type(-np.inf))
        hi = np.nextafter(near, dt.type(np.inf)) if at < v else near
    return float({"rz": lo if v > 0 else hi, "rm": lo, "rp": hi}[rnd])


def run(line: str, t: str, *columns: np.ndarray) -> np.ndarray:
    """``line`` (reading %a, %b, %c, writing %d of NumPy type ``t``) over the columns."""
    kind = "f32" if t == "float32" else "f64"
    size = 4 if t == "float32" else 8
    params = ", ".join(f".param .u64 p{k}" for k in range(4))
    loads = "\n    ".join(f"ld.param.u64 %rd{k}, [p{k}];\n    add.s64 %rd{k}, %rd{k}, %rd9;\n"
                          f"    ld.global.{kind} %{x}, [%rd{k}];" for k, x in enumerate("abc"))
    text = HEADER + f""".visible .entry k({params})
{{
    .reg .{kind} %a, %b, %c, %d;
    .reg .b32 %t;
    .reg .b64 %rd<10>;
    mov.u32 %t, %tid.x;
    mul.wide.u32 %rd9, %t, {size};
    {loads}
    {line}
    ld.param.u64 %rd3, [p3];
    add.s64 %rd3, %rd3, %rd9;
    st.global.{kind} [%rd3], %d;
    ret;
}}
"""
    out = np.zeros(len(columns[0]), t)
    args = [*columns, *[np.zeros(len(out), t)] * (3 - len(columns)), out]
    ts.ptx.load(text).kernel("k").run(grid=1, block=len(out), args=args)
    return out


def floats(dt: np.dtype) -> st.SearchStrategy[float]:
    width = 32 if dt == F32 else 64
    return st.floats(width=width, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([F32, F64]), st.sampled_from(["add", "sub", "mul"]),
       st.sampled_from(DIRECTIONS), st.data())
def test_add_sub_mul(dt: np.dtype, op: str, rnd: str, data: st.DataObject) -> None:
    a = np.array(data.draw(st.lists(floats(dt), min_size=8, max_size=8)), dt)
    b = np.array(data.draw(st.lists(floats(dt), min_size=8, max_size=8)), dt)
    b[:2] = -a[:2] if op == "add" else a[:2]  # exact zeros
    got = run(f"{op}.{rnd}.f{dt.itemsize * 8} %d, %a, %b;", dt.name, a, b)
    for x, y, z in zip(a, b, got):
        fx, fy = Fraction(float(x)), Fraction(float(y))
        v = {"add": fx + fy, "sub": fx - fy, "mul": fx * fy}[op]
        if v != 0:
            assert z == rounded(v, dt, rnd), (x, y, z)
        elif op != "mul":  # an exact zero sum: -0 under rm, else +0, unless both are zeros
            terms = (x, y if op == "add" else -y)
            both = all(t == 0 for t in terms) and np.signbit(terms[0]) == np.signbit(terms[1])
            assert np.signbit(z) == (bool(np.signbit(terms[0])) if both else rnd == "rm")


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(DIRECTIONS), st.data())
def test_fma_f32(rnd: str, data: st.DataObject) -> None:
    a, b, c = (np.array(data.draw(st.lists(floats(F32), min_size=8, max_size=8)), F32)
               for _ in range(3))
    got = run(f"fma.{rnd}.f32 %d, %a, %b, %c;", "float32", a, b, c)
    for x, y, w, z in zip(a, b, c, got):
        v = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(w))
        if v != 0:
            assert z == rounded(v, F32, rnd), (x, y, w, z)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([F32, F64]), st.sampled_from(["div", "rcp", "fma"]),
       st.sampled_from(DIRECTIONS), st.data())
def test_div_rcp_and_fma(dt: np.dtype, op: str, rnd: str, data: st.DataObject) -> None:
    """Quotients, reciprocals and fused products (f64's too) against the exact value."""
    a, b, c = (np.array(data.draw(st.lists(floats(dt), min_size=8, max_size=8)), dt)
               for _ in range(3))
    b[b == 0] = 3
    a[:2] = b[:2]  # exact quotients
    kind = f"f{dt.itemsize * 8}"
    line = {"div": f"div.{rnd}.{kind} %d, %a, %b;", "rcp": f"rcp.{rnd}.{kind} %d, %b;",
            "fma": f"fma.{rnd}.{kind} %d, %a, %b, %c;"}[op]
    got = run(line, dt.name, a, b, c)
    for x, y, w, z in zip(a, b, c, got):
        fx, fy = Fraction(float(x)), Fraction(float(y))
        v = {"div": fx / fy, "rcp": 1 / fy, "fma": fx * fy + Fraction(float(w))}[op]
        if v != 0:
            assert z == rounded(v, dt, rnd), (x, y, w, z)
        elif op == "div":  # an exact zero quotient has the operands' sign
            assert np.signbit(z) == (np.signbit(x) != np.signbit(y)), (x, y, z)
        else:  # zeros of one sign keep it; a sum of two signs is -0 under rm only
            product = np.signbit(x) != np.signbit(y)
            same = x * y == 0 and w == 0 and product == np.signbit(w)
            assert np.signbit(z) == (product if same else rnd == "rm"), (x, y, w, z)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([F32, F64]), st.sampled_from(DIRECTIONS), st.data())
def test_square_root(dt: np.dtype, rnd: str, data: st.DataObject) -> None:
    """Toward zero and -inf the largest value whose square is at most ``a``, toward
    +inf the smallest whose square is at least ``a``."""
    a = np.abs(np.array(data.draw(st.lists(floats(dt), min_size=8, max_size=8)), dt))
    a[:2] = [4, 2]
    got = run(f"sqrt.{rnd}.f{dt.itemsize * 8} %d, %a;", dt.name, a)
    inf = dt.type(np.inf)
    for x, z in zip(a, got):
        fx, fz = Fraction(float(x)), Fraction(float(z))
        if rnd == "rp":
            assert (fz * fz >= fx and Fraction(float(np.nextafter(z, -inf))) ** 2 < fx) or \
                z == 0 == x, (x, z)
        else:
            assert fz * fz <= fx < Fraction(float(np.nextafter(z, inf))) ** 2, (x, z)


def test_overflow_and_underflow() -> None:
    """Toward zero an overflow is the largest finite value; a product below the smallest
    subnormal is zero toward zero and that subnormal away from it."""
    big = np.full(3, np.finfo(F32).max, F32)
    for rnd, want in (("rz", big[0]), ("rm", big[0]), ("rp", np.inf)):
        assert run(f"add.{rnd}.f32 %d, %a, %b;", "float32", big, big)[0] == want
    tiny = np.full(3, 3e-200)
    tiny64 = np.full(3, 7e-170)
    assert run("mul.rz.f64 %d, %a, %b;", "float64", tiny, tiny64)[0] == 0
    assert run("mul.rp.f64 %d, %a, %b;", "float64", tiny, tiny64)[0] == 5e-324
    assert run("mul.rm.f64 %d, %a, %b;", "float64", -tiny, tiny64)[0] == -5e-324


def test_directed_rounding_renders_assembles_and_reads_back(tmp_path: Path) -> None:
    k = Kernel("directed", [U64], block=(32,))
    t = k.cvt("f32", "u32", k.tid(), rnd="rn")
    x = k.bin("mul", "f32", t, k.const(0.1, "f32"))
    d = k.op(Binary("add", "f32", "rz"), x, k.const(1e-9, "f32"))
    d = k.op(Fma("f32", False, "rp"), d, x, k.const(-0.3, "f32"))
    k.st("global", "f32", k.elem_addr(k.args[0], k.tid(), 4), d)
    fn = k.build()
    text = render(fn)
    assert "add.rz.f32" in text and "fma.rp.f32" in text
    ptxas(text, "sm_80", tmp_path)
    structured, from_text = np.zeros(32, F32), np.zeros(32, F32)
    run_target(fn, [structured], grid=(1,), block=(32,))
    ts.ptx.load(text).kernel("directed").run(grid=1, block=32, args=[from_text])
    np.testing.assert_array_equal(structured.view(np.uint32), from_text.view(np.uint32))
    with pytest.raises(IRVerifyError, match="directed rounding is modelled"):
        k2 = Kernel("bad", [U64])
        k2.op(Binary("max", "f32", "rz"), k2.const(1.0, "f32"), k2.const(3.0, "f32"))
