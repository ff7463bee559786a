"""Tensor-core paths of the Target IR interpreter: cp.async + ldmatrix + mma.sync (sm_80),
TMA + mbarrier + wgmma (sm_90a), checked against float64 NumPy products.

The register and shared layouts used to build these kernels are written from the PTX
ISA's text (and /work/shared/PTX-NOTES.md), not from tessera.arch, so that a wrong
layout in either place makes a test fail.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

from tessera.interp.target import run_target
from tessera.interp.target import runner as target_runner
from tessera.interp.target.state import TargetFault
from tessera.ir.core import Value
from tests.interp.target.kit import U64, Kernel, async_ops, target_ops

BF16 = ml_dtypes.bfloat16


def _bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(BF16)


def _exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A @ B in float64 (exact for these bf16 sizes), rounded once to float32."""
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def _cp_async_rows(k: Kernel, src: Value, dst: Value, chunks: int, t: Value) -> None:
    """Thread t < chunks copies 16-byte chunk t of ``src`` to ``dst`` with cp.async."""
    def copy() -> None:
        ga = k.elem_addr(src, t, 16)
        sa = k.sh_addr(dst, t, 16)
        k.op(async_ops.CpAsync(16, "cg"), sa, ga)
    k.if_(k.setp("lt", "u32", t, k.const(chunks, "u32")), copy)


def _mma_kernel(epilogue: Callable[[Kernel, Value], Value] | None = None,
                out: str = "f32") -> Kernel:
    """D (16x8 f32) = A (16x16 bf16, row-major) @ B, with Bt = B^T (8x16) in global;
    ``epilogue`` maps each accumulator register before it is stored as ``out``."""
    k = Kernel("mma16816", [U64, U64, U64], block=(32,))
    pa, pbt, pd = k.args
    t = k.tid()
    sa = k.shared("sA", 512, 128)
    sb = k.shared("sB", 256, 128)
    _cp_async_rows(k, pa, sa, 32, t)
    _cp_async_rows(k, pbt, sb, 16, t)
    k.op(async_ops.CpAsyncCommit())
    k.op(async_ops.CpAsyncWait(0))
    k.bar()
    # ldmatrix.x4 over A (PTX ISA sec. 9.7.14.5.15): lanes 8m..8m+7 address the rows of
    # matrix m; matrix m covers rows 8*(m%2).., k 8*(m//2).. so that register m matches
    # the A fragment order a0a1 / a2a3 / a4a5 / a6a7 of sec. 9.7.14.5.8.
    mat = k.bin("shr", "u32", t, k.const(3, "u32"))
    r = k.bin("and", "u32", t, k.const(7, "u32"))
    row = k.bin("add", "u32", r, k.bin("mul", "u32", k.bin("and", "u32", mat,
                                                             k.const(1, "u32")),
                                          k.const(8, "u32")))
    kblk = k.bin("shr", "u32", mat, k.const(1, "u32"))
    a_off = k.bin("add", "u32", k.bin("mul", "u32", row, k.const(32, "u32")),
                  k.bin("mul", "u32", kblk, k.const(16, "u32")))
    afrag = k.op(target_ops.Unary("mov", "u32"), k.bin("add", "u32", sa, a_off))
    a_regs = k.op(async_ops.Ldmatrix(4), afrag)
    # ldmatrix.x2 over Bt: matrix m = rows n 0..7, k 8m..8m+7 (b0b1, b2b3)
    b_off = k.bin("add", "u32", k.bin("mul", "u32", r, k.const(32, "u32")),
                  k.bin("mul", "u32", k.bin("and", "u32", mat, k.const(1, "u32")),
                        k.const(16, "u32")))
    b_regs = k.op(async_ops.Ldmatrix(2), k.bin("add", "u32", sb, b_off))
    zero = k.const(0.0, "f32")
    acc = k.pack("f32", zero, zero, zero, zero)
    d = k.op(async_ops.MmaSync("m16n8k16", "bf16", "bf16"), a_regs, b_regs, acc)
    # C/D fragment: c0,c1 at (g, 2t..2t+1), c2,c3 at (g+8, 2t..2t+1)
    g = k.bin("shr", "u32", t, k.const(2, "u32"))
    tq = k.bin("and", "u32", t, k.const(3, "u32"))
    for i, v in enumerate(k.unpack("f32", 4, d)):
        rr = k.bin("add", "u32", g, k.const(8 * (i >> 1), "u32"))
        cc = k.bin("add", "u32", k.bin("mul", "u32", tq, k.const(2, "u32")),
                   k.const(i & 1, "u32"))
        idx = k.bin("add", "u32", k.bin("mul", "u32", rr, k.const(8, "u32")), cc)
        size = 2 if out == "bf16" else 4
        k.st("global", out, k.elem_addr(pd, idx, size), epilogue(k, v) if epilogue else v)
    return k


