"""The sm_80 matrix building blocks (tessera.lower.sm80.gemm) in whole kernels.

Each kernel is interpreted at the bit level (ldmatrix, mma.sync and cp.async as the PTX
ISA defines them) and compared with NumPy float64 matmuls; each also renders to PTX that
ptxas assembles for sm_80 without repair advisories. Hardware rules used: PTX ISA
sec. 9.7.9.25 (cp.async, wait_group), 9.7.14.5.8 (m16n8k16 fragments), 9.7.14.5.15
(ldmatrix), 9.7.9.21 (cvt.rn.bf16x2.f32 packs its first source in the upper half).
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.errors import ShapeError, TesseraError, UnsupportedError
from tessera.ir.core import Block, Function, Value
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm80.copy import copy_async, swizzle_offset
from tessera.lower.sm80.gemm import acc_to_a, mma_block, store_acc
from tessera.lower.tiles import GlobalBox, acc_coords
from tests.lower.sm80.kit import (
    NP_TYPES,
    U64,
    attention_chain,
    gemm,
    layout_probe,
    operands,
    pipelined_gemm,
    reference,
    run,
    run_gemm,
    smem,
)


# -------------------------------------------------------------------------- tests
@pytest.mark.parametrize("swizzle", [32, 64, 128])
def test_swizzle_is_the_absolute_rule_on_aligned_buffers(swizzle: int) -> None:
    """PTX ISA sec. 9.7.15.5.1.2: Swizzle<B,4,3> XORs the 16-byte chunk bits [4, 4+B) with
    bits [7, 7+B) of the address; on a 1024-aligned buffer offsets are addresses."""
    from tessera.arch.swizzle import Swizzle, swizzle_address

    offs = np.arange(0, 8192, 2)
    got = np.array([swizzle_offset(int(o), swizzle) for o in offs])
    assert np.array_equal(got, swizzle_address(offs, Swizzle(swizzle)))
    if swizzle == 128:  # 128-byte rows: chunk index XOR (row % 8)
        row, chunk = offs // 128, offs % 128 // 16
        assert np.array_equal(got % 128 // 16, chunk ^ (row % 8))
    assert swizzle_offset(1234, 0) == 1234


@pytest.mark.parametrize("atype", ["bf16", "f16"])
@pytest.mark.parametrize("swizzle", [0, 128])
@pytest.mark.parametrize("b_trans", [False, True])
@pytest.mark.parametrize("a_trans", [False, True])
def test_gemm_is_exact(a_trans: bool, b_trans: bool, swizzle: int, atype: str) -> None:
    """128x128x64 on a 2x2 grid, 64x64x32 tiles, a two-step K loop: bit-equal to the
    float64 product rounded once to f32."""
    got, want = run_gemm(128, 128, 64, 64, 64, 32, a_trans=a_trans, b_trans=b_trans,
                         swizzle=swizzle, atype=atype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("swizzle", [0, 128])
def test_tf32_gemm_is_exact(swizzle: int) -> None:
    """mma.sync m16n8k8 .tf32 (4-byte elements, B staged N x K): the same ldmatrix
    addresses as bf16 in bytes, k8 per 32-byte step; bit-equal to the float64 product of
    the tf32 values rounded once to f32."""
    got, want = run_gemm(128, 128, 64, 64, 64, 32, a_trans=False, b_trans=True,
                         swizzle=swizzle, atype="tf32")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("a_trans", "b_trans", "swizzle"),
                         [(False, False, 64), (True, True, 32), (False, True, 128),
                          (True, False, 0)])
def test_gemm_odd_tiles(a_trans: bool, b_trans: bool, swizzle: int) -> None:
    """BM = 128 (two 64-row blocks per warp), BN = 24 (an ldmatrix .x2 for the odd n8
    block, 3 chunks per row, a partial last round of copies), BK = 16."""
    got, want = run_gemm(128, 48, 32, 128, 24, 16, a_trans=a_trans, b_trans=b_trans,
                         swizzle=swizzle, seed=3)
    np.testing.assert_array_equal(got, want)


def test_gemm_with_4_byte_copies() -> None:
    """A row stride of 68 bytes is not 16-byte aligned: cp.async.ca of 4 bytes."""
    got, want = run_gemm(64, 64, 32, 64, 64, 32, a_trans=False, b_trans=False,
                         swizzle=128, pad_a=2, chunk=4, seed=4)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(UnsupportedError, match="16 bytes"):
        run_gemm(64, 64, 32, 64, 64, 32, a_trans=False, b_trans=False, swizzle=128,
                 pad_a=2)


@pytest.mark.parametrize(("v_trans", "atype"), [(False, "bf16"), (True, "bf16"),
                                                 (False, "f16")])
def test_attention_chain_reuses_registers(v_trans: bool, atype: str) -> None:
    """O = rn(Q K^T) V: the S accumulator becomes the A fragments of P @ V by
    cvt.rn.{atype}x2.f32 (first source in the upper half, sec. 9.7.9.21)."""
    rng, dt = np.random.default_rng(5), NP_TYPES[atype]
    q, k, v = (rng.standard_normal(s).astype(dt) for s in ((128, 32), (32, 32), (32, 32)))
    fn = attention_chain(128, 32, 32, v_trans=v_trans, swizzle=128, atype=atype)
    o = run(fn, [q, k, v.T.copy() if v_trans else v, np.zeros((128, 32), np.float32)])[3]
    p = reference(q, k.T).astype(dt)  # S rounded once to f32, then to the operand type
    np.testing.assert_array_equal(o, reference(p, v))


@pytest.mark.parametrize(("bm", "bn", "stride", "elem"),
                         [(128, 24, 25, "bf16"), (64, 16, 16, "f32"), (64, 16, 18, "f16"),
                          (64, 8, 9, "f32")])
def test_acc_rowcol_and_store_acc(bm: int, bn: int, stride: int, elem: str) -> None:
    """acc_rowcol is tiles.acc_coords; store_acc puts each register at its (row, col),
    paired (st.v2.f32 / packed b32) for even strides, one by one for odd ones, and
    touches nothing outside the box."""
    dt = {"f32": np.float32, **NP_TYPES}[elem]
    out = np.full((bm, stride), -1, dt)
    coords = np.zeros((128, bm * bn // 128, 2), np.int32)
    out, coords = run(layout_probe(bm, bn, stride, elem), [out, coords])
    rows, cols = acc_coords(bm, bn)
    np.testing.assert_array_equal(coords[..., 0], rows)
    np.testing.assert_array_equal(coords[..., 1], cols)
    want = np.full((bm, stride), -1.0, np.float32)
    want[:, :bn] = np.add.outer(np.arange(bm) * 1000, np.arange(bn))
    np.testing.assert_array_equal(out.astype(np.float32), want.astype(dt).astype(np.float32))


def test_two_stage_pipeline() -> None:
    """wait_group 1 with one committed group per step leaves only the newest copy
    pending (sec. 9.7.9.25): the pipelined result is exact."""
    a, b = operands(64, 128, 128, "bf16", np.random.default_rng(6))
    c = run(pipelined_gemm(64, 128, 128, 32, wait_n=1), [a, b, np.zeros((64, 128),
                                                                        np.float32)])[2]
    np.testing.assert_array_equal(c, reference(a, b))


def test_planted_wrong_wait_is_caught() -> None:
    """wait_group 2 lets tile t's copy still be in flight when ldmatrix reads it; ptxas
    cannot see this, the interpreter must."""
    a, b = operands(64, 64, 128, "bf16", np.random.default_rng(7))
    fn = pipelined_gemm(64, 64, 128, 32, wait_n=2)
    with pytest.raises(TesseraError, match="async copy read before its wait"):
        run(fn, [a, b, np.zeros((64, 64), np.float32)])


def test_planted_missing_wait_is_caught() -> None:
    a, b = operands(64, 64, 32, "bf16", np.random.default_rng(8))
    fn = gemm(64, 64, 32, 64, 64, 32, a_trans=False, b_trans=False, swizzle=0, wait=False)
    with pytest.raises(TesseraError, match="async copy read before its wait"):
        run(fn, [a, b, np.zeros((64, 64), np.float32)])


@pytest.mark.parametrize("read_swizzle", [0, 64])
def test_planted_reader_with_another_swizzle_is_wrong(read_swizzle: int) -> None:
    """Copies swizzled 128B but ldmatrix addresses computed with another swizzle read
    permuted rows: the product must differ (and no fault hides it)."""
    got, want = run_gemm(128, 128, 64, 64, 64, 32, a_trans=False, b_trans=True,
                         swizzle=128, read_swizzle=read_swizzle, seed=9)
    assert not np.array_equal(got, want)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([2.0**-6, 1.0, 2.0**6]))
def test_gemm_random_bf16(seed: int, scale: float) -> None:
    """Random bf16 of a varying range: 32-term float64 sums of bf16 products are exact,
    so the result is the float64 product rounded once."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((64, 32)) * scale).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    fn = gemm(64, 64, 32, 64, 64, 16, a_trans=False, b_trans=True, swizzle=128)
    c = run(fn, [a, b.T.copy(), np.zeros((64, 64), np.float32)])[2]
    np.testing.assert_array_equal(c, reference(a, b))


