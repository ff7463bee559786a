"""The softmax's row statistics and exponentials as lowered: the row max of an
accumulator-layout tile reduces each thread's values before one butterfly per row (the
same bits in any order), fast mode's sum takes that order too, a cast rounds with
``mul.rn`` only a value that may be a wide accumulator and packs ``wgmma``'s register A
pairs with ``cvt.rn.bf16x2.f32``, and fast mode's ``exp(a - b)`` is ``fma`` + ``ex2``
within its documented bound."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.frontend.kernel.backends.fast_bounds import fast_budget
from tessera.interp.target.numeric import fmin_fmax
from tessera.ir.core import Block, walk
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.target.ops import Binary, Cvt, Fma, Shfl, Unary
from tessera.lower.emit import TargetEmitter
from tessera.lower.fastmath import LOG2E_F32, SHIFT_MAX, exp_error
from tessera.lower.layout import Acc
from tessera.lower.rules.reduce import reduce_acc
from tessera.lower.values import Dist
from tests.lower.test_lowering import TARGETS, example

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(7)


@ts.kernel
def acc_row_max(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                X: ts.Tensor["M", "N", ts.f32], out: ts.Tensor["M", "N", ts.f32]):
    """The row max of ``(A @ B) * X`` in the accumulator layout (``A @ B`` is all ones
    in the tests, so the max is ``X``'s), stored in every column (``where`` selects
    its bits unchanged)."""
    smem_a = ts.tile.alloc_shared((BM, K), ts.bf16)
    smem_b = ts.tile.alloc_shared((K, BN), ts.bf16)
    ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:K])
    ts.tile.cp_async(smem_b, B[0:K, 0:BN])
    ts.tile.barrier()
    s = ts.tile.mma(smem_a, smem_b) * X[tile_m:tile_m + BM, 0:BN]
    m = ts.tile.row_max(s)[:, None]
    out[tile_m:tile_m + BM, 0:BN] = ts.tile.where(s == s, m, m)


def reduced(kind: str, cols: int = 64) -> Counter[str]:
    """The Target IR of one accumulator-layout row reduction of a 64-row tile: counts
    of ``shfl`` and of the combining op."""
    block = Block()
    e = TargetEmitter(block)
    layout = Acc(64, cols)
    regs = [block.add_arg(RegType("f32")) for _ in range(cols // 2)]
    out = reduce_acc(e, kind, Dist(layout, regs, "f32"))
    assert len(out) == 2  # a thread holds two rows of each 64-row block
    counts: Counter[str] = Counter()
    for i in block.instrs:
        if isinstance(i.op, Shfl):
            counts["shfl"] += 1
        elif isinstance(i.op, Binary):
            counts[f"{i.op.op}.{i.op.type}"] += 1
    return counts


@pytest.mark.parametrize("cols", [16, 64, 128])
def test_row_max_of_an_accumulator_is_one_butterfly_per_row(cols: int) -> None:
    """cols / 4 values of a row per thread: a tree of cols/4 - 1 maxima, then 2
    shuffles and maxima per row, where the per-chunk form took 2 per 8 columns."""
    assert reduced("max", cols) == {"shfl": 4, "max.f32": 2 * (cols // 4 - 1 + 2)}
    # fast mode's f32 sum takes the same order (checked: the f64 tree, 2 per chunk)
    assert reduced("fsum", cols) == {"shfl": 4, "add.f32": 2 * (cols // 4 - 1 + 2)}
    checked = reduced("sum", cols)
    assert checked["shfl"] == 2 * 2 * 2 * (cols // 8)  # two b32 halves per f64 shuffle


def ones_product(m: int, n: int, k: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """``A``, ``B`` with ``A @ B`` exactly 1 everywhere."""
    a, b = np.zeros((m, k), BF16), np.zeros((k, n), BF16)
    a[:, 0], b[0, :] = 1, 1
    return a, b


def max_nan(x: np.ndarray) -> np.ndarray:
    """The row max by PTX's ``max.NaN`` rule folded left to right (any order gives the
    same bits): the canonical NaN if a NaN is in the row, -0.0 below +0.0."""
    out = x[:, 0].copy()
    for j in range(1, x.shape[1]):
        out = fmin_fmax(out, x[:, j], True)
    nan = np.isnan(x).any(axis=1)
    bits = out.view(np.uint32).copy()
    bits[nan] = 0x7FFFFFFF
    return bits.view(np.float32)


SPECIAL = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, -1e30, 3.0e38])


@settings(max_examples=12, deadline=None)
@given(target=st.sampled_from(TARGETS), seed=st.integers(0, 2**32 - 1),
       specials=st.lists(st.tuples(st.integers(0, 64 * 64 - 1), SPECIAL), max_size=40),
       zero_rows=st.lists(st.integers(0, 63), max_size=4))
def test_row_max_bits_over_drawn_inputs(target: str, seed: int,
                                        specials: list[tuple[int, float]],
                                        zero_rows: list[int]) -> None:
    """NaN, infinities, signed zeros and rows of zeros of both signs: the lowered row
    max equals max.NaN folded in element order, bit for bit."""
    x = np.random.default_rng(seed).standard_normal((64, 64)).astype(np.float32)
    flat = x.reshape(-1)
    for i, v in specials:
        flat[i] = v
    for r in zero_rows:  # a row of zeros: the sign of the max is the order's question
        x[r] = np.where(np.random.default_rng(r).random(64) < 0.5, -0.0, 0.0)
    a, b = ones_product(64, 64)
    out = np.zeros((64, 64), np.float32)
    ts.launch(acc_row_max, None, (a, b, x, out), backend="target", target=target,
              tile_shape=(64, 64))
    want = np.repeat(max_nan(x)[:, None], 64, axis=1)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


def fa(d: int, mode: str, bn: int = 64) -> Any:
    q = np.zeros((2, 256, d), BF16)
    return compile_kernel(flash_attention, q, q, q, is_causal=False, target="sm_90a",
                          mode=mode, config=dict(BLOCK_M=64, BLOCK_N=bn, num_warps=4,
                                                 num_stages=2))


def loop_ops(compiled: Any) -> Counter[str]:
    """Counts of the Target IR ops of flash attention's key loop (the ``for`` holding
    the register-A ``wgmma``s): ``shfl``, ``mul``, ``fma``, ``ex2``, ``cvt`` forms."""
    from tessera.ir.dialects.target import For
    from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA

    loop = next(i for i in walk(compiled.kernel) if isinstance(i.op, For) and any(
        isinstance(j.op, WgmmaRegA) for j in walk(i)))
    counts: Counter[str] = Counter()
    for i in walk(loop):
        op = i.op
        if isinstance(op, Shfl):
            counts["shfl"] += 1
        elif isinstance(op, (Binary, Unary)):
            counts[f"{op.op}.{op.type}"] += 1
        elif isinstance(op, Fma):
            counts[f"fma.{op.type}"] += 1
        elif isinstance(op, Cvt):
            counts[f"cvt.{op.to}.{op.frm}"] += 1
    return counts


@pytest.mark.parametrize("d", [64, 128])
def test_flash_attention_loop_instruction_counts(d: int) -> None:
    """Per key block a consumer thread holds 32 scores of 2 rows: fast mode shuffles 4
    times for the row max and 4 for the sum, fuses ``exp(s - m)`` into 32 ``fma`` +
    ``ex2`` with 2 ``mul`` for ``-(m log2 e)``, and packs P in 16 ``cvt.bf16x2``; no
    ``mul`` by 1.0 is left (P comes from ``ex2``, never a wide accumulator)."""
    fast = loop_ops(fa(d, "fast"))
    assert fast["shfl"] == 8
    assert fast["fma.f32"] == 32 and fast["ex2.f32"] == 32 + 2  # P and alpha
    assert fast["cvt.bf16x2.f32"] == 16 and fast["cvt.bf16.f32"] == 0
    assert fast["sub.f32"] == 2  # alpha's m_i - m_new only
    # multiplies: the scale, folded into the fused exp's constant, once a row (2),
    # alpha * acc (d/2 per thread), alpha * l (2), alpha's log2(e) (2) and -(m log2 e)
    # (2); nothing multiplies by 1.0
    assert fast["mul.f32"] == 2 + d // 2 + 2 + 2 + 2
    checked = loop_ops(fa(d, "checked"))
    # the row max is exact and reordered in checked mode too; the f64 sum keeps its tree
    assert checked["shfl"] == 4 + 2 * 2 * 2 * 8
    assert checked["cvt.bf16x2.f32"] == 16 and checked["cvt.bf16.f32"] == 0
    assert checked["mul.f32"] == 32 + d // 2 + 2


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_checked_bits_unchanged(causal: bool) -> None:
    """The reordered max, the dropped ``mul`` by 1.0 and the bf16x2 pairs give the tile
    interpreter's bits (sm_90a's register-A path and sm_80's)."""
    q, k, v = (rng.standard_normal((1, 256, 64)).astype(BF16) for _ in range(3))
    for target in TARGETS:
        ts.check_against_reference(flash_attention, q, k, v, is_causal=causal,
                                   backend="target", target=target,
                                   config=dict(BLOCK_M=64, BLOCK_N=64, num_warps=4,
                                               num_stages=2))


