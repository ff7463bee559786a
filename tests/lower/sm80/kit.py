"""Hand-built sm_80 kernels from the matrix building blocks of tessera.lower.sm80.gemm and
sm80.copy (GEMMs, an attention chain, a layout probe, a pipelined GEMM), and how the tests
run them under the Target IR interpreter and check them against float64 NumPy."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from tessera.ir.core import Block, Function, Value
from tessera.ir.dialects.target import RegType, Return
from tessera.ir.dialects.target.async_ops import CpAsyncCommit
from tessera.ir.dialects.target.ops import SharedAlloc
from tessera.ir.verifier import verify_function
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm80.copy import copy_async, wait_async
from tessera.lower.sm80.gemm import acc_rowcol, acc_to_a, mma_block, mma_block_regs, store_acc
from tessera.lower.tiles import GlobalBox, SharedBox, elem_size
from tessera.numerics.formats.convert import tf32_from_f32

U64 = RegType("u64")
NP_TYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "tf32": np.float32}


# ----------------------------------------------------------------------- kernel kit
def kernel(name: str, nparams: int, grid: tuple[int, ...],
           build: Callable[[TargetEmitter, list[Value]], None]) -> Function:
    """A verified sm_80 kernel of one 128-thread CTA per grid point over u64 pointers."""
    body = Block()
    params = [body.add_arg(U64, f"p{k}") for k in range(nparams)]
    e = TargetEmitter(body)
    build(e, params)
    e.op(Return())
    fn = Function(name, body, [], kind="ptx.kernel",
                  attrs={"target": "sm_80", "block": [128], "grid": list(grid)})
    verify_function(fn)
    return fn


def addr(e: TargetEmitter, base: Value, index: Value, esize: int) -> Value:
    """``base + index * esize`` (``index`` u32 elements)."""
    return e.add(base, e.bin("mul", index, e.const(esize, "u32"), "u32", "wide"), "u64")


def lin(e: TargetEmitter, *terms: tuple[Value, int]) -> Value:
    """``sum(v * k)`` in u32."""
    out = e.const(0, "u32")
    for v, k in terms:
        out = e.add(out, e.mul(v, e.const(k, "u32"), "u32"), "u32")
    return out


def smem(e: TargetEmitter, sym: str, rows: int, cols: int, elem: str, swizzle: int) -> SharedBox:
    size = rows * cols * elem_size(elem)
    return SharedBox(e.one(SharedAlloc(sym, size, 1024)), rows, cols, elem, swizzle, 1024)


def gemm(m: int, n: int, k: int, bm: int, bn: int, bk: int, *, a_trans: bool, b_trans: bool,
         swizzle: int, atype: str = "bf16", lda: int | None = None, ldb: int | None = None,
         chunk: int = 16, wait: bool = True, read_swizzle: int | None = None,
         ) -> Function:
    """C (m x n, f32) = A @ B on an (n/bn, m/bm) grid with a K loop of cp.async tiles.
    A is m x k row-major (k x m with ``a_trans``), B k x n (n x k with ``b_trans``).
    ``wait=False`` and ``read_swizzle`` plant bugs: no wait, or a reader that assumes
    another swizzle than the copy wrote."""
    lda = lda or (m if a_trans else k)
    ldb = ldb or (k if b_trans else n)

    def build(e: TargetEmitter, p: list[Value]) -> None:
        pa, pb, pc = p
        m0 = e.mul(e.sreg("ctaid.y"), e.const(bm, "u32"), "u32")
        n0 = e.mul(e.sreg("ctaid.x"), e.const(bn, "u32"), "u32")
        sa = smem(e, "sa", *((bk, bm) if a_trans else (bm, bk)), atype, swizzle)
        sb = smem(e, "sb", *((bn, bk) if b_trans else (bk, bn)), atype, swizzle)
        rs = swizzle if read_swizzle is None else read_swizzle
        ra, rb = (SharedBox(s.base, s.rows, s.cols, atype, rs) for s in (sa, sb))

        def tile(inner: TargetEmitter, ptr: Value, row: tuple[Value, int], col: tuple[Value, int],
                 ld: int) -> GlobalBox:
            """The (rows, cols) box at (row, col) of a row-major operand: origins and
            extents as (register, size) pairs."""
            start = lin(inner, (row[0], ld), (col[0], 1))
            return GlobalBox(addr(inner, ptr, start, elem_size(atype)), row[1], col[1], ld,
                             atype)

        def step(inner: TargetEmitter, kidx: Value, *acc: Value) -> list[Value]:
            k0 = inner.cvt(kidx, "u32", "s32")
            ga = tile(inner, pa, (k0, bk), (m0, bm), lda) if a_trans else \
                tile(inner, pa, (m0, bm), (k0, bk), lda)
            gb = tile(inner, pb, (n0, bn), (k0, bk), ldb) if b_trans else \
                tile(inner, pb, (k0, bk), (n0, bn), ldb)
            copy_async(inner, sa, ga, chunk=chunk)
            copy_async(inner, sb, gb, chunk=chunk)
            if wait:
                wait_async(inner)
            out = mma_block(inner, list(acc), ra, rb, a_trans=a_trans, b_trans=b_trans,
                            atype=atype)
            inner.bar()  # everyone is done reading before the next copy overwrites
            return out

        zero = e.const(0.0, "f32")
        acc = e.for_(e.const(0, "s32"), e.const(k, "s32"), e.const(bk, "s32"),
                     [zero] * (bm * bn // 128), step)
        store_acc(e, acc, addr(e, pc, lin(e, (m0, n), (n0, 1)), 4), n, bm, bn)

    return kernel("gemm", 3, (n // bn, m // bm), build)


def attention_chain(m: int, nk: int, d: int, *, v_trans: bool, swizzle: int,
                    atype: str = "bf16") -> Function:
    """O = round(Q @ K^T) @ V per 64-row block of Q: S from shared Q (m x d) and K
    (nk x d, the B^T case), P = S rounded to ``atype`` in registers (acc_to_a), then
    O from P and V (nk x d, or d x nk with ``v_trans``)."""

    def build(e: TargetEmitter, p: list[Value]) -> None:
        pq, pk, pv, po = p
        m0 = e.mul(e.sreg("ctaid.y"), e.const(64, "u32"), "u32")
        sq = smem(e, "sq", 64, d, atype, swizzle)
        sk = smem(e, "sk", nk, d, atype, swizzle)
        sv = smem(e, "sv", *((d, nk) if v_trans else (nk, d)), atype, swizzle)
        copy_async(e, sq, GlobalBox(addr(e, pq, lin(e, (m0, d)), 2), 64, d, d, atype))
        copy_async(e, sk, GlobalBox(pk, nk, d, d, atype))
        copy_async(e, sv, GlobalBox(pv, sv.rows, sv.cols, sv.cols, atype))
        wait_async(e)
        zero = e.const(0.0, "f32")
        s = mma_block(e, [zero] * (64 * nk // 128), sq, sk, a_trans=False, b_trans=True,
                      atype=atype)
        frags = acc_to_a(e, s, 64, nk, atype)
        o = mma_block_regs(e, [zero] * (64 * d // 128), frags, sv, b_trans=v_trans,
                           atype=atype)
        store_acc(e, o, addr(e, po, lin(e, (m0, d)), 4), d, 64, d)

    return kernel("chain", 4, (1, m // 64), build)


def layout_probe(bm: int, bn: int, row_stride: int, elem: str) -> Function:
    """Stores register r of thread t as value ``row * 1000 + col`` (from acc_rowcol)
    through store_acc, and the raw (row, col) pairs to a (128, regs, 2) s32 array."""

    def build(e: TargetEmitter, p: list[Value]) -> None:
        pout, pcoord = p
        rc = acc_rowcol(e, bm, bn)
        vals = [e.cvt(e.add(e.mul(r, e.const(1000, "s32"), "s32"), c, "s32"), "f32", "s32",
                      "rn") for r, c in rc]
        store_acc(e, vals, pout, row_stride, bm, bn, elem)
        nreg = bm * bn // 128
        base = addr(e, pcoord, lin(e, (e.sreg("tid.x"), 2 * nreg)), 4)
        for i, (r, c) in enumerate(rc):
            e.st("global", base, r, "s32", offset=8 * i)
            e.st("global", base, c, "s32", offset=8 * i + 4)

    return kernel("probe", 2, (1,), build)


def pipelined_gemm(m: int, n: int, k: int, bk: int, *, wait_n: int) -> Function:
    """C = A @ B (A m x k, B k x n, one CTA per 64 x 64 block) with a two-stage cp.async
    ring unrolled over K: copy tile t+1 while tile t is multiplied. A group is committed
    every step (an empty one at the end) so ``wait_group 1`` leaves exactly the newest
    copy in flight (sec. 9.7.9.25); ``wait_n`` = 2 plants the too-lax wait."""

    def build(e: TargetEmitter, p: list[Value]) -> None:
        pa, pb, pc = p
        m0 = e.mul(e.sreg("ctaid.y"), e.const(64, "u32"), "u32")
        n0 = e.mul(e.sreg("ctaid.x"), e.const(64, "u32"), "u32")
        sa = [smem(e, f"sa{s}", 64, bk, "bf16", 128) for s in (0, 1)]
        sb = [smem(e, f"sb{s}", bk, 64, "bf16", 128) for s in (0, 1)]

        def load(t: int) -> None:
            k0 = e.const(t * bk, "u32")
            copy_async(e, sa[t % 2], GlobalBox(addr(e, pa, lin(e, (m0, k), (k0, 1)), 2),
                                              64, bk, k, "bf16"), commit=False)
            copy_async(e, sb[t % 2], GlobalBox(addr(e, pb, lin(e, (k0, n), (n0, 1)), 2),
                                              bk, 64, n, "bf16"))

        acc = [e.const(0.0, "f32")] * 32
        load(0)
        for t in range(k // bk):
            if t + 1 < k // bk:
                load(t + 1)  # one group: A and B of the next tile
            else:
                e.op(CpAsyncCommit())  # an empty group keeps the count per step
            wait_async(e, wait_n)
            acc = mma_block(e, acc, sa[t % 2], sb[t % 2], a_trans=False, b_trans=False)
            e.bar()
        store_acc(e, acc, addr(e, pc, lin(e, (m0, n), (n0, 1)), 4), n, 64, 64)

    return kernel("pipelined", 3, (n // 64, m // 64), build)


# ------------------------------------------------------------------------ running
def run(fn: Function, args: list[np.ndarray]) -> list[np.ndarray]:
    """Interpret ``fn`` on its grid; returns the arrays after the launch."""
    from tessera.interp.target import run_target

    out = run_target(fn, args, grid=tuple(fn.attrs["grid"]), block=(128,))
    return list(out) if out is not None else args


def operands(m: int, n: int, k: int, atype: str, rng: np.random.Generator,
             ) -> tuple[np.ndarray, np.ndarray]:
    """Random A, B whose products and sums are exact in float64 (small integers and
    bf16/f16 values of moderate range)."""
    dt = NP_TYPES[atype]
    a = (rng.integers(-8, 9, (m, k)) * rng.choice([0.5, 1.0, 0.125], (m, k))).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    if atype == "tf32":  # tf32 values in f32 storage (cvt.rna.tf32.f32)
        b = tf32_from_f32(b)
    return a, b


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def run_gemm(m: int, n: int, k: int, bm: int, bn: int, bk: int, *, a_trans: bool,
             b_trans: bool, swizzle: int, atype: str = "bf16", seed: int = 0,
             pad_a: int = 0, **kw: object) -> tuple[np.ndarray, np.ndarray]:
    """(interpreted C, reference C) of :func:`gemm`; ``pad_a`` widens A's rows."""
    a, b = operands(m, n, k, atype, np.random.default_rng(seed))
    ga = a.T.copy() if a_trans else a
    ga = np.ascontiguousarray(np.pad(ga, ((0, 0), (0, pad_a))))
    gb = b.T.copy() if b_trans else b
    fn = gemm(m, n, k, bm, bn, bk, a_trans=a_trans, b_trans=b_trans, swizzle=swizzle,
              atype=atype, lda=ga.shape[1], **kw)  # type: ignore[arg-type]
    c = np.full((m, n), np.nan, np.float32)
    return run(fn, [ga, gb, c])[2], reference(a, b)
