"""Instructions nvcc writes for CUDA intrinsics that the reader composes of others, each
against a reference written here from the PTX ISA's text: ``fns`` (``__fns``) from its
pseudocode, ``set`` of packed halves (``__hlt2``, ``h2exp``) from IEEE comparisons,
``fma.relu``/``fma.sat`` of halves (``__hfma2_relu``, ``__hfma2_sat``) from the exact
product-sum rounded once; and the special registers ``%smid``, ``%nsmid``, ``%nwarpid``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.arch.limits import SM_COUNT, WARP_SLOTS


def _kernel(body: str, loads: int, target: str = "sm_80") -> ts.ptx.PtxKernel:
    """A kernel of one thread per element: ``loads`` b32 inputs ``%r1..`` from arrays, the
    b32 result ``%r9`` stored to the last array."""
    params = ", ".join(f".param .u64 p{k}" for k in range(loads + 1))
    lines = [f"ld.param.u64 %rd{k + 1}, [p{k}];" for k in range(loads + 1)]
    lines += ["mov.u32 %r20, %tid.x;", "mul.wide.u32 %rd10, %r20, 4;"]
    for k in range(loads):
        lines += [f"add.s64 %rd{11 + k}, %rd{k + 1}, %rd10;",
                  f"ld.global.b32 %r{k + 1}, [%rd{11 + k}];"]
    lines += [body, f"add.s64 %rd20, %rd{loads + 1}, %rd10;", "st.global.b32 [%rd20], %r9;",
              "ret;"]
    head = f".version 8.0\n.target {target}\n.address_size 64\n"
    text = (head + f".visible .entry k({params})\n{{\n.reg .pred %p<4>;\n.reg .b32 %r<24>;\n"
            ".reg .f32 %f<4>;\n.reg .b64 %rd<24>;\n" + "\n".join(lines) + "\n}\n")
    return ts.ptx.load(text).kernel("k")


def _fns_reference(mask: int, base: int, offset: int) -> int:
    """The PTX ISA's pseudocode of ``fns``, step by step."""
    if offset == 0:
        return base if mask >> base & 1 else 0xFFFFFFFF
    pos, count, inc = base, abs(offset) - 1, 1 if offset > 0 else -1
    while 0 <= pos < 32:
        if mask >> pos & 1:
            if count == 0:
                return pos
            count -= 1
        pos += inc
    return 0xFFFFFFFF


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 31),
                          st.integers(-40, 40)), min_size=32, max_size=32))
def test_fns_follows_the_isas_pseudocode(cases: list[tuple[int, int, int]]) -> None:
    cases[:4] = [(0xAAAAAAAA, 3, 1), (0xAAAAAAAA, 3, -1), (0xAAAAAAAA, 2, 1),
                 (0xAAAAAAAA, 2, -1)]  # the ISA's examples: 3, 3, 3, 1
    mask, base, offset = (np.array(c, dt) for c, dt in zip(zip(*cases), ("u4", "u4", "i4")))
    out = np.zeros(32, np.uint32)
    _kernel("fns.b32 %r9, %r1, %r2, %r3;", 3).run(block=32, args=[mask, base, offset, out])
    np.testing.assert_array_equal(out, [_fns_reference(*c) for c in cases])
    assert out[:4].tolist() == [3, 3, 3, 1]


_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}