def test_a_cast_of_an_accumulator_still_rounds_it_first() -> None:
    """``cast(mma(...), f32)`` of a wide accumulator keeps its ``mul.rn`` by 1.0 (one
    rounding, as the tile interpreter's); values an instruction rounded need none."""
    from tessera.interp.target.wide import may_be_wide
    from tests.lower import kernels

    a, b = np.zeros((128, 256), BF16), np.zeros((256, 64), BF16)
    compiled = compile_kernel(kernels.gemm_split_k, a, b,
                              np.zeros((128, 64), np.float32), target="sm_80",
                              tile_shape=(64, 64, 64))
    ones = [i for i in walk(compiled.kernel) if isinstance(i.op, Binary) and i.op.op == "mul"
            and any(getattr(v.owner.op, "value", None) == 1.0 for v in i.operands)]
    assert ones and all(may_be_wide(i.operands[0]) for i in ones)
    block = Block()
    e = TargetEmitter(block)
    x = block.add_arg(RegType("f32"))
    assert may_be_wide(x)  # a region argument: a loop may carry an accumulator
    y = e.un("ex2", x, "f32", "approx.ftz")
    assert not may_be_wide(y) and not may_be_wide(e.add(y, e.mul(y, y, "f32"), "f32"))
    assert may_be_wide(e.add(y, x, "f32"))  # add keeps a wide operand wide