def test_ldmatrix_mma_sync_m16n8k16_equals_float64_product() -> None:
    """cp.async -> ldmatrix.x4/.x2 -> mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32
    (PTX ISA sec. 9.7.14.5.8 fragments, 9.7.14.5.15 ldmatrix)."""
    rng = np.random.default_rng(1)
    a, b = _bf16(rng, (16, 16)), _bf16(rng, (16, 8))
    d = np.zeros((16, 8), np.float32)
    run_target(_mma_kernel().build(), [a, np.ascontiguousarray(b.T), d])
    np.testing.assert_array_equal(d, _exact(a, b))


def test_mma_reads_cp_async_destination_before_wait() -> None:
    """Dropping cp.async.wait_group makes ldmatrix read bytes still in flight."""
    k = _mma_kernel()
    fn = k.build()
    fn.body.instrs = [i for i in fn.body.instrs if not isinstance(i.op, async_ops.CpAsyncWait)]
    rng = np.random.default_rng(2)
    a, bt = _bf16(rng, (16, 16)), _bf16(rng, (8, 16))
    with pytest.raises(TargetFault, match="async copy read before its wait"):
        run_target(fn, [a, bt, np.zeros((16, 8), np.float32)])


def _wide_inputs() -> tuple[np.ndarray, np.ndarray]:
    """A with row 0 = [1, 2^-8, 2^-30, 0...], B all ones: D[0, :] = 1 + 2^-8 + 2^-30,
    exact in float64; float32 rounds it to 1 + 2^-8, a bf16 tie that goes to 1.0."""
    a = np.zeros((16, 16), BF16)
    a[0, :3] = [1.0, 2.0**-8, 2.0**-30]
    return a, np.ones((8, 16), BF16)


@pytest.mark.parametrize(("epilogue", "out", "expect"), [
    (None, "f32", np.float32(1 + 2.0**-8)),  # st rounds the wide value once
    (lambda k, v: k.bin("sub", "f32", v, k.const(1.0, "f32")), "f32",
     np.float32(2.0**-8 + 2.0**-30)),  # sub keeps it wide: nothing is lost
    (lambda k, v: k.bin("sub", "f32", k.bin("mul", "f32", v, k.const(1.0, "f32")),
                        k.const(1.0, "f32")), "f32", np.float32(2.0**-8)),  # mul rounds
    (lambda k, v: k.cvt("bf16", "f32", v, rnd="rn"), "bf16", BF16(1 + 2.0**-7)),  # once
    (lambda k, v: k.cvt("bf16", "f32", k.un("sqrt", "f32", k.bin("mul", "f32", v, v)),
                        rnd="rn"), "bf16", BF16(1.0)),  # narrowed first: tie to even
])
def test_wide_accumulator_rounds_once(epilogue: Callable[[Kernel, Value], Value] | None,
                                      out: str, expect: np.generic) -> None:
    """mma results stay float64 through add/sub and round once where they leave
    (tessera.ir.dialects.target.ops convention, matching Tile IR)."""
    a, bt = _wide_inputs()
    d = np.zeros((16, 8), BF16 if out == "bf16" else np.float32)
    run_target(_mma_kernel(epilogue, out).build(), [a, bt, d])
    assert d.dtype == expect.dtype
    assert np.all(d[0] == expect), d[0]


