"""Fewer instructions per score in sm_90a attention: fast mode folds the score scale
into the fused ``exp`` (the row max of the unscaled scores, times the scale once a
row), and ``unroll=2`` runs two key blocks an iteration so that the two score tiles
take turns in their registers. The rule the fold rests on against NumPy, the
structure on Target IR, the bits against the unfolded and one-block forms, the bound,
ptxas, and the refusals."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.errors import ArgumentError, UnsupportedError
from tessera.ir.core import Instr, walk
from tessera.ir.dialects.target import For
from tessera.ir.dialects.target.async_ops import Wgmma
from tessera.ir.dialects.target.ops import Binary, Const, Fma
from tessera.lower.fastmath import LOG2E_F32
from tests.lower.sm90a.test_attention_warpspec import config, key_loops, qkv, split

BF16 = ml_dtypes.bfloat16
F32 = np.float32


def compiled(d: int = 128, bn: int = 128, causal: bool = False, seq: int = 1024,
             mode: str = "fast", **cfg: Any) -> Any:
    q = np.zeros((2, seq, d), BF16)
    return ts.compile_kernel(flash_attention, q, q, q, is_causal=causal, target="sm_90a",
                             config=config(bn=bn, **cfg), mode=mode)


def launch(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, mode: str = "fast",
           **cfg: Any) -> np.ndarray:
    out = ts.launch(flash_attention, None, (q, k, v), backend="target", target="sm_90a",
                    is_causal=causal, mode=mode, config=config(**cfg))
    return np.asarray(out).view(np.uint16)


def constants(instrs: list[Instr]) -> dict[Any, float]:
    return {i.results[0]: i.op.value for i in instrs if isinstance(i.op, Const)}


# -------------------------------------------------------------------------- the rule
finite = st.floats(float(F32(-3e38)), float(F32(3e38)), width=32)
scales = st.floats(float(F32(1e-30)), float(F32(1e30)), width=32)


@settings(max_examples=200, deadline=None)
@given(xs=st.lists(st.one_of(finite, st.sampled_from([0.0, -0.0, np.inf, -np.inf])),
                   min_size=1, max_size=40), c=scales)
@example(xs=[-0.0, 0.0], c=0.125)
@example(xs=[3e38, 1.0], c=1e10)  # the products overflow: inf either way
@example(xs=[1e-45, -1e-45], c=0.5)  # underflow to signed zeros
def test_max_of_scaled_values_is_the_scaled_max(xs: list[float], c: float) -> None:
    """Rounding is monotonic, so ``max(fl(x c)) = fl(max(x) c)`` for ``c > 0``, bit
    for bit (-0.0 ordered below +0.0, as PTX's ``max`` orders them)."""
    x = np.array(xs, F32)
    with np.errstate(over="ignore", under="ignore"):
        scaled = x * F32(c)
        want = scaled[np.lexsort((np.signbit(scaled) == 0, scaled))[-1]]  # +0.0 above -0.0
        top = x[np.lexsort((np.signbit(x) == 0, x))[-1]]
        got = F32(top * F32(c))
    assert got.tobytes() == want.tobytes()


# ---------------------------------------------------------------------------- folding
@pytest.mark.parametrize("d", [128, 64])
def test_the_scale_is_the_fused_exps_constant(d: int) -> None:
    """No score is multiplied by the scale in the key loop: the fused exp's fma takes
    ``fl(scale log2(e))``, and the two row maxima a thread holds are scaled once."""
    fn = compiled(d).kernel
    scale = float(F32(1 / np.sqrt(d)))
    folded = float(F32(scale * (1 / np.log(2))))
    for loop in key_loops(split(fn)[1]):
        body = [i for i in walk(loop.regions[0].block)]
        const = constants(body) | constants(list(walk(fn.body)))
        by_scale = [i for i in body if isinstance(i.op, Binary) and i.op.op == "mul"
                    and any(const.get(v) == scale for v in i.operands)]
        assert len(by_scale) == 2  # a thread's two rows of the 64x128 block
        fmas = [i for i in body if isinstance(i.op, Fma)]
        assert sum(const.get(i.operands[1]) == folded for i in fmas) == 64
        assert all(const.get(i.operands[1]) != LOG2E_F32 for i in fmas)


def test_the_masked_diagonal_block_keeps_the_multiply() -> None:
    """A causal kernel's diagonal block masks the scaled scores first: its ``mul`` has
    another user, so it is emitted and the fused exp takes ``log2(e)``."""
    fn = compiled(128, causal=True).kernel
    loops = key_loops(split(fn)[1])
    diagonal = list(walk(loops[1].regions[0].block))
    const = constants(diagonal) | constants(list(walk(fn.body)))
    assert sum(isinstance(i.op, Fma) and const.get(i.operands[1]) == LOG2E_F32
               for i in diagonal) == 64


@pytest.mark.parametrize(("seq", "d", "causal", "bn"), [(512, 128, True, 128),
                                                        (384, 64, False, 128),
                                                        (256, 128, False, 64)])
def test_fast_mode_stays_within_its_bound(seq: int, d: int, causal: bool, bn: int) -> None:
    """The folded kernel against the tile interpreter's checked result, within the
    tolerance ``check_against_reference`` derives (its ``exp(a c - b)`` term)."""
    q, k, v = qkv(1, seq, d)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=causal, backend="target",
                               target="sm_90a", mode="fast", config=config(bn=bn))