# ----------------------------------------------------------------------- assembly
KERNELS: dict[str, Callable[[], Function]] = {
    "gemm": lambda: gemm(128, 128, 64, 64, 64, 32, a_trans=False, b_trans=False, swizzle=128),
    "gemm_tt": lambda: gemm(128, 128, 64, 64, 64, 32, a_trans=True, b_trans=True, swizzle=0,
                            atype="f16"),
    "gemm_odd": lambda: gemm(128, 48, 32, 128, 24, 16, a_trans=True, b_trans=False,
                             swizzle=64, lda=130, chunk=4),
    "gemm_tf32": lambda: gemm(128, 128, 64, 64, 64, 32, a_trans=False, b_trans=True,
                              swizzle=128, atype="tf32"),
    "chain": lambda: attention_chain(128, 32, 32, v_trans=True, swizzle=128),
    "probe": lambda: layout_probe(128, 24, 25, "bf16"),
    "pipelined": lambda: pipelined_gemm(64, 128, 128, 32, wait_n=1),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_renders_and_assembles_for_sm80(name: str) -> None:
    """ptxas -arch=sm_80 accepts the rendered kernel with no (C75xx) repair advisory."""
    from tessera.backend.ptx.driver.assemble import ToolchainMissing, assemble
    from tessera.backend.ptx.render import render

    ptx = render(KERNELS[name]())
    assert isinstance(ptx, str)
    if name != "probe":
        assert "ldmatrix.sync.aligned.m8n8" in ptx
        shape = "m16n8k8.row.col.f32.tf32" if name == "gemm_tf32" else "m16n8k16.row.col"
        assert f"mma.sync.aligned.{shape}" in ptx
    try:
        built = assemble(ptx, "sm_80")
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert "(C75" not in built.log


# ------------------------------------------------------------------------- errors
def _emitter() -> tuple[TargetEmitter, Value]:
    body = Block()
    p = body.add_arg(U64)
    return TargetEmitter(body), p


def test_misuse_raises() -> None:
    e, p = _emitter()
    sa = smem(e, "sa", 64, 32, "bf16", 0)
    sb = smem(e, "sb", 32, 64, "bf16", 0)
    acc = [e.const(0.0, "f32")] * 32
    with pytest.raises(ShapeError, match="K = 32"):
        mma_block(e, acc, sa, sb, a_trans=False, b_trans=True)
    with pytest.raises(ShapeError, match="f32 registers"):
        mma_block(e, acc[:8], sa, sb, a_trans=False, b_trans=False)
    with pytest.raises(ShapeError, match="holds bf16"):
        mma_block(e, acc, sa, sb, a_trans=False, b_trans=False, atype="f16")
    with pytest.raises(UnsupportedError, match="BM % 64"):
        mma_block(e, acc[:16], smem(e, "s32", 32, 32, "bf16", 0), sb, a_trans=False,
                  b_trans=False)
    with pytest.raises(ShapeError, match="box into"):
        copy_async(e, sa, GlobalBox(p, 64, 16, 64, "bf16"))
    with pytest.raises(UnsupportedError, match="swizzle"):
        swizzle_offset(0, 16)
    with pytest.raises(ShapeError):
        acc_to_a(e, acc, 64, 24)
    with pytest.raises(UnsupportedError, match="f32, bf16 or f16"):
        store_acc(e, acc, p, 64, 64, 64, "f64")