# ------------------------------------------------------------------ a tiled GEMM (sm_80)
def _gemm_kernel(m: int, n: int, kdim: int) -> Kernel:
    """C = A @ B with Bt = B^T in global: 32x32 CTA tiles, 4 warps of 16x16, BK = 32;
    per K block: cp.async (one 16-byte chunk of A and of Bt per thread), wait, bar.sync,
    two k16 steps of ldmatrix.x4 + two mma.sync each, bar.sync."""
    k = Kernel("gemm", [U64, U64, U64], block=(128,), grid=(n // 32, m // 32, 1))
    pa, pbt, pc = k.args
    c32 = lambda v: k.const(v, "u32")  # noqa: E731
    t, lane, warp = k.tid(), k.sreg("laneid"), k.sreg("warpid")
    m0 = k.bin("mul", "u32", k.sreg("ctaid.y"), c32(32))
    n0 = k.bin("mul", "u32", k.sreg("ctaid.x"), c32(32))
    sa, sb = k.shared("sA", 2048, 128), k.shared("sB", 2048, 128)
    row, chunk = k.bin("shr", "u32", t, c32(2)), k.bin("and", "u32", t, c32(3))
    dst_off = k.bin("add", "u32", k.bin("mul", "u32", row, c32(64)),
                    k.bin("mul", "u32", chunk, c32(16)))
    mat, r = k.bin("shr", "u32", lane, c32(3)), k.bin("and", "u32", lane, c32(7))
    lo, hi = k.bin("and", "u32", mat, c32(1)), k.bin("shr", "u32", mat, c32(1))
    wm = k.bin("mul", "u32", k.bin("shr", "u32", warp, c32(1)), c32(16))
    wn = k.bin("mul", "u32", k.bin("and", "u32", warp, c32(1)), c32(16))
    # A: matrix = (rows +8*(mat%2), k +8*(mat//2)); Bt: (n +8*(mat//2), k +8*(mat%2))
    a_row = k.bin("add", "u32", wm, k.bin("add", "u32", r, k.bin("mul", "u32", lo, c32(8))))
    a_k = k.bin("mul", "u32", hi, c32(16))
    b_row = k.bin("add", "u32", wn, k.bin("add", "u32", r, k.bin("mul", "u32", hi, c32(8))))
    b_k = k.bin("mul", "u32", lo, c32(16))
    a_lane = k.bin("add", "u32", sa, k.bin("add", "u32", k.bin("mul", "u32", a_row, c32(64)),
                                           a_k))
    b_lane = k.bin("add", "u32", sb, k.bin("add", "u32", k.bin("mul", "u32", b_row, c32(64)),
                                           b_k))
    z = k.const(0.0, "f32")
    acc0 = k.pack("f32", z, z, z, z)

    def kblock(kb: Value, c0: Value, c1: Value) -> list[Value]:
        k0 = k.cvt("u32", "s32", kb)
        for src, base, d in ((pa, m0, sa), (pbt, n0, sb)):
            elem = k.bin("add", "u32", k.bin("mul", "u32", k.bin("add", "u32", base, row),
                                             c32(kdim)), k0)
            g = k.bin("add", "u64", k.elem_addr(src, elem, 2),
                      k.cvt("u64", "u32", k.bin("mul", "u32", chunk, c32(16))))
            k.op(async_ops.CpAsync(16), k.bin("add", "u32", d, dst_off), g)
        k.op(async_ops.CpAsyncCommit())
        k.op(async_ops.CpAsyncWait(0))
        k.bar()
        for kk in range(2):
            af = k.op(async_ops.Ldmatrix(4), k.bin("add", "u32", a_lane, c32(32 * kk)))
            bf = k.unpack("b32", 4, k.op(async_ops.Ldmatrix(4), k.bin("add", "u32", b_lane,
                                                              c32(32 * kk))))
            c0 = k.op(async_ops.MmaSync("m16n8k16", "bf16", "bf16"), af, k.pack("b32", *bf[:2]), c0)
            c1 = k.op(async_ops.MmaSync("m16n8k16", "bf16", "bf16"), af, k.pack("b32", *bf[2:]), c1)
        k.bar()
        return [c0, c1]
    s32 = lambda v: k.const(v, "s32")  # noqa: E731
    accs = k.for_(s32(0), s32(kdim), s32(32), [acc0, acc0], kblock)
    g, q2 = k.bin("shr", "u32", lane, c32(2)), k.bin("mul", "u32", k.bin("and", "u32", lane,
                                                                          c32(3)), c32(2))
    for j, acc in enumerate(accs):
        for i, v in enumerate(k.unpack("f32", 4, acc)):
            rr = k.bin("add", "u32", k.bin("add", "u32", m0, wm), k.bin("add", "u32", g,
                                                                        c32(8 * (i >> 1))))
            cc = k.bin("add", "u32", k.bin("add", "u32", n0, wn),
                       k.bin("add", "u32", q2, c32(8 * j + (i & 1))))
            idx = k.bin("add", "u32", k.bin("mul", "u32", rr, c32(n)), cc)
            k.st("global", "f32", k.elem_addr(pc, idx, 4), v)
    return k


def test_gemm_128_cubed_on_16_ctas() -> None:
    """A 128x128x128 bf16 GEMM through cp.async, ldmatrix, mma.sync and a K loop equals
    the float64 product rounded once (K sums of bf16 products are exact in float64)."""
    rng = np.random.default_rng(9)
    a, b = _bf16(rng, (128, 128)), _bf16(rng, (128, 128))
    c = np.zeros((128, 128), np.float32)
    run_target(_gemm_kernel(128, 128, 128).build(), [a, np.ascontiguousarray(b.T), c])
    np.testing.assert_array_equal(c, _exact(a, b))


@pytest.mark.parametrize("model", ["exact", "hopper"])
def test_lazy_mma_sync_results_equal_the_scattered_ones(model: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """mma.sync chains hand their accumulator matrices on as lazy register values; the
    bits equal those of a plain register list, where each mma.sync scatters its result
    into registers, under both tensor-core models (wide exponent ranges: the hopper
    model rounds)."""
    rng = np.random.default_rng(10)
    a, b = _bf16(rng, (128, 128)), _bf16(rng, (128, 128))
    a[::5] *= np.float32(2.0**18)
    outs = []
    for lazy in (True, False):
        if not lazy:  # a plain register list: every value is made at once
            monkeypatch.setattr(target_runner, "RegisterFile", list)
        c = np.zeros((128, 128), np.float32)
        run_target(_gemm_kernel(128, 128, 128).build(), [a, np.ascontiguousarray(b.T), c],
                   tensor_cores=model)
        outs.append(c)
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    if model == "exact":
        np.testing.assert_array_equal(outs[0], _exact(a, b))