# ---------------------------------------------------------------------------- unroll
@pytest.mark.parametrize(("seq", "d", "causal", "warps"), [
    (320, 128, False, 12), (448, 64, True, 12), (256, 64, False, 4), (384, 128, True, 4)])
def test_two_blocks_an_iteration_give_the_same_bits(seq: int, d: int, causal: bool,
                                                    warps: int) -> None:
    """``unroll=2`` with an odd and an even block count: the same products in the same
    order, so the same bits as one block an iteration."""
    q, k, v = qkv(1, seq, d)
    stages = 3 if warps == 4 and d == 64 else 2
    outs = [launch(q, k, v, causal, warps=warps, stages=stages, **extra)
            for extra in ({"unroll": 2}, {})]
    assert np.array_equal(outs[0], outs[1])


def test_two_blocks_an_iteration_with_ping_pong() -> None:
    """The consumers take one turn a block, two a trip: the same bits."""
    q, k, v = qkv(1, 384, 64)
    outs = [launch(q, k, v, False, schedule="pingpong", **extra)
            for extra in ({"unroll": 2}, {})]
    assert np.array_equal(outs[0], outs[1])


def test_two_blocks_an_iteration_in_checked_mode() -> None:
    q, k, v = qkv(1, 320, 128)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=True, backend="target",
                               target="sm_90a", config=config(unroll=2))


def test_the_unrolled_loop_and_the_odd_block() -> None:
    """Each key loop becomes a loop of two blocks a trip (twice the products) and a
    loop of the odd one out."""
    fn = compiled(128, 64, unroll=2).kernel
    assert "2 blocks an iteration" in fn.attrs["kv_ring"]
    loops = [i for i in walk(split(fn)[1]) if isinstance(i.op, For)
             and any(isinstance(j.op, Wgmma) for j in walk(i.regions[0].block))]
    counts = [sum(isinstance(j.op, Wgmma) for j in walk(i.regions[0].block)) for i in loops]
    assert len(loops) == 2 and counts[0] == 2 * counts[1]


def test_unroll_refusals() -> None:
    with pytest.raises(UnsupportedError, match="192 f32 values a thread, over 160") as err:
        compiled(128, 128, unroll=2)
    assert err.value.loc.file.endswith("flash_attention.py")
    with pytest.raises(ArgumentError, match="unroll=3 should be 1 or 2"):
        compiled(128, 64, unroll=3)
    with pytest.raises(UnsupportedError, match="unroll=2: config overlap_softmax=False"):
        compiled(128, 64, unroll=2, overlap_softmax=False)


@pytest.mark.parametrize(("d", "bn", "causal", "extra"), [
    (128, 64, False, {}), (64, 128, True, {}), (128, 64, False, {"schedule": "pingpong"}),
    (64, 64, False, {"warps": 4, "stages": 3})])
def test_unrolled_ptxas_no_spills_no_advisory(d: int, bn: int, causal: bool,
                                              extra: dict[str, Any]) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing

    try:  # assemble raises on any ptxas advisory (a serialised wgmma, say)
        stats = compiled(d, bn, causal, unroll=2, **extra).assemble().stats["flash_attention"]
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0
