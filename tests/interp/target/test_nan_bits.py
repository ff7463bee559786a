"""NaN results of the Target IR interpreter carry the bits a GPU writes.

An NVIDIA H100 (sm_80 and sm_90a code) writes the canonical NaN of the destination
format for every NaN an f32, f16 or bf16 arithmetic instruction, or a ``cvt`` to a
16-bit or 8-bit float, produces, from a NaN operand of any payload and sign or from
an invalid operation (``inf - inf``, ``0 * inf``): f32 ``0x7FFFFFFF``, f16 and bf16
``0x7FFF``, e4m3 ``0x7F``. f64 arithmetic writes IEEE's bits, as NumPy does (an
invalid operation ``0xFFF8000000000000``, a NaN operand's payload, quieted), and a
conversion to f32 or f64 keeps the payload, as NumPy's and ml_dtypes' do; min/max of
two f64 NaNs write ``0x7FF8000000000000``. Instructions that move bits (``mov``,
``selp``, ``ld``/``st``) keep them. The PTX ISA leaves these payloads to the
implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.interp.target import run_target
from tessera.interp.target.numeric import canonical_nans
from tessera.ir.core import Value
from tests.interp.target.kit import U64, Kernel, run_map, target_ops
from tests.interp.target.tensorcore.test_mma import _mma_kernel

BF16 = ml_dtypes.bfloat16
N = 64  # elements per run: one block of run_map
F32_NAN, HALF_NAN = 0x7FFFFFFF, 0x7FFF
#: f64's NaN of an invalid operation (IEEE's default NaN with the sign NumPy gives it)
F64_INVALID = 0xFFF8000000000000
#: (exponent bits all set, payload bits, sign bit, float type) of each format
FORMATS: dict[str, tuple[int, int, int, Any]] = {
    "f32": (0x7F800000, 23, 31, np.float32), "f64": (0x7FF0000000000000, 52, 63, np.float64),
    "f16": (0x7C00, 10, 15, np.float16), "bf16": (0x7F80, 7, 15, BF16)}
CANONICAL = {"f32": F32_NAN, "f16": HALF_NAN, "bf16": HALF_NAN}
#: the NaN of an invalid operation, by format
INVALID_NAN = {**CANONICAL, "f64": F64_INVALID}


def _target(fmt: str) -> str:
    """bf16 arithmetic exists from sm_90 on."""
    return "sm_90a" if fmt == "bf16" else "sm_80"


def _quieted(bits: np.ndarray, fmt: str) -> set[int]:
    """IEEE's result of an operation on NaN operands ``bits``: the payload, quieted."""
    _, payload, _, _ = FORMATS[fmt]
    return set((bits.view(f"u{bits.dtype.itemsize}") | (1 << (payload - 1))).tolist())


@st.composite
def nans(draw: st.DrawFn, fmt: str) -> list[int]:
    """Bit patterns of NaNs of ``fmt``: any sign, any nonzero payload (quiet or
    signalling)."""
    exponent, payload, sign, _ = FORMATS[fmt]
    return draw(st.lists(st.builds(lambda s, p: (s << sign) | exponent | p, st.integers(0, 1),
                                   st.integers(1, (1 << payload) - 1)),
                         min_size=1, max_size=N))


def _array(bits: list[int], fmt: str) -> np.ndarray:
    """``bits`` repeated to N elements, as values of ``fmt``."""
    ftype = FORMATS[fmt][3]
    size = np.dtype(ftype).itemsize
    return np.resize(np.array(bits, f"u{size}"), N).view(ftype)


def _bits(x: np.ndarray) -> set[int]:
    return set(x.view(f"u{x.dtype.itemsize}").tolist())


