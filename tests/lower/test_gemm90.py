"""The sm_90a matrix building blocks (tessera.lower.gemm90): descriptors, TMA rings, wgmma.

Layouts are checked against the bit-level models of :mod:`tessera.arch` (TMA box copies,
PTX ISA sec. 9.7.9.27 and cuda.h; the operand a wgmma descriptor addresses, PTX ISA sec.
9.7.15.5.1.2 "Shared Memory Matrix Layout" / "Matrix Descriptor Format"). Whole kernels
run under the Target IR interpreter and are compared bit for bit with float64 NumPy
products rounded once to f32; each renders to PTX that ptxas assembles for sm_90a with no
``(C75xx)`` wgmma repair advisory. Planted bugs (wrong SBO, wrong swizzle mode, wrong
expect-tx, missing wgmma.fence) must each be caught.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch.descriptor import decode_descriptor, encode_descriptor, load_operand
from tessera.arch.errors import AlignmentError
from tessera.arch.swizzle import Swizzle
from tessera.arch.tma import TensorMap, TensorMapDataType, tma_load
from tessera.errors import ArgumentError, IRVerifyError, ShapeError, TesseraError, UnsupportedError
from tessera.ir.core import Block, Function, Instr, Module, Value
from tessera.ir.target import RegType, Return, TensorMapType
from tessera.ir.target_async import MbarrierArrive, WgmmaFence, WgmmaWait
from tessera.ir.target_check import check_kernel
from tessera.ir.target_ops import Const, SharedAlloc
from tessera.ir.text import parse_module
from tessera.ir.verifier import verify_function
from tessera.lower.emit import Emitter
from tessera.lower.gemm80 import store_acc
from tessera.lower.gemm90 import (
    descriptor_fields,
    geometry,
    make_descriptor,
    operand_offset,
    stage_regs_to_shared,
    wgmma_block,
)
from tessera.lower.tiles import ELEM_BYTES, SharedBox
from tessera.lower.tma90 import Pipeline, TmaCopy, mbar_wait, tma_load_many, tma_setup

U64 = RegType("u64")
NP = {"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn}
TMA_DTYPE = {"bf16": TensorMapDataType.BFLOAT16, "e4m3": TensorMapDataType.UINT8}


# ------------------------------------------------------------------------ layout model
def _tma_fill(g: np.ndarray, elem: str, rows: int, cols: int, swizzle: int, row0: int,
              col0: int, base: int, smem: np.ndarray) -> None:
    """What :class:`TmaCopy` does to ``dst`` (panel by panel), on the arch TMA model."""
    eb = ELEM_BYTES[elem]
    w = swizzle // eb
    tmap = TensorMap(TMA_DTYPE[elem], 0, (g.shape[1], g.shape[0]), (g.shape[1] * eb,),
                     (w, rows), swizzle=Swizzle(swizzle))
    for p in range(cols // w):
        tma_load(tmap, g, np.array([col0 + p * w, row0]), smem, base + p * rows * swizzle)


def _box(rows: int, cols: int, elem: str, swizzle: int, align: int = 1024) -> SharedBox:
    """A box with a placeholder address value (for the static layout helpers)."""
    return SharedBox(Value(RegType("u32")), rows, cols, elem, swizzle, align)


def _static_desc(box: SharedBox, base: int, k: int, mn: int, k_major: bool) -> int:
    lbo, sbo = descriptor_fields(box, k_major=k_major)
    start = base + operand_offset(box, k, mn, k_major=k_major)
    return encode_descriptor(start, lbo, sbo, Swizzle(box.swizzle))


@settings(max_examples=40, deadline=None)
@given(elem=st.sampled_from(["bf16", "e4m3"]), swizzle=st.sampled_from([32, 64, 128]),
       panels=st.integers(1, 2), blocks=st.integers(1, 2), kmajor_b=st.booleans(),
       n8=st.integers(1, 8), data=st.data())
def test_descriptor_addresses_what_tma_wrote(elem: str, swizzle: int, panels: int, blocks: int,
                                             kmajor_b: bool, n8: int,
                                             data: st.DataObject) -> None:
    """Every k-step / 64-row-block descriptor reads exactly the sub-matrix TMA stored
    (PTX ISA sec. 9.7.15.5.1.2: K-major SBO = 8 rows x span, MN-major LBO = panel stride,
    SBO = 8 k-rows x span; the k-step moves the start address inside the atom)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    eb = ELEM_BYTES[elem]
    ks = 32 // eb  # k16 for 16-bit, k32 for 8-bit
    bk = panels * swizzle // eb
    if bk < ks:
        return
    base = 1024 * data.draw(st.integers(1, 3))
    smem = np.zeros(1 << 17, np.uint8)
    rows_a = 64 * blocks
    bits = np.uint16 if eb == 2 else np.uint8
    ga = rng.integers(0, 1 << (8 * eb), (rows_a + 8, bk + 64), dtype=bits)
    a = _box(rows_a, bk, elem, swizzle)
    row0, col0 = 8, 32  # the tile sits inside a larger tensor
    _tma_fill(ga, elem, rows_a, bk, swizzle, row0, col0, base, smem)
    for k in range(0, bk, ks):
        for i in range(blocks):
            d = _static_desc(a, base, k, 64 * i, True)
            got = load_operand(smem, d, operand="a", mn=64, k=ks, element_bytes=eb)
            want = ga[row0 + 64 * i:row0 + 64 * i + 64, col0 + k:col0 + k + ks]
            np.testing.assert_array_equal(got, want)
    if not kmajor_b and eb != 2:
        return
    n = 8 * n8 if kmajor_b else (swizzle // eb) * data.draw(st.integers(1, 2))
    bbase = base + 1024 * 8 * blocks * panels
    if kmajor_b:  # B^T: (N, K) K-major
        gb = rng.integers(0, 1 << (8 * eb), (n, bk), dtype=bits)
        b = _box(n, bk, elem, swizzle, 1024)
        _tma_fill(gb, elem, n, bk, swizzle, 0, 0, bbase, smem)
    else:  # B: (K, N) MN-major
        gb = rng.integers(0, 1 << (8 * eb), (bk, n), dtype=bits)
        b = _box(bk, n, elem, swizzle, 1024)
        _tma_fill(gb, elem, bk, n, swizzle, 0, 0, bbase, smem)
    for k in range(0, bk, ks):
        d = _static_desc(b, bbase, k, 0, kmajor_b)
        got = load_operand(smem, d, operand="b", mn=n, k=ks, element_bytes=eb,
                           k_major=kmajor_b)
        want = gb[:, k:k + ks].T if kmajor_b else gb[k:k + ks, :]
        np.testing.assert_array_equal(got, want)


def test_descriptor_constants_follow_the_isa() -> None:
    """K-major bf16 128B: SBO 1024, layout code 1 (128B), a k16 step is +2 encoded; the
    64B/32B codes are 2/3 (PTX ISA 'Matrix Descriptor Format', bits 62-63)."""
    a = _box(64, 64, "bf16", 128, 1024)
    d0, d1 = (decode_descriptor(_static_desc(a, 2048, k, 0, True)) for k in (0, 16))
    assert (d0.stride_byte_offset, d0.swizzle) == (1024, Swizzle.B128)
    assert (_static_desc(a, 2048, 16, 0, True) - _static_desc(a, 2048, 0, 0, True)) == 2
    assert d1.start_address - d0.start_address == 32
    for sw, code in ((64, 2), (32, 3)):
        box = _box(64, sw // 2, "bf16", sw, 1024)
        assert _static_desc(box, 0, 0, 0, True) >> 62 == code


def test_geometry_rejects_bad_operands() -> None:
    with pytest.raises(AlignmentError, match="1024-byte aligned"):
        geometry(_box(64, 64, "bf16", 128, 512))
    with pytest.raises(UnsupportedError, match="swizzle"):
        geometry(_box(64, 64, "bf16", 0, 1024))
    with pytest.raises(ShapeError, match="panels"):
        geometry(_box(64, 48, "bf16", 128, 1024))
    with pytest.raises(UnsupportedError, match="1- or 2-byte"):
        geometry(_box(64, 32, "f32", 128, 1024))
    box = _box(64, 64, "bf16", 128, 1024)
    with pytest.raises(ShapeError, match="core matrix"):
        operand_offset(box, 4, 0, k_major=True)


# ------------------------------------------------------------------------- kernel kit
def kernel(name: str, params: list[RegType | TensorMapType], grid: tuple[int, ...],
           build: Callable[[Emitter, list[Value]], None]) -> Function:
    """A verified sm_90a kernel: one 128-thread CTA (one warpgroup) per grid point."""
    body = Block()
    args = [body.add_arg(t) for t in params]
    e = Emitter(body)
    build(e, args)
    e.op(Return())
    fn = Function(name, body, [], kind="ptx.kernel",
                  attrs={"target": "sm_90a", "block": [128], "grid": list(grid)})
    verify_function(fn)
    check_kernel(fn)
    return fn


def tile_base(e: Emitter, ptr: Value, row: Value, col: Value, stride: int, esize: int) -> Value:
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

    def build(e: Emitter, p: list[Value]) -> None:
        ring = Pipeline.create(e, stages, p[3], p[4], bm, bn, bk, b_trans=b_trans)
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

    def build(e: Emitter, p: list[Value]) -> None:
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
}


def build_gemm(name: str) -> Function:
    m, n, k, bm, bn, bk, stages, b_trans, atype, first = GEMMS[name]
    return gemm(m, n, k, bm, bn, bk, stages, b_trans=b_trans, atype=atype,
                scale_d_first=first)


# ----------------------------------------------------------------------------- ptxas
def ptxas(fn: Function) -> str:
    """ptxas -arch=sm_90a on the rendered kernel; returns its log (exit status 0)."""
    pathfinder = pytest.importorskip("cuda.pathfinder")
    from tessera.ptx.render import render

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
    9.7.15.6); ptxas reports the shared memory of the whole ring."""
    fn = build_gemm(name)
    log = ptxas(fn)
    assert "(C75" not in log
    _, _, _, bm, bn, bk, stages, _, atype, _ = GEMMS[name]
    ring = stages * (bm + bn) * bk * ELEM_BYTES[atype]
    assert f"{ring + 8 * stages} bytes smem" in log


@pytest.mark.parametrize("bn", [64, 128])
def test_attention_kernel_assembles_and_round_trips(bn: int) -> None:
    fn = attention_pv(bn)
    assert "(C75" not in ptxas(fn)
    module = Module("m")
    module.add(fn)
    text = str(module)
    assert str(parse_module(text)) == text


def strip(fn: Function, op_type: type) -> Function:
    """Remove every instruction of ``op_type`` (a planted bug)."""
    def walk(block: Block) -> None:
        block.instrs[:] = [i for i in block.instrs if not isinstance(i.op, op_type)]
        for instr in block.instrs:
            for region in instr.regions:
                walk(region.block)

    walk(fn.body)
    return fn


def test_planted_missing_wait_is_repaired_by_ptxas() -> None:
    """ptxas injects a missing wgmma.wait_group and says so only as (C7517): the check
    above would catch it."""
    assert "(C7517)" in ptxas(strip(build_gemm("bf16_mn_major_b"), WgmmaWait))


def test_planted_missing_fence_is_rejected() -> None:
    """A wgmma whose accumulators were just written (the packs) without wgmma.fence
    (PTX ISA sec. 9.7.15.6.1). ptxas 13.5 assembles this silently, with no advisory,
    so the kernel checker is what catches it."""
    fn = strip(build_gemm("bf16_mn_major_b"), WgmmaFence)
    with pytest.raises(IRVerifyError, match=r"wgmma\.fence"):
        check_kernel(fn)


# ----------------------------------------------------------------------- interpreter
def gemm_args(name: str, seed: int = 0) -> tuple[list[object], np.ndarray]:
    """(kernel arguments, reference C) for one of :data:`GEMMS`."""
    from tessera.interp.target import TensorMapArg

    m, n, k, bm, bn, bk, _, b_trans, atype, _ = GEMMS[name]
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(NP[atype])
    b = rng.standard_normal((n, k) if b_trans else (k, n)).astype(NP[atype])
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


# ---------------------------------------------------------------------- planted bugs
def instrs(fn: Function) -> list[Instr]:
    out: list[Instr] = []

    def walk(block: Block) -> None:
        for instr in block.instrs:
            out.append(instr)
            for region in instr.regions:
                walk(region.block)

    walk(fn.body)
    return out


def replace_descriptor_fields(fn: Function, **fields: object) -> int:
    """Rewrite the static part (the u64 immediate) of every matrix descriptor."""
    import dataclasses

    hits = 0
    for instr in instrs(fn):
        op = instr.op
        if isinstance(op, Const) and op.type == "u64" and op.value >> 62:
            d = dataclasses.replace(decode_descriptor(op.value), **fields)
            instr.op = Const(d.encode(), "u64")
            hits += 1
    return hits


def caught(fn: Function, name: str) -> bool:
    """Whether a planted bug shows: an interpreter fault or a result that differs."""
    try:
        got, ref = run_gemm(fn, name)
    except TesseraError:
        return True
    return not np.array_equal(got, ref)


GOOD = "bf16_bm128_kmajor_b_3stage"


def test_planted_wrong_stride_byte_offset() -> None:
    """SBO 512 instead of 1024: 8-row groups read from the wrong rows (PTX ISA 'Matrix
    Descriptor Format', bits 32-45)."""
    fn = build_gemm(GOOD)
    assert replace_descriptor_fields(fn, stride_byte_offset=512) > 0
    assert caught(fn, GOOD)


def test_planted_wrong_swizzle_mode() -> None:
    """Layout code 2 (64B) for data TMA wrote with the 128B swizzle."""
    fn = build_gemm(GOOD)
    assert replace_descriptor_fields(fn, swizzle=Swizzle.B64) > 0
    assert caught(fn, GOOD)


@pytest.mark.parametrize("delta", [-1024, 1024])
def test_planted_wrong_expect_tx(delta: int) -> None:
    """arrive.expect_tx must announce the bytes of every load on the phase (PTX ISA sec.
    9.7.13.15.12): too few completes too early, too many never completes."""
    fn = build_gemm(GOOD)
    arrivals = [i for i in instrs(fn) if isinstance(i.op, MbarrierArrive)]
    assert arrivals and all(i.op.tx == (128 + 64) * 64 * 2 for i in arrivals)
    for i in arrivals:
        i.op = MbarrierArrive(i.op.tx + delta)
    with pytest.raises(TesseraError, match="mbarrier"):
        run_gemm(fn, GOOD)


def test_planted_missing_proxy_fence() -> None:
    """st.shared data read by wgmma with no fence.proxy.async in between."""
    from tessera.interp.target import run_target
    from tessera.ir.target_async import Fence

    fn = attention_pv(64, True)
    for instr in instrs(fn):
        if isinstance(instr.op, Fence) and instr.op.kind == "proxy_async":
            instr.parent.instrs.remove(instr)  # type: ignore[union-attr]
    args, _ = attention_args(64, True)
    with pytest.raises(TesseraError, match="proxy"):
        run_target(fn, args)


# ------------------------------------------------------------------ smaller pieces
def test_emitted_descriptors_match_the_layout_rules() -> None:
    """The descriptor the kernel computes from the buffer's shared address equals the
    statically encoded one: start (addr & 0x3FFFF) >> 4 plus the k/row offset, LBO, SBO
    and layout code (PTX ISA 'Matrix Descriptor Format')."""
    from tessera.interp.target import run_target

    cases = [((128, 128, "bf16", 128), 16, 64, True), ((64, 128, "e4m3", 128), 96, 0, True),
             ((64, 64, "bf16", 64), 40, 8, True), ((64, 128, "bf16", 128), 16, 64, False)]

    def build(e: Emitter, p: list[Value]) -> None:
        for n, ((rows, cols, elem, sw), k, mn, km) in enumerate(cases):
            base = e.one(SharedAlloc(f"s{n}", rows * cols * ELEM_BYTES[elem], 1024))
            box = SharedBox(base, rows, cols, elem, sw, 1024)
            e.st("global", p[0], make_descriptor(e, box, k, mn, k_major=km), "u64",
                 offset=16 * n)
            e.st("global", p[0], e.cvt(base, "u64", "u32"), "u64", offset=16 * n + 8)

    out = np.zeros(2 * len(cases), np.uint64)
    run_target(kernel("desc", [U64], (1,), build), [out])
    for n, ((rows, cols, elem, sw), k, mn, km) in enumerate(cases):
        want = _static_desc(_box(rows, cols, elem, sw), int(out[2 * n + 1]), k, mn, km)
        assert int(out[2 * n]) == want


def test_ring_slots_flip_parity_on_reuse() -> None:
    """K-tile kt lives in stage kt % S and waits for parity (kt // S) & 1 (PTX ISA sec.
    9.7.13.15.16: try_wait.parity waits for the phase of that parity)."""
    from tessera.interp.target import run_target

    params = [U64, TensorMapType(1, "bf16", (64, 64), 128), TensorMapType(1, "bf16", (64, 64),
                                                                          128)]

    def build(e: Emitter, p: list[Value]) -> None:
        ring = Pipeline.create(e, 3, p[1], p[2], 64, 64, 64, b_trans=True)
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

    def build(e: Emitter, p: list[Value]) -> None:
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


def test_misuse_is_reported() -> None:
    def build(e: Emitter, p: list[Value]) -> None:
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
