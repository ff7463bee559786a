"""The deferred P V order of sm_90a attention (tessera.lower.sm90a.attention.defer): P_m V_m is
issued a block later, beside S_{m+2}, and both products run during a softmax. Its
structure on Target IR and PTX, its bits against the tile interpreter (checked) and the
non-deferred order (fast), one warpgroup, warp-specialised and ping-pong, the
configuration knob, ptxas, and planted ordering bugs the Target IR interpreter and the
kernel check must report (every sanitizer of the interpreter on)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.errors import IRVerifyError, UnsupportedError
from tessera.frontend.kernel.backends.compile import target_arguments
from tessera.interp.target import TargetFault, run_target
from tessera.ir.core import Block, Instr, walk
from tessera.ir.dialects.target import If
from tessera.ir.dialects.target.async_ops import MbarrierArrive, WgmmaCommit, WgmmaWait
from tessera.ir.dialects.target.ops import Unary
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA
from tests.lower.sm90a.test_attention_ring import key_loops, loop_text
from tests.lower.sm90a.test_attention_warpspec import split

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(71)
ONE, SPLIT, PINGPONG = dict(num_warps=4), dict(num_warps=12), dict(num_warps=12,
                                                                    schedule="pingpong")


def config(stages: int = 2, **extra: Any) -> dict[str, Any]:
    """64x64 blocks asking for the deferred order (not the default: it timed slower)."""
    return dict(BLOCK_M=64, BLOCK_N=64, num_stages=stages, **{"defer_pv": True, **extra})


def qkv(bh: int, seq: int, d: int) -> tuple[np.ndarray, ...]:
    return tuple(rng.standard_normal((bh, seq, d)).astype(BF16) for _ in range(3))


def compiled(d: int, causal: bool, stages: int, mode: str = "fast", seq: int = 2048,
             **cfg: Any) -> Any:
    q = np.zeros((2, seq, d), BF16)
    return ts.compile_kernel(flash_attention, q, q, q, is_causal=causal, target="sm_90a",
                             config=config(stages, **cfg), mode=mode)


def consumer_loops(c: Any) -> list[Instr]:
    fn = c.kernel
    if fn.attrs["block"] == [128]:
        return key_loops(fn)
    return [i for i in key_loops(fn) if any(i is j for j in walk(split(fn)[1]))]


# ------------------------------------------------------------------------- structure
@pytest.mark.parametrize(("d", "stages", "cfg"), [(64, 3, ONE), (128, 2, ONE), (64, 2, SPLIT),
                                                  (128, 2, PINGPONG)])
@pytest.mark.parametrize("causal", [False, True])
def test_one_wait_an_iteration_and_both_products_before_the_softmax(
        d: int, stages: int, cfg: dict[str, Any], causal: bool) -> None:
    c = compiled(d, causal, stages, **cfg)
    assert "P V deferred a block" in c.kernel.attrs["kv_ring"]
    loops = consumer_loops(c)
    assert len(loops) == (2 if causal else 1)
    if causal:  # the blocks on the diagonal keep the overlapped order
        assert [i.op.n for i in walk(loops[1].regions[0].block)
                if isinstance(i.op, WgmmaWait)] == [1, 0]
    for loop in loops[:1]:
        body = loop.regions[0].block
        # no wait_group 1: one wait_group 0 an iteration, one more in the last's drain
        top = [i.op.n for i in body.instrs if isinstance(i.op, WgmmaWait)]
        drains = [i for i in body.instrs if isinstance(i.op, If)
                  and any(isinstance(j.op, WgmmaRegA) for j in walk(i.regions[0].block))]
        assert top == [0] and len(drains) == 1
        assert [i.op.n for i in walk(drains[0].regions[0].block)
                if isinstance(i.op, WgmmaWait)] == [0]
        # S_{m+1} and P_{m-1} V_{m-1} are committed before the softmax's exponentials,
        # the one wait comes after them
        order = list(walk(body))
        where = {id(i): k for k, i in enumerate(order)}
        pv = [where[id(i)] for i in body.instrs if isinstance(i.op, WgmmaRegA)]
        commits = [where[id(i)] for i in body.instrs if isinstance(i.op, WgmmaCommit)]
        exps = [where[id(i)] for i in order if isinstance(i.op, Unary) and i.op.op == "ex2"]
        wait = where[id(next(i for i in body.instrs if isinstance(i.op, WgmmaWait)))]
        assert len(pv) == 64 // 16 and len(commits) == 2
        assert max(pv) < max(commits) < min(exps) and max(exps) < wait


def test_ptx_of_a_deferred_loop() -> None:
    ptx = compiled(128, True, 2, **ONE).ptx
    bodies = [b for b in loop_text(ptx) if "wgmma.mma_async" in b and "mbarrier" in b]
    assert len(bodies) == 2
    assert "wgmma.wait_group.sync.aligned 1;" not in bodies[0]
    assert bodies[0].count("wgmma.wait_group.sync.aligned 0;") == 2  # the drain's too
    assert "wgmma.wait_group.sync.aligned 1;" in bodies[1]  # the diagonal's order


def test_the_knob_and_what_the_plan_says() -> None:
    off = compiled(128, False, 2, defer_pv=False, **ONE)
    assert "P V waited in its block (config defer_pv=False)" in off.kernel.attrs["kv_ring"]
    (loop,) = key_loops(off.kernel)
    assert [i.op.n for i in walk(loop.regions[0].block) if isinstance(i.op, WgmmaWait)] \
        == [1, 0]
    # by default P V waits in its block (the deferred order timed slower on an H200)
    default = compiled(128, False, 2, defer_pv=None, **ONE).kernel.attrs["kv_ring"]
    assert "P V waited in its block (defer_pv not set)" in default
    # two stages at D=64 keep the sequential order (registers): nothing to defer
    seq = compiled(64, False, 2, defer_pv=None, **ONE).kernel.attrs["kv_ring"]
    assert "sequential (" in seq and "P V" not in seq
    with pytest.raises(UnsupportedError, match="defer_pv=True: the order is sequential") \
            as err:
        compiled(64, False, 2, defer_pv=True, **ONE)
    assert err.value.loc.file.endswith("flash_attention.py")


def test_defer_problem_reasons() -> None:
    from tessera.lower.sm90a.attention.defer import DEFER_THREAD_REGS, defer_problem
    from tessera.lower.sm90a.attention.plan import match_kv_loops

    q = np.zeros((1, 256, 64), BF16)
    fn = ts.compile_kernel(flash_attention, q, q, q, is_causal=True, target="sm_90a",
                           config=config(3, **ONE)).tile
    matched = match_kv_loops(fn)
    assert matched is not None
    loops = matched[0]
    assert defer_problem(fn, loops, 64, 64, 64, 0, 3) is None
    assert defer_problem(fn, loops, 64, 64, 128, 0, 2) is None
    assert DEFER_THREAD_REGS == (168, 232)
    # 168 registers a thread: 3 CTAs, where two D=64 stages' shared memory fits 5
    assert defer_problem(fn, loops, 64, 64, 64, 0, 2) == (
        "registers: about 168 a thread would leave 3 CTAs per SM where the shared memory "
        "of 2 stages fits 5")
    assert defer_problem(fn, loops, 64, 64, 64, 2, 2) is None  # setmaxnreg's share
    assert "not wgmma's register A" in defer_problem(fn, loops, 128, 64, 64, 0, 2)


# ------------------------------------------------------------------------------ bits
@pytest.mark.parametrize(("seq", "d", "causal", "stages", "cfg"), [
    (256, 64, True, 3, ONE), (192, 128, False, 2, ONE), (320, 128, True, 3, ONE),
    (320, 64, True, 2, SPLIT), (256, 128, False, 2, PINGPONG)])
def test_checked_mode_gives_the_tile_interpreters_bits(seq: int, d: int, causal: bool,
                                                       stages: int, cfg: dict) -> None:
    q, k, v = qkv(1, seq, d)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=causal, backend="target",
                               target="sm_90a", config=config(stages, **cfg))


@pytest.mark.parametrize(("seq", "d", "causal", "stages", "cfg"), [
    (320, 64, True, 3, ONE), (256, 128, False, 2, ONE), (448, 64, True, 2, SPLIT),
    (384, 128, False, 3, SPLIT), (512, 64, True, 2, PINGPONG), (64, 64, True, 3, ONE)])
def test_fast_mode_gives_the_non_deferred_bits(seq: int, d: int, causal: bool, stages: int,
                                               cfg: dict) -> None:
    q, k, v = qkv(2, seq, d)
    outs = [np.asarray(ts.launch(flash_attention, None, (q, k, v), backend="target",
                                 target="sm_90a", is_causal=causal, mode="fast",
                                 config=config(stages, defer_pv=on, **cfg)))
            for on in (True, False)]
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


# ----------------------------------------------------------------------------- ptxas
@pytest.mark.parametrize(("d", "stages", "cfg"), [(64, 3, ONE), (128, 2, ONE), (64, 2, SPLIT),
                                                  (128, 2, SPLIT)])
@pytest.mark.parametrize("mode", ["checked", "fast"])
def test_ptxas_no_spills_no_advisory(d: int, stages: int, cfg: dict, mode: str) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing
    from tessera.lower.sm90a.attention.defer import DEFER_THREAD_REGS

    c = compiled(d, True, stages, mode=mode, **cfg)
    assert "P V deferred a block" in c.kernel.attrs["kv_ring"]
    try:  # assemble raises on any ptxas advisory (a serialised wgmma, say)
        stats = c.assemble().stats["flash_attention"]
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0
    if cfg is ONE:  # what the plan's register reasoning assumes
        assert stats.registers <= DEFER_THREAD_REGS[0 if d <= 64 else 1]


# --------------------------------------------------------------------------- planted
def small(stages: int = 3, **cfg: Any) -> tuple[Any, list[np.ndarray]]:
    q, k, v = qkv(1, 384, 64)  # 6 key blocks: the stages are refilled
    c = ts.compile_kernel(flash_attention, q, k, v, is_causal=False, target="sm_90a",
                          config=config(stages, **cfg), mode="fast")
    return c, [q, k, v]


def run(c: Any, arrays: list[np.ndarray]) -> None:
    args, _ = target_arguments(c, arrays)
    run_target(c.kernel, args)


def releases_v(instr: Instr) -> bool:
    """The ``ptx.if`` of the release of ``V_{m-1}`` (an arrival and no product)."""
    inner = [j for r in instr.regions for j in walk(r.block)]
    return isinstance(instr.op, If) and any(isinstance(j.op, MbarrierArrive) and j.op.tx == 0
                                            for j in inner) \
        and not any(isinstance(j.op, WgmmaRegA) for j in inner)


def loop_body(c: Any) -> Block:
    (loop,) = consumer_loops(c)
    return loop.regions[0].block


def test_planted_release_of_v_before_its_product_retired() -> None:
    """V_{m-1} released before the wait that retires P_{m-1} V_{m-1}: thread 0 refills
    its stage while the product reads it."""
    c, arrays = small(**ONE)
    body = loop_body(c).instrs
    wait = next(k for k, i in enumerate(body) if isinstance(i.op, WgmmaWait))
    release = next(k for k, i in enumerate(body) if k > wait and releases_v(i))
    body.insert(wait, body.pop(release))
    with pytest.raises(TargetFault, match="overwritten while a wgmma reads it"):
        run(c, arrays)


def test_planted_read_of_the_accumulator_before_the_wait() -> None:
    """The wait moved to the end of the iteration: the rescale reads P V's accumulator
    while it is in flight (refused before the launch)."""
    c, arrays = small(**ONE)
    body = loop_body(c).instrs
    wait = next(k for k, i in enumerate(body) if isinstance(i.op, WgmmaWait))
    body.insert(len(body) - 1, body.pop(wait))
    with pytest.raises(IRVerifyError, match=r"reads a wgmma accumulator before "
                                            r"wgmma\.wait_group retires it"):
        run(c, arrays)


def test_planted_product_left_in_flight_across_the_back_edge() -> None:
    """Without the wait, the loop's copies of the carried next scores read them in
    flight (ptxas would serialise the pipeline, C7514)."""
    c, arrays = small(**ONE)
    body = loop_body(c).instrs
    body[:] = [i for i in body if not isinstance(i.op, WgmmaWait)]
    with pytest.raises(IRVerifyError, match=r"yields a wgmma register still in flight|"
                                            r"reads a wgmma accumulator"):
        run(c, arrays)
