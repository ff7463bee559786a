"""The sm_90a matrix building blocks (tessera.lower.sm90a: gemm, tma): TMA rings and wgmma.

Whole kernels run under the Target IR interpreter and are compared bit for bit with
float64 NumPy products rounded once to f32; each renders to PTX that ptxas assembles
for sm_90a with no ``(C75xx)`` wgmma repair advisory. The descriptors alone are checked
in test_wgmma_descriptors, the planted bugs in test_gemm_planted.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

from tessera.arch.limits import SHARED_BASE, place_shared
from tessera.errors import ArgumentError, ShapeError, UnsupportedError
from tessera.ir.core import Block, Function, Module, Value, walk
from tessera.ir.dialects.target import RegType, Return, TensorMapType
from tessera.ir.dialects.target.check import check_kernel
from tessera.ir.dialects.target.ops import SharedAlloc
from tessera.ir.text import parse_module
from tessera.ir.verifier import verify_function
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm80.gemm import store_acc
from tessera.lower.sm90a.gemm import (
    make_descriptor,
    stage_regs_to_shared,
    wgmma_block,
)
from tessera.lower.sm90a.tma import TmaCopy, TmaPipeline, mbar_wait, tma_load_many, tma_setup
from tessera.lower.tiles import ELEM_BYTES, SharedBox
from tessera.numerics.formats.convert import tf32_from_f32
from tests.lower.sm90a.test_wgmma_descriptors import box_of, static_desc

U64 = RegType("u64")
NP = {"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn, "tf32": np.float32}


# ------------------------------------------------------------------------- kernel kit
def kernel(name: str, params: list[RegType | TensorMapType], grid: tuple[int, ...],
           build: Callable[[TargetEmitter, list[Value]], None]) -> Function:
    """A verified sm_90a kernel: one 128-thread CTA (one warpgroup) per grid point."""
    body = Block()
    args = [body.add_arg(t) for t in params]
    e = TargetEmitter(body)
    build(e, args)
    e.op(Return())
    fn = Function(name, body, [], kind="ptx.kernel",
                  attrs={"target": "sm_90a", "block": [128], "grid": list(grid)})
    verify_function(fn)
    check_kernel(fn)
    return fn


def tile_base(e: TargetEmitter, ptr: Value, row: Value, col: Value, stride: int,
              esize: int) -> Value:
    """``ptr + (row * stride + col) * esize`` (``row``/``col`` s32)."""
    off = e.add(e.mul(e.cvt(row, "u32", "s32"), e.const(stride * esize, "u32"), "u32"),
                e.mul(e.cvt(col, "u32", "s32"), e.const(esize, "u32"), "u32"), "u32")
    return e.add(ptr, e.cvt(off, "u64", "u32"), "u64")


def gemm(m: int, n: int, k: int, bm: int, bn: int, bk: int, stages: int, *, b_trans: bool,
         atype: str = "bf16", scale_d_first: bool = False) -> Function:
    """C (m x n, f32) = A (m x k) @ B on an (n/bn, m/bm) grid through a TMA ring; B is
    k x n row-major, or n x k with ``b_trans``. Parameters: A, B, C pointers and the A
    and B tensor maps (over parameters 0 and 1)."""
    eb = ELEM_BYTES[atype]
    w = 128 // eb
    tb = TensorMapType(1, atype, (bn, w) if b_trans else (bk, w), 128)
    params = [U64, U64, U64, TensorMapType(0, atype, (bm, w), 128), tb]

    def build(e: TargetEmitter, p: list[Value]) -> None:
        ring = TmaPipeline.create(e, stages, p[3], p[4], bm, bn, bk, b_trans=b_trans)
        row = e.mul(e.cvt(e.sreg("ctaid.y"), "s32", "u32"), e.const(bm, "s32"), "s32")
        col = e.mul(e.cvt(e.sreg("ctaid.x"), "s32", "u32"), e.const(bn, "s32"), "s32")
        init = e.const(7.0 if scale_d_first else 0.0, "f32")  # 7: scale-d must drop it
        acc = ring.mainloop(e, [init] * (bm * bn // 128), row, col, k // bk,
                            scale_d_first=scale_d_first)
        store_acc(e, acc, tile_base(e, p[2], row, col, n, 4), n, bm, bn)

    return kernel("gemm90", params, (n // bn, m // bm), build)


def attention_pv(bn: int, v_trans: bool = False) -> Function:
    """One CTA: S = Q K^T (Q 64 x 64, K bn x 64, K-major B), P = bf16(S) staged from
    registers into shared memory, O = P V as f32, with V bn x 64 row-major (MN-major B)
    or, with ``v_trans``, V^T 64 x bn (K-major B, two TMA panels when bn = 128). Q, K, V
    arrive by TMA on one barrier phase (several boxes, one expect-tx)."""
    vbox = (64, 64) if v_trans else (bn, 64)
    params = [U64, U64, U64, U64, TensorMapType(0, "bf16", (64, 64), 128),
              TensorMapType(1, "bf16", (bn, 64), 128), TensorMapType(2, "bf16", vbox, 128)]

    def build(e: TargetEmitter, p: list[Value]) -> None:
        def box(sym: str, rows: int, cols: int) -> SharedBox:
            return SharedBox(e.one(SharedAlloc(sym, rows * cols * 2, 1024)), rows, cols,
                             "bf16", 128, 1024)

        q, kk, pp = box("q", 64, 64), box("k", bn, 64), box("p", 64, bn)
        v = box("v", 64, bn) if v_trans else box("v", bn, 64)
        (bar,) = tma_setup(e, 1)
        zero = e.const(0, "s32")
        tma_load_many(e, [TmaCopy(q, p[4], zero, zero), TmaCopy(kk, p[5], zero, zero),
                          TmaCopy(v, p[6], zero, zero)], bar)
        mbar_wait(e, bar, e.const(0, "u32"))
        f0 = e.const(0.0, "f32")
        s = wgmma_block(e, [f0] * (bn // 2), q, kk, b_trans=True)
        stage_regs_to_shared(e, s, 64, bn, pp)
        junk = e.const(3.0, "f32")  # scale-d false: the old accumulator must not count
        o = wgmma_block(e, [junk] * 32, pp, v, b_trans=v_trans, scale_d=e.const(0, "pred"))
        store_acc(e, o, p[3], 64, 64, 64)

    return kernel("attn_pv", params, (1,), build)


GEMMS = {  # name: (m, n, k, bm, bn, bk, stages, b_trans, atype, scale_d_first)
    "bf16_mn_major_b": (128, 128, 128, 64, 64, 64, 2, False, "bf16", False),
    "bf16_bn128_ring_reuse": (128, 128, 384, 64, 128, 64, 2, False, "bf16", False),
    "bf16_bm128_kmajor_b_3stage": (256, 128, 256, 128, 64, 64, 3, True, "bf16", True),
    "e4m3_b_n_by_k": (128, 128, 256, 64, 64, 128, 2, True, "e4m3", False),
    "tf32_b_n_by_k": (128, 128, 128, 64, 64, 32, 2, True, "tf32", False),
}


def build_gemm(name: str) -> Function:
    m, n, k, bm, bn, bk, stages, b_trans, atype, first = GEMMS[name]
    return gemm(m, n, k, bm, bn, bk, stages, b_trans=b_trans, atype=atype,
                scale_d_first=first)


# ----------------------------------------------------------------------------- ptxas
def ptxas(fn: Function) -> str:
    """ptxas -arch=sm_90a on the rendered kernel; returns its log (exit status 0)."""
    pathfinder = pytest.importorskip("cuda.pathfinder")
    from tessera.backend.ptx.render import render

    exe = pathfinder.find_nvidia_binary_utility("ptxas")
    if exe is None:
        pytest.skip("ptxas is not installed")
    proc = subprocess.run([exe, "-arch=sm_90a", "-v", "-", "-o", "/dev/null"],
                          input=render(fn), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("name", sorted(GEMMS))
def test_gemm_kernels_assemble_without_repairs(name: str) -> None:
    """No (C75xx) advisory: every wgmma is fenced, committed and waited for (PTX ISA sec.
    9.7.15.6); ptxas reports the shared memory of the whole ring, or none where the ring
    is over 48 KiB and so dynamic shared memory that the launch requests."""
    from tessera.lower.shared import shared_plan

    fn = build_gemm(name)
    log = ptxas(fn)
    assert "(C75" not in log
    _, _, _, bm, bn, bk, stages, _, atype, _ = GEMMS[name]
    ring = stages * (bm + bn) * bk * ELEM_BYTES[atype]
    if ring + 8 * stages <= 48 * 1024:
        assert f"{ring + 8 * stages} bytes smem" in log
    else:
        assert "bytes smem" not in log
        assert shared_plan(fn).dynamic_bytes >= ring + 8 * stages


@pytest.mark.parametrize("bn", [64, 128])
def test_attention_kernel_assembles_and_round_trips(bn: int) -> None:
    fn = attention_pv(bn)
    assert "(C75" not in ptxas(fn)
    module = Module("m")
    module.add(fn)
    text = str(module)
    assert str(parse_module(text)) == text


# ----------------------------------------------------------------------- interpreter
def gemm_args(name: str, seed: int = 0) -> tuple[list[object], np.ndarray]:
    """(kernel arguments, reference C) for one of :data:`GEMMS`."""
    from tessera.interp.target import TensorMapArg

    m, n, k, bm, bn, bk, _, b_trans, atype, _ = GEMMS[name]
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(NP[atype])
    b = rng.standard_normal((n, k) if b_trans else (k, n)).astype(NP[atype])
    if atype == "tf32":  # tf32 values in f32 storage (cvt.rna.tf32.f32)
        a, b = tf32_from_f32(a), tf32_from_f32(b)
    c = np.zeros((m, n), np.float32)
    w = 128 // ELEM_BYTES[atype]
    maps = [TensorMapArg(a, atype, (bm, w), 128),
            TensorMapArg(b, atype, (bn, w) if b_trans else (bk, w), 128)]
    bb = b.astype(np.float64)
    ref = (a.astype(np.float64) @ (bb.T if b_trans else bb)).astype(np.float32)
    return [a, b, c, *maps], ref


def run_gemm(fn: Function, name: str) -> tuple[np.ndarray, np.ndarray]:
    from tessera.interp.target import run_target

    args, ref = gemm_args(name)
    run_target(fn, args)
    return args[2], ref  # type: ignore[return-value]


@pytest.mark.parametrize("name", sorted(GEMMS))
def test_gemm_is_exact(name: str) -> None:
    """Bit for bit the float64 product rounded once to f32 (Target IR exact wgmma
    accumulation); covers stage reuse with flipped parities, BN=128 MN-major panels (LBO),
    two 64-row blocks, scale-d false over a non-zero accumulator, and e4m3 k32 steps."""
    got, ref = run_gemm(build_gemm(name), name)
    np.testing.assert_array_equal(got, ref)


def attention_args(bn: int, v_trans: bool, seed: int = 1) -> tuple[list[object], np.ndarray]:
    from tessera.interp.target import TensorMapArg

    rng = np.random.default_rng(seed)
    q, k = (rng.standard_normal((r, 64)).astype(ml_dtypes.bfloat16) for r in (64, bn))
    v = rng.standard_normal((bn, 64)).astype(ml_dtypes.bfloat16)
    vv = np.ascontiguousarray(v.T) if v_trans else v
    o = np.zeros((64, 64), np.float32)
    s = (q.astype(np.float64) @ k.astype(np.float64).T).astype(np.float32)
    p = s.astype(ml_dtypes.bfloat16).astype(np.float64)  # cvt.rn.bf16.f32
    ref = (p @ v.astype(np.float64)).astype(np.float32)
    maps = [TensorMapArg(q, "bf16", (64, 64), 128), TensorMapArg(k, "bf16", (bn, 64), 128),
            TensorMapArg(vv, "bf16", (64, 64) if v_trans else (bn, 64), 128)]
    return [q, k, vv, o, *maps], ref


@pytest.mark.parametrize("v_trans", [True, False])
@pytest.mark.parametrize("bn", [64, 128])
def test_p_from_registers(bn: int, v_trans: bool) -> None:
    """S = Q K^T in registers, P = bf16(S) written to a swizzled K-major box (two panels
    when bn = 128), fenced for the async proxy (PTX ISA sec. 9.7.13.4), then O = P V."""
    from tessera.interp.target import run_target

    args, ref = attention_args(bn, v_trans)
    run_target(attention_pv(bn, v_trans), args)
    np.testing.assert_array_equal(args[3], ref)


# ------------------------------------------------------------------ smaller pieces
def test_emitted_descriptors_match_the_layout_rules() -> None:
    """The descriptor the kernel computes from the buffer's shared address equals the
    statically encoded one: start (addr & 0x3FFFF) >> 4 plus the k/row offset, LBO, SBO
    and layout code (PTX ISA 'Matrix Descriptor Format')."""
    from tessera.interp.target import run_target

    cases = [((128, 128, "bf16", 128), 16, 64, True), ((64, 128, "e4m3", 128), 96, 0, True),
             ((64, 64, "bf16", 64), 40, 8, True), ((64, 128, "bf16", 128), 16, 64, False)]

    def build(e: TargetEmitter, p: list[Value]) -> None:
        for n, ((rows, cols, elem, sw), k, mn, km) in enumerate(cases):
            base = e.one(SharedAlloc(f"s{n}", rows * cols * ELEM_BYTES[elem], 1024))
            box = SharedBox(base, rows, cols, elem, sw, 1024)
            e.st("global", p[0], make_descriptor(e, box, k, mn, k_major=km), "u64",
                 offset=16 * n)
            e.st("global", p[0], e.cvt(base, "u64", "u32"), "u64", offset=16 * n + 8)

    out = np.zeros(2 * len(cases), np.uint64)
    run_target(kernel("desc", [U64], (1,), build), [out])
    offsets, _ = place_shared((f"s{n}", rows * cols * ELEM_BYTES[elem], 1024)
                              for n, ((rows, cols, elem, _sw), *_) in enumerate(cases))
    for n, ((rows, cols, elem, sw), k, mn, km) in enumerate(cases):
        box = box_of(rows, cols, elem, sw)
        want = static_desc(box, int(out[2 * n + 1]), k, mn, km)
        assert int(out[2 * n]) == want
        # the buffers start above the kilobyte reserved for system use, as on the GPU:
        # the start-address field (bits 0-13) holds (1024 + offset) >> 4 plus the step
        assert int(out[2 * n + 1]) == SHARED_BASE + offsets[f"s{n}"]
        step = static_desc(box, 0, k, mn, km) & 0x3FFF
        assert int(out[2 * n]) & 0x3FFF == ((SHARED_BASE + offsets[f"s{n}"]) >> 4) + step


def test_ring_slots_flip_parity_on_reuse() -> None:
    """K-tile kt lives in stage kt % S and waits for parity (kt // S) & 1 (PTX ISA sec.
    9.7.13.15.16: try_wait.parity waits for the phase of that parity)."""
    from tessera.interp.target import run_target

    params = [U64, TensorMapType(1, "bf16", (64, 64), 128), TensorMapType(1, "bf16", (64, 64),
                                                                          128)]

    def build(e: TargetEmitter, p: list[Value]) -> None:
        ring = TmaPipeline.create(e, 3, p[1], p[2], 64, 64, 64, b_trans=True)
        kt = e.cvt(e.sreg("tid.x"), "s32", "u32")
        stage, parity = ring.slot(e, kt)
        off = e.bin("mul", e.sreg("tid.x"), e.const(8, "u32"), "u32", "wide")
        addr = e.add(p[0], off, "u64")
        e.st("global", addr, stage, "u32")
        e.st("global", addr, parity, "u32", offset=4)

    out = np.zeros((128, 2), np.uint32)
    from tessera.interp.target import TensorMapArg

    dummy = np.zeros((64, 64), ml_dtypes.bfloat16)
    tm = TensorMapArg(dummy, "bf16", (64, 64), 128)
    run_target(kernel("slots", params, (1,), build), [out, tm, tm])
    kt = np.arange(128)
    np.testing.assert_array_equal(out, np.stack([kt % 3, (kt // 3) & 1], axis=1))


@pytest.mark.parametrize(("elem", "stride"), [("f32", 65), ("f32", 64), ("bf16", 66), ("bf16", 65)])
def test_store_acc_after_wgmma(elem: str, stride: int) -> None:
    """C = I @ B puts B in the wgmma accumulator layout, which is the layout sm_80's
    store_acc writes back at any row stride."""
    from tessera.interp.target import TensorMapArg, run_target

    params = [U64, U64, U64, TensorMapType(0, "bf16", (64, 64), 128),
              TensorMapType(1, "bf16", (64, 64), 128)]

    def build(e: TargetEmitter, p: list[Value]) -> None:
        a = SharedBox(e.one(SharedAlloc("a", 8192, 1024)), 64, 64, "bf16", 128, 1024)
        b = SharedBox(e.one(SharedAlloc("b", 8192, 1024)), 64, 64, "bf16", 128, 1024)
        (bar,) = tma_setup(e, 1)
        zero = e.const(0, "s32")
        tma_load_many(e, [(a, p[3], zero, zero), (b, p[4], zero, zero)], bar)  # tuples
        mbar_wait(e, bar, e.const(0, "u32"))
        acc = wgmma_block(e, [e.const(0.0, "f32")] * 32, a, b, b_trans=True)
        store_acc(e, acc, p[2], stride, 64, 64, elem)

    rng = np.random.default_rng(3)
    eye = np.eye(64, dtype=ml_dtypes.bfloat16)
    bt = (rng.standard_normal((64, 64)) * 100).astype(ml_dtypes.bfloat16)
    out = np.zeros((64, stride), np.float32 if elem == "f32" else ml_dtypes.bfloat16)
    run_target(kernel("st", params, (1,), build),
               [eye, bt, out, TensorMapArg(eye, "bf16", (64, 64), 128),
                TensorMapArg(bt, "bf16", (64, 64), 128)])
    np.testing.assert_array_equal(out[:, :64].astype(np.float32), bt.T.astype(np.float32))
    assert not out[:, 64:].astype(np.float32).any()


def test_barrier_setup_computes_each_address_once() -> None:
    """tma_setup's barrier addresses are computed once, before thread 0's init, and the
    init uses them: two adds for three barriers, none inside the branch."""
    def build(e: TargetEmitter, p: list[Value]) -> None:
        bars = tma_setup(e, 3)
        assert len(set(bars)) == 3

    fn = kernel("bars", [U64], (1,), build)
    adds = [i for i in walk(fn.body) if i.op.name == "ptx.bin"]
    assert len(adds) == 2
    inits = [i for i in walk(fn.body) if i.op.name == "ptx.mbarrier_init"]
    assert [i.operands[0] for i in inits] == [adds[0].operands[0], *(a.results[0] for a in adds)]


def test_misuse_is_reported() -> None:
    def build(e: TargetEmitter, p: list[Value]) -> None:
        a = SharedBox(e.one(SharedAlloc("a", 8192, 1024)), 64, 64, "e4m3", 128, 1024)
        b = SharedBox(e.one(SharedAlloc("b", 8192, 1024)), 128, 64, "bf16", 128, 1024)
        f = [e.const(0.0, "f32")] * 32
        with pytest.raises(UnsupportedError, match="16-bit"):
            wgmma_block(e, f, a, a, b_trans=False, atype="e4m3")
        with pytest.raises(ShapeError, match="values per thread"):
            wgmma_block(e, f[:16], b, b, b_trans=True)
        with pytest.raises(ShapeError, match="K extents"):
            wgmma_block(e, f, b, b, b_trans=False)
        with pytest.raises(ShapeError, match="cannot fill"):
            tma_load_many(e, [TmaCopy(b, p[1], e.const(0, "s32"), e.const(0, "s32"))],
                          e.const(0, "u32"))
        with pytest.raises(ArgumentError, match="at least one"):
            tma_setup(e, 0)

    kernel("misuse", [U64, TensorMapType(1, "bf16", (64, 64), 128)], (1,), build)