def test_fast_shifted_exp_is_fma_and_within_its_bound() -> None:
    """Row softmax and flash attention in fast mode: ``exp(x - max)`` counts with the
    shifted bound (2^-15.2 at |b| <= 256, above the plain 2^-17.2), results within the
    tolerance; a row max near 256 stays within it."""
    assert 2.0**-15.5 < exp_error(SHIFT_MAX) < 2.0**-15 and exp_error() < exp_error(1.0)
    sm = example("row_softmax").row_softmax
    x = (3 * rng.standard_normal((16, 64))).astype(np.float32)
    x[3] += 250.0  # |b| near SHIFT_MAX: the argument's error is |b| 2^-24
    x[5] -= 250.0
    compiled = compile_kernel(sm, x, np.zeros_like(x), target="sm_80", tile_shape=(8,),
                              mode="fast")
    # 8 x 64 values over 128 threads: 4 a thread, of one row (one -(m log2 e))
    assert compiled.ptx.count("fma.rn.f32") == compiled.ptx.count("ex2.approx") == 4
    assert "sub.rn.f32" not in compiled.ptx
    assert f"0f{np.float32(-LOG2E_F32).view(np.uint32):08X}" in compiled.ptx
    ts.check_against_reference(sm, x, np.zeros_like(x), backend="target", target="sm_80",
                               tile_shape=(8,), mode="fast")
    q, k, v = (rng.standard_normal((1, 128, 64)).astype(BF16) for _ in range(3))
    fn = flash_attention.compile(q, k, v, is_causal=True, config=dict(
        BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)).functions["flash_attention"]
    budget = fast_budget(fn)
    # per trip (2 key blocks): exp(s - m) fused (the unmasked block's with the scale
    # folded in), alpha's exp(m_i - m_new) plain
    assert budget.terms["exp(a - b)"] == (exp_error(SHIFT_MAX), 1)
    assert budget.terms["exp(a c - b)"] == (exp_error(SHIFT_MAX, scaled=True), 1)
    assert budget.terms["exp"] == (exp_error(), 2) and budget.exp_count == 4


def test_fused_exp_matches_the_bound_against_exact_exponentials() -> None:
    """The fused sequence modelled in float64 with the interpreter's correctly rounded
    ex2: over differences in [-88, 0] and shifts up to SHIFT_MAX, the relative error
    against exp(fl(a - b)) stays within exp_error(SHIFT_MAX) and exceeds the plain
    bound somewhere (the bound is not vacuous)."""
    from tessera.interp.target.approx import ex2_approx_ftz

    b = rng.uniform(-SHIFT_MAX, SHIFT_MAX, 20000).astype(np.float32)
    a = (b - rng.uniform(0, 88, b.size)).astype(np.float32)
    x = (a - b).astype(np.float32)
    nb = (b * np.float32(-LOG2E_F32)).astype(np.float32)
    t = (a.astype(np.float64) * np.float32(LOG2E_F32) + nb).astype(np.float32)  # exact fma
    got = ex2_approx_ftz(t).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    normal = ref > 2.0**-126
    rel = np.abs(got - ref)[normal] / ref[normal]
    assert rel.max() <= exp_error(SHIFT_MAX)
    assert math.isfinite(rel.max()) and rel.max() > 2.0**-22


