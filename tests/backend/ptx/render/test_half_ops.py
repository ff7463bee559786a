"""Half-precision Target IR: packed ``f16x2``/``bf16x2`` arithmetic, the fp8 pair
conversions and the half-precision atomics render to PTX that ptxas accepts; read back,
the text computes what the structured Target IR computes, and both agree with NumPy
(float64 arithmetic rounded once per element through ``ml_dtypes``)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.render import render
from tessera.backend.ptx.render.regalloc import RenderError
from tessera.interp.target import run_target
from tessera.ir.core import Builder, Value
from tessera.ir.dialects.target import RegType, Return
from tessera.ir.dialects.target import ptx_ops as p
from tessera.ir.dialects.target.ops import Binary, Cvt, Fma, Load, Pack, Reduce, Special, Unary
from tests.backend.ptx.render.test_render import c, do, kernel, one, ptxas
from tests.frontend.ptx.corpus import rounded

U64 = RegType("u64")
F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
N = 128
#: what the kernel writes, one 32-bit word per thread each
RESULTS = ("add", "sub", "mul", "min", "max", "fma", "neg", "abs", "ex2", "bf16 add",
           "bf16 fma", "e4m3 of f32", "e5m2 of f16x2", "f16x2 of e4m3")


def _word(b: Builder, base: Value, tid: Value, k: int, stride: int = N) -> Value:
    """The address of 32-bit word ``k * stride + tid`` of ``base``."""
    index = one(b, Binary("add", "u32"), tid, c(b, stride * k, "u32"))
    return one(b, Binary("add", "u64"), base, one(b, Binary("mul", "u32", "wide"), index,
                                                  c(b, 4, "u32")))


def build() -> object:
    fn, b, (out, src, sums) = kernel("half_ops", [U64, U64, U64], target="sm_90a")
    tid = one(b, Special("tid.x"))
    x, y, z = (one(b, Load("global", "f16x2"), _word(b, src, tid, k))
               for k in range(3))
    bx, by = (one(b, Load("global", "bf16x2"), _word(b, src, tid, k)) for k in (3, 4))
    f, g = (one(b, Load("global", "f32"), _word(b, src, tid, k)) for k in (5, 6))
    half = [one(b, Binary(op, "f16x2"), x, y) for op in ("add", "sub", "mul", "min", "max")]
    half += [one(b, Fma("f16x2"), x, y, z), one(b, Unary("neg", "f16x2"), x),
             one(b, Unary("abs", "f16x2"), y), one(b, Unary("ex2", "f16x2", "approx"), z),
             one(b, Binary("add", "bf16x2"), bx, by), one(b, Fma("bf16x2"), bx, by, bx)]
    e4 = one(b, Cvt("e4m3x2", "f32", "rn", "satfinite"), f, g)
    e5 = one(b, Cvt("e5m2x2", "f16x2", "rn", "satfinite"), x)
    pairs = [one(b, Pack("b32"), e4, c(b, 0, "b16")), one(b, Pack("b32"), e5, c(b, 0, "b16")),
             one(b, Cvt("f16x2", "e4m3x2", "rn"), e4)]
    for k, v in enumerate(half + pairs):
        b.create(p.GenericStore(v.type.elem), [_word(b, out, tid, k), v])  # type: ignore[attr-defined]
    lane = one(b, Binary("and", "u32"), tid, c(b, 3, "u32"))
    do(b, Reduce("global", "add", "f16x2"), _word(b, sums, lane, 0), z)
    do(b, Reduce("global", "add", "bf16x2"), _word(b, sums, lane, 1, 4), bx)
    do(b, Return())
    return fn


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(11)
    halves = rng.standard_normal((3, 2 * N)).astype(F16)
    halves[:, :6] = [[0, -0.0, np.inf, np.nan, 6e-5, 2**-24]] * 3
    halves[1, :6] = [1, 2, -np.inf, 1, -6e-5, 2**-24]
    bf = rng.standard_normal((2, 2 * N)).astype(BF16)
    floats = (rng.standard_normal((2, N)) * 200).astype(np.float32)
    floats[:, :4] = [[500, np.inf, np.nan, -1e-3]] * 2
    return np.concatenate([halves.view(np.uint32).ravel(), bf.view(np.uint32).ravel(),
                           floats.view(np.uint32).ravel()])


def _halves(words: np.ndarray, dt: np.dtype) -> np.ndarray:
    return words.astype(np.uint32).view(dt).astype(np.float64)


def test_half_ops_render_assemble_and_read_back(tmp_path: Path) -> None:
    fn = build()
    text = render(fn)
    for form in ("add.f16x2", "fma.rn.bf16x2", "ex2.approx.f16x2",
                 "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f16x2",
                 "cvt.rn.f16x2.e4m3x2", "red.global.add.noftz.bf16x2"):
        assert form in text, form
    ptxas(text, "sm_90a", tmp_path)
    src = _inputs()

    def arguments() -> list[np.ndarray]:
        return [np.zeros(len(RESULTS) * N, np.uint32), src.copy(), np.zeros(8, np.uint32)]

    structured, from_text = arguments(), arguments()
    run_target(fn, structured, grid=(1,), block=(N,))
    ts.ptx.load(text).kernel("half_ops").run(grid=1, block=N, args=from_text)
    for s, t in zip(structured, from_text):
        np.testing.assert_array_equal(t, s)

    got = structured[0].reshape(len(RESULTS), N)
    x, y, z = (_halves(src[k * N:(k + 1) * N], F16) for k in range(3))
    bx, by = (_halves(src[(3 + k) * N:(4 + k) * N], BF16) for k in range(2))
    f, g = (src[(5 + k) * N:(6 + k) * N].view(np.float32).astype(np.float64) for k in range(2))
    with np.errstate(invalid="ignore", over="ignore"):
        exact = {"add": x + y, "sub": x - y, "mul": x * y, "min": np.fmin(x, y),
                 "max": np.fmax(x, y), "fma": x * y + z, "ex2": np.exp2(z)}
    words = src.view(np.uint16)  # neg and abs change the sign bit, NaNs included
    np.testing.assert_array_equal(got[RESULTS.index("neg")].view(np.uint16),
                                  words[:2 * N] ^ 0x8000)
    np.testing.assert_array_equal(got[RESULTS.index("abs")].view(np.uint16),
                                  words[2 * N:4 * N] & 0x7FFF)
    for name, want in exact.items():  # f16 sums and products are exact in float64, and
        # so are the fma's for these magnitudes; ex2's model is 2^x correctly rounded
        row = got[RESULTS.index(name)].view(np.uint16)
        np.testing.assert_array_equal(row, rounded(want, F16), err_msg=name)
    np.testing.assert_array_equal(got[RESULTS.index("bf16 add")].view(np.uint16),
                                  rounded(bx + by, BF16))
    np.testing.assert_array_equal(got[RESULTS.index("bf16 fma")].view(np.uint16),
                                  rounded(bx * by + bx, BF16))
    e4 = got[RESULTS.index("e4m3 of f32")]  # {f, g}: the first operand in the high byte
    np.testing.assert_array_equal(e4 & 0xFF, rounded(g, E4M3))
    np.testing.assert_array_equal(e4 >> 8, rounded(f, E4M3))
    e5 = got[RESULTS.index("e5m2 of f16x2")]  # each half to its byte, the low one first
    np.testing.assert_array_equal(np.stack([e5 & 0xFF, e5 >> 8], 1).ravel(),
                                  rounded(x, E5M2))
    widened = got[RESULTS.index("f16x2 of e4m3")].view(F16).astype(np.float64)
    fp8 = np.stack([rounded(g, E4M3), rounded(f, E4M3)], 1).ravel().view(E4M3)
    np.testing.assert_array_equal(rounded(widened, F16), rounded(fp8.astype(np.float64),
                                                                  F16))
    lanes = np.arange(N) % 4  # each lane's 32 packed adds, in thread order
    for word, (vals, dt) in enumerate([(z, F16), (bx, BF16)]):
        pairs = vals.reshape(N, 2)
        for lane in range(4):
            total = np.zeros(2, dt)
            for k in np.flatnonzero(lanes == lane):
                total = (total.astype(np.float64) + pairs[k]).astype(np.float32).astype(dt)
            sums = structured[2].reshape(2, 4)[word, lane]
            np.testing.assert_array_equal(np.array([sums], np.uint32).view(np.uint16),
                                          np.where(np.isnan(total), np.uint16(0x7FFF),
                                                   total.view(np.uint16)))


def test_fp8_pairs_need_sm89() -> None:
    fn, b, (out,) = kernel("fp8", [U64], target="sm_80")
    x = c(b, 1.0, "f32")
    b.create(p.GenericStore("b16"), [out, one(b, Cvt("e4m3x2", "f32", "rn", "satfinite"), x, x)])
    do(b, Return())
    with pytest.raises(RenderError, match="needs target sm_89 or later"):
        render(fn)