def _finite(fmt: str, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(N).astype(FORMATS[fmt][3])


Body = Callable[[Kernel, list[Value]], Value]


def _run(body: Body, inputs: list[np.ndarray], types: list[str], out: str) -> set[int]:
    return _bits(run_map(body, inputs, types, out, target=_target(out)))


def test_the_helper_gives_each_formats_canonical_nan() -> None:
    """numeric.canonical_nans: every NaN of any payload and sign becomes its format's
    canonical NaN (e4m3 0x7F measured, e5m2 0x7F by analogy); other values keep
    their bits; f64 NaNs keep theirs, unless the f64 holds a wide f32 value."""
    for fmt in FORMATS:
        exponent, payload, sign, ftype = FORMATS[fmt]
        x = np.array([exponent | 1, (1 << sign) | exponent | (1 << payload) - 1],
                     f"u{np.dtype(ftype).itemsize}").view(ftype)
        if fmt == "f64":
            assert _bits(canonical_nans(x)) == _bits(x)
            wide = canonical_nans(x, wide=True)
            assert _bits(wide.astype(np.float32)) == {F32_NAN}
        else:
            assert _bits(canonical_nans(x)) == {CANONICAL[fmt]}
    for fp8 in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        every = np.arange(256, dtype=np.uint8).view(fp8)
        out = canonical_nans(every).view(np.uint8)
        nan = np.isnan(every)
        assert set(out[nan].tolist()) == {0x7F}
        assert out[~nan].tolist() == every.view(np.uint8)[~nan].tolist()


@settings(max_examples=10, deadline=None)
@given(bits=nans("f32"), op=st.sampled_from(["add", "sub", "mul", "div", "min.NaN"]),
       first=st.booleans())
def test_f32_arithmetic_of_a_nan_operand(bits: list[int], op: str, first: bool) -> None:
    """add/sub/mul/div.f32 (and max.NaN) with one NaN operand: 0x7FFFFFFF."""
    name, _, mode = op.partition(".")
    x, y = _array(bits, "f32"), _finite("f32")
    ins = [x, y] if first else [y, x]
    assert _run(lambda k, v: k.bin(name, "f32", *v, mode=mode), ins, ["f32"] * 2,
                "f32") == {F32_NAN}


INVALID = [("add", np.inf, -np.inf), ("sub", -np.inf, -np.inf), ("mul", 0.0, np.inf),
           ("mul", -0.0, np.inf), ("div", 0.0, 0.0), ("div", -np.inf, np.inf)]


@pytest.mark.parametrize(("fmt", "op", "a", "b"), [
    (fmt, *case) for fmt in ("f32", "f64", "f16", "bf16") for case in INVALID
    if fmt in ("f32", "f64") or case[0] != "div"])  # PTX has no div of 16-bit floats
def test_invalid_operations_write_the_canonical_nan(fmt: str, op: str, a: float,
                                                    b: float) -> None:
    """inf - inf, 0 * inf, 0 / 0, inf / inf: the canonical NaN, where NumPy writes a
    negative one (0xFFC00000 in f32); f64 writes IEEE's 0xFFF8000000000000."""
    ftype = FORMATS[fmt][3]
    x, y = np.full(N, a, ftype), np.full(N, b, ftype)
    assert _run(lambda k, v: k.bin(op, fmt, *v), [x, y], [fmt] * 2, fmt) == \
        {INVALID_NAN[fmt]}


@settings(max_examples=10, deadline=None)
@given(data=st.data(), fmt=st.sampled_from(["f16", "bf16", "f64"]),
       op=st.sampled_from(["add", "sub", "mul"]))
def test_other_formats_arithmetic_of_a_nan_operand(data: st.DataObject, fmt: str,
                                                   op: str) -> None:
    """16-bit float arithmetic with a NaN operand: the canonical NaN; f64: the
    operand's payload, quieted."""
    x, y = _array(data.draw(nans(fmt)), fmt), _finite(fmt)
    want = _quieted(x, fmt) if fmt == "f64" else {CANONICAL[fmt]}
    assert _run(lambda k, v: k.bin(op, fmt, *v), [y, x], [fmt] * 2, fmt) == want


@settings(max_examples=10, deadline=None)
@given(data=st.data(), fmt=st.sampled_from(["f32", "f64", "f16", "bf16"]),
       where=st.integers(0, 2))
def test_fma_of_a_nan_operand(data: st.DataObject, fmt: str, where: int) -> None:
    """fma.rn with a NaN in any operand: the canonical NaN; f64: the operand's
    payload, quieted (seen on an H100: 0x7FF8..., 0xFFF8... and 0xFFFF... results)."""
    ins = [_finite(fmt, s) for s in range(3)]
    ins[where] = _array(data.draw(nans(fmt)), fmt)
    want = _quieted(ins[where], fmt) if fmt == "f64" else {CANONICAL[fmt]}
    assert _run(lambda k, v: k.fma(fmt, *v), ins, [fmt] * 3, fmt) == want


@pytest.mark.parametrize("fmt", ["f32", "f64", "f16", "bf16"])
def test_fma_of_inf_times_zero(fmt: str) -> None:
    """fma(inf, 0, c) and fma(inf, 1, -inf): invalid, the canonical NaN (f64: IEEE's)."""
    ftype = FORMATS[fmt][3]
    a = np.resize(np.array([np.inf, -np.inf], ftype), N)
    b = np.resize(np.array([0.0, 1.0], ftype), N)
    c = np.resize(np.array([1.0, np.inf], ftype), N)
    assert _run(lambda k, v: k.fma(fmt, *v), [a, b, c], [fmt] * 3, fmt) == \
        {INVALID_NAN[fmt]}


@settings(max_examples=10, deadline=None)
@given(bits=nans("f32"), op=st.sampled_from(
    ["sqrt.rn", "rcp.rn", "ex2.approx.ftz", "lg2.approx.ftz", "ex2.approx", "lg2.approx"]))
def test_unary_functions_of_a_nan(bits: list[int], op: str) -> None:
    """sqrt, rcp, ex2 and lg2 of a NaN: 0x7FFFFFFF."""
    name, _, mode = op.partition(".")
    assert _run(lambda k, v: k.un(name, "f32", v[0], mode=mode), [_array(bits, "f32")],
                ["f32"], "f32") == {F32_NAN}


@pytest.mark.parametrize("op", ["sqrt.rn", "lg2.approx.ftz", "lg2.approx"])
def test_unary_functions_of_a_negative_value(op: str) -> None:
    """sqrt and lg2 of a negative value (and of -inf): invalid, 0x7FFFFFFF."""
    name, _, mode = op.partition(".")
    x = np.resize(np.array([-1.0, -np.inf, -3e-3], np.float32), N)
    assert _run(lambda k, v: k.un(name, "f32", v[0], mode=mode), [x], ["f32"],
                "f32") == {F32_NAN}


@settings(max_examples=10, deadline=None)
@given(data=st.data(), fmt=st.sampled_from(["f16", "bf16"]))
def test_16_bit_unary_functions_of_a_nan(data: st.DataObject, fmt: str) -> None:
    """ex2.approx of a 16-bit NaN: 0x7FFF."""
    x = _array(data.draw(nans(fmt)), fmt)
    assert _run(lambda k, v: k.un("ex2", fmt, v[0], mode="approx"), [x], [fmt],
                fmt) == {HALF_NAN}


CONVERSIONS = [("f16", "f32", "rn", ""), ("bf16", "f32", "rn", ""), ("f16", "f32", "rz", ""),
               ("bf16", "f32", "rm", ""), ("f16", "f32", "rn", "satfinite"),
               ("bf16", "f32", "rn", "satfinite"), ("f32", "f16", "", ""),
               ("f32", "bf16", "", ""), ("f32", "f64", "rn", ""), ("f64", "f32", "", ""),
               ("f16", "f64", "rn", ""), ("f32", "f32", "rni", ""), ("f32", "f32", "rzi", ""),
               ("f16", "bf16", "rn", "")]


@pytest.mark.parametrize("conversion", CONVERSIONS, ids="-".join)
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_cvt_of_a_nan_writes_the_destinations_canonical_nan(
        data: st.DataObject, conversion: tuple[str, str, str, str]) -> None:
    """cvt of a NaN of any payload: to a 16-bit float, and from f16 to f32, the canonical
    NaN (NumPy and ml_dtypes keep the payload's top bits and the sign); from f64 or bf16
    to f32 and to f64 the payload as NumPy's conversion keeps it; rounding to an
    integral value in the same format, the NaN's own bits. One case per conversion, so
    that a GPU cross-check names the conversion whose bits differ."""
    to, frm, rnd, sat = conversion
    target = "sm_90a" if "bf16" in (to, frm) and "f32" not in (to, frm) else "sm_80"
    x = _array(data.draw(nans(frm)), frm)
    got = run_map(lambda k, v: k.cvt(to, frm, v[0], rnd=rnd, sat=sat), [x], [frm], to,
                  target=target)
    if to in ("f16", "bf16") or (to, frm) == ("f32", "f16"):
        assert _bits(got) == {CANONICAL[to]}
    elif to == frm:
        assert _bits(got) == _bits(x)
    else:
        with np.errstate(invalid="ignore"):  # NumPy warns on signalling NaNs
            want = x.astype(FORMATS[to][3])
        assert _bits(got) == _bits(want)


@settings(max_examples=10, deadline=None)
@given(bits=nans("f32"), to=st.sampled_from(["f16x2", "bf16x2"]))
def test_packing_cvt_of_nans(bits: list[int], to: str) -> None:
    """cvt.rn.f16x2.f32 / bf16x2 of a NaN and a finite value: 0x7FFF in the NaN's half."""
    x, y = _array(bits, "f32"), np.full(N, 1.0, np.float32)
    got = run_map(lambda k, v: k.cvt(to, "f32", *v, rnd="rn"), [x, y], ["f32", "f32"], to)
    one = int(np.array(1.0, FORMATS[to[:-2]][3]).view(np.uint16))
    assert _bits(got) == {HALF_NAN << 16 | one}


@settings(max_examples=10, deadline=None)
@given(bits=nans("f32"))
def test_moves_keep_a_nans_bits(bits: list[int]) -> None:
    """mov, selp, ld and st move bits: a NaN keeps its payload and sign."""
    x = _array(bits, "f32")

    def body(k: Kernel, v: list[Value]) -> Value:
        moved = k.op(target_ops.Unary("mov", "f32"), v[0])
        return k.selp("f32", moved, k.const(1.0, "f32"), k.setp("nan", "f32", moved, moved))
    got = run_map(body, [x], ["f32"], "f32")
    assert got.view(np.uint32).tolist() == x.view(np.uint32).tolist()


@settings(max_examples=10, deadline=None)
@given(bits=nans("bf16"), tensor_cores=st.sampled_from(["exact", "hopper"]),
       epilogue=st.booleans())
def test_tensor_core_accumulations_of_a_nan(bits: list[int], tensor_cores: str,
                                            epilogue: bool) -> None:
    """mma.sync with a NaN in A's row 0: D's row 0 is 0x7FFFFFFF, held wide (under
    "exact") or not, and after a wide add.f32 that keeps it; the other rows are the
    exact products."""
    a = np.ones((16, 16), BF16)
    a[0, :] = _array(bits, "bf16")[:16]
    bt = np.ones((8, 16), BF16)
    d = np.zeros((16, 8), np.float32)
    add = (lambda k, v: k.bin("add", "f32", v, k.const(-1.0, "f32"))) if epilogue else None
    run_target(_mma_kernel(add).build(), [a, bt, d], tensor_cores=tensor_cores)
    assert _bits(d[0]) == {F32_NAN}
    assert (d[1:] == (15.0 if epilogue else 16.0)).all()


@settings(max_examples=10, deadline=None)
@given(bits=nans("f32"))
def test_red_add_of_a_nan(bits: list[int]) -> None:
    """red.global.add.f32 of a NaN into a word: 0x7FFFFFFF."""
    k = Kernel("red", [U64, U64], block=(32,))
    t = k.tid()
    k.op(target_ops.Reduce("global", "add", "f32"), k.elem_addr(k.args[1], t, 4),
         k.ld("global", "f32", k.elem_addr(k.args[0], t, 4)))
    x = _array(bits, "f32")[:32].copy()
    out = np.ones(32, np.float32)
    run_target(k.build(), [x, out])
    assert _bits(out) == {F32_NAN}


_WMMA = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pd)
{
    .reg .f32 %f<12>;
    .reg .b32 %r<18>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pd];
    mov.u32 %r1, 16;
    wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}, [%rd1], %r1;
    wmma.load.b.sync.aligned.col.m16n16k16.global.f16 {%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}, [%rd2], %r1;
    mov.f32 %f2, 0f00000000;
    wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {%f3, %f4, %f5, %f6, %f7, %f8, %f9, %f10}, {%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}, {%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}, {%f2, %f2, %f2, %f2, %f2, %f2, %f2, %f2};
    wmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd3], {%f3, %f4, %f5, %f6, %f7, %f8, %f9, %f10}, %r1;
    ret;
}
"""  # noqa: E501


@pytest.mark.parametrize("tensor_cores", ["exact", "hopper"])
def test_wmma_of_a_nan_and_of_inf_times_zero(tensor_cores: str) -> None:
    """wmma.mma writes the canonical NaN as mma.sync and wgmma do: for inf * 0 (row 0)
    and for a NaN operand (row 1), stored straight from D."""
    import tessera as ts

    a = np.ones((16, 16), np.float16)
    a[0, 0], a[1, :] = np.inf, np.float16(np.nan)
    b = np.zeros((16, 16), np.float16)
    d = np.zeros((16, 16), np.float32)
    ts.ptx.load(_WMMA).kernel("k").run(grid=1, block=32, args=[a, b, d],
                                       tensor_cores=tensor_cores)
    assert _bits(d[0, :1]) == _bits(d[1]) == {F32_NAN}
    assert (d[2:] == 0).all()