def test_unfused_exps_keep_the_plain_form() -> None:
    """An ``exp`` whose difference is also used elsewhere, or whose subtrahend is not a
    broadcast, keeps ``sub`` + ``mul`` + ``ex2`` (nothing to share per row)."""
    exp_rows = _exp_of_difference
    x = rng.standard_normal((4, 32)).astype(np.float32)
    compiled = compile_kernel(exp_rows, x, x.copy(), np.zeros_like(x), target="sm_80",
                              tile_shape=(1,), mode="fast")
    ops = Counter(type(i.op).__name__ for i in walk(compiled.kernel))
    assert ops["Fma"] == 0
    ts.check_against_reference(exp_rows, x, x.copy(), np.zeros_like(x), backend="target",
                               target="sm_80", tile_shape=(1,), mode="fast")


@ts.kernel
def _exp_of_difference(x: ts.Tensor["R", "C", ts.f32], y: ts.Tensor["R", "C", ts.f32],
                       out: ts.Tensor["R", "C", ts.f32]):
    """exp(x - y) of two whole tiles (no broadcast)."""
    out[tile_m:tile_m + 1, 0:C] = ts.tile.exp(x[tile_m:tile_m + 1, 0:C]
                                              - y[tile_m:tile_m + 1, 0:C])


@ts.kernel
def acc_uses(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
             sums: ts.Tensor["M", "N", ts.f32], tanhs: ts.Tensor["M", "N", ts.f32]):
    """The row sum of the accumulator ``A @ B`` (in every column) and its ``tanh``."""
    smem_a = ts.tile.alloc_shared((BM, K), ts.bf16)
    smem_b = ts.tile.alloc_shared((K, BN), ts.bf16)
    ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:K])
    ts.tile.cp_async(smem_b, B[0:K, 0:BN])
    ts.tile.barrier()
    s = ts.tile.mma(smem_a, smem_b)
    sums[tile_m:tile_m + BM, 0:BN] = s * 0.0 + ts.tile.row_sum(s)[:, None]
    tanhs[tile_m:tile_m + BM, 0:BN] = ts.tile.tanh(s)


def _uses(a: np.ndarray, b: np.ndarray, target: str) -> np.ndarray:
    """The tile interpreter's row sums, after the Target IR interpreter gave its bits."""
    out = [np.zeros((64, 64), np.float32) for _ in range(2)]
    ts.check_against_reference(acc_uses, a, b, *out, backend="target", target=target,
                               tile_shape=(64, 64, 32))
    acc_uses(a, b, *out, tile_shape=(64, 64, 32))
    return out[0]


@pytest.mark.parametrize("target", TARGETS)
def test_the_row_sum_of_an_accumulator_sums_its_f32_values(target: str) -> None:
    """``row_sum(acc)`` rounds the wide accumulator to f32 and sums those values, in the
    tile interpreter and in the lowering (it summed the exact products' sums: the row
    of ``1 + 2^-30`` and ``-1`` sums to 0 in f32 terms, to ``2^-30`` exactly)."""
    a, b = np.zeros((64, 32), BF16), np.zeros((32, 64), BF16)
    a[0, :2], b[0, 0], b[1, 0], b[0, 1] = (1.0, 2.0**-30), 1.0, 1.0, -1.0
    assert _uses(a, b, target)[0, 0] == 0.0  # fl(1 + 2^-30) = 1, then 1 - 1


@pytest.mark.parametrize("target", TARGETS)
def test_a_specified_function_of_an_accumulator_takes_its_f32_value(target: str) -> None:
    """``tanh(acc)`` (and ``erf``, ``erfc``, ``log``: the specified binary64 functions)
    rounds the wide accumulator to f32 before widening it, as the tile interpreter does:
    ``x y + 2^-30`` is ``x y`` in f32, and the lowering took the tanh of the exact sum."""
    a, b = np.zeros((64, 32), BF16), np.zeros((32, 64), BF16)
    a[:, 0] = np.linspace(0.5, 1.0, 64)
    a[:, 1] = 2.0**-30
    b[0, :], b[1, :] = np.linspace(0.5, 1.0, 64), 1.0
    _uses(a, b, target)