@pytest.mark.parametrize("half, dtype", [("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
@pytest.mark.parametrize("cmp", ["eq", "ne", "lt", "le", "gt", "ge", "equ", "ltu", "num", "nan"])
def test_set_of_packed_halves_compares_each_half(half: str, dtype: type, cmp: str) -> None:
    """``set.cmp.f16x2.f16x2`` and ``.u32.f16x2``: 1.0 or all ones per half; the ordered
    comparisons are false and the ``u`` ones true beside a NaN."""
    rng = np.random.default_rng(hash(cmp) % 1000)
    pool = np.array([0.0, -0.0, 1.0, -1.5, 2.0, np.inf, -np.inf, np.nan, 0.5, 3.0], dtype)
    x, y = (pool[rng.integers(0, len(pool), 64)] for _ in range(2))
    a, b = (v.view(np.uint16).reshape(32, 2).copy().view(np.uint32).reshape(32) for v in (x, y))
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    unordered = np.isnan(xf) | np.isnan(yf)
    if cmp == "num":
        want = ~unordered
    elif cmp == "nan":
        want = unordered
    elif cmp.endswith("u"):
        want = _COMPARE[cmp[:-1]](xf, yf) | unordered
    else:
        want = _COMPARE[cmp](xf, yf) & ~unordered
    one = 0x3C00 if half == "f16" else 0x3F80
    for to, yes in ((f"{half}x2", one), ("u32", 0xFFFF)):  # bf16 pairs: sm_90 on
        k = _kernel(f"set.{cmp}.{to}.{half}x2 %r9, %r1, %r2;", 2,
                    "sm_90" if half == "bf16" else "sm_80")
        out = np.zeros(32, np.uint32)
        k.run(block=32, args=[a, b, out])
        np.testing.assert_array_equal(out.view(np.uint16).reshape(64),
                                      np.where(want, yes, 0).astype(np.uint16))


def _round_f16(v: np.ndarray) -> np.ndarray:
    """float64 values (exact product-sums) rounded once to f16 (NumPy rounds to nearest
    even from float64 directly)."""
    return v.astype(np.float16)


@pytest.mark.parametrize("clamp", ["relu", "sat"])
def test_fma_relu_and_sat_of_half_pairs(clamp: str) -> None:
    rng = np.random.default_rng(7 if clamp == "relu" else 8)
    vals = np.concatenate([rng.normal(0, 2, 180), [np.nan, np.inf, -np.inf, 0.5, -0.5]])
    x, y, z = (rng.choice(vals, 64).astype(np.float16) for _ in range(3))
    exact = x.astype(np.float64) * y.astype(np.float64) + z.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        r = _round_f16(exact).astype(np.float64)
        if clamp == "relu":
            want = np.where(np.isnan(r), np.nan, np.maximum(r, 0.0))
        else:
            want = np.where(np.isnan(r), 0.0, np.clip(r, 0.0, 1.0))
    a, b, c = (v.view(np.uint32) for v in (x, y, z))
    out = np.zeros(32, np.uint32)
    _kernel(f"fma.rn.{clamp}.f16x2 %r9, %r1, %r2, %r3;", 3).run(block=32, args=[a, b, c, out])
    got = out.view(np.float16).astype(np.float64)
    bits = out.view(np.uint16)
    nan = np.isnan(want)
    assert (bits[nan] == 0x7FFF).all()  # the canonical NaN of .relu
    np.testing.assert_array_equal(got[~nan], want[~nan])


def test_sm_and_warp_slot_registers() -> None:
    k = _kernel("mov.u32 %r4, %smid; mov.u32 %r5, %nsmid; mov.u32 %r6, %nwarpid;\n"
                "mad.lo.u32 %r7, %r5, 1000, %r4; mad.lo.u32 %r9, %r6, 100000, %r7;", 0)
    out = np.zeros(32, np.uint32)
    k.run(grid=1, block=32, args=[out])
    assert set(out.tolist()) == {WARP_SLOTS * 100000 + SM_COUNT * 1000 + 0}


@pytest.mark.parametrize("to, dtype, rnd", [("f16x2", np.float16, "rn"),
                                            ("bf16x2", ml_dtypes.bfloat16, "rn"),
                                            ("f16x2", np.float16, "rz")])
def test_cvt_relu_to_half_pairs(to: str, dtype: type, rnd: str) -> None:
    """``cvt.{rn,rz}.relu.f16x2.f32 d, a, b``: ``a`` into the upper half, each rounded
    once, a negative to zero and a NaN to the canonical NaN 0x7FFF."""
    rng = np.random.default_rng(3)
    a, b = (np.concatenate([rng.normal(0, 100, 30), [np.nan, -np.inf]]).astype(np.float32)
            for _ in range(2))
    out = np.zeros(32, np.uint32)
    _kernel(f"mov.b32 %f1, %r1; mov.b32 %f2, %r2;\ncvt.{rnd}.relu.{to}.f32 %r9, %f1, %f2;", 2
            ).run(block=32, args=[a.view(np.uint32), b.view(np.uint32), out])

    def half(v: np.ndarray) -> np.ndarray:
        if rnd == "rz":  # toward zero: the nearest value of no greater magnitude
            near = v.astype(dtype)
            over = np.abs(near.astype(np.float64)) > np.abs(v.astype(np.float64))
            near = np.where(over, np.nextafter(near, np.zeros_like(near)), near)
        else:
            near = v.astype(dtype)
        bits = near.view(np.uint16)
        bits = np.where(np.isnan(v), 0x7FFF, np.where(v < 0, 0, bits))
        return bits.astype(np.uint32)

    np.testing.assert_array_equal(out, half(a) << 16 | half(b))


def test_brkpt_ends_the_launch_and_pmevent_changes_nothing() -> None:
    out = np.zeros(32, np.uint32)
    _kernel("pmevent 3;\nmov.u32 %r9, 7;", 0).run(block=32, args=[out])
    assert (out == 7).all()
    with pytest.raises(ts.TesseraError, match="executed brkpt, which ends the launch"):
        _kernel("setp.eq.u32 %p1, %r20, 5;\n@%p1 brkpt;\nmov.u32 %r9, 7;", 0).run(
            block=32, args=[out])
