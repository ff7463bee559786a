"""Flash attention's K/V ring on sm_90a (tessera.lower.sm90a.attention.plan, .ring, .loop): the
structure on Target IR and PTX (stages, full/empty mbarriers, wait_group 1, no bar.sync
in the key loops, P in registers, the causal loops), the bits of every configuration
against the tile interpreter (fast mode within its bound), the loads a causal program
makes, ptxas, and planted ordering bugs the Target IR interpreter must report."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.frontend.kernel.backends.compile import target_arguments
from tessera.interp.target import TargetFault, run_target
from tessera.ir.core import Block, Function, Instr, walk
from tessera.ir.dialects.target import For, If
from tessera.ir.dialects.target.async_ops import (
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TmaLoad,
    WgmmaWait,
)
from tessera.ir.dialects.target.ops import Bar, SharedAlloc, Store
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA
from tessera.lower.sm90a.attention.plan import overlap_problem

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(52)


def config(bm: int = 64, bn: int = 64, stages: int = 2, **extra: Any) -> dict[str, Any]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=stages, **extra)


def qkv(bh: int, seq: int, d: int) -> tuple[np.ndarray, ...]:
    return tuple(rng.standard_normal((bh, seq, d)).astype(BF16) for _ in range(3))


def compiled(d: int = 64, causal: bool = False, seq: int = 2048, **cfg: Any) -> Any:
    q = np.zeros((16, seq, d), BF16)
    mode = cfg.pop("mode", "checked")
    return ts.compile_kernel(flash_attention, q, q, q, is_causal=causal, target="sm_90a",
                             config=config(**cfg), mode=mode)


def key_loops(fn: Function) -> list[Instr]:
    """The ``ptx.for`` loops over key blocks (those holding the P @ V product)."""
    return [i for i in walk(fn.body) if isinstance(i.op, For)
            and any(isinstance(j.op, (WgmmaRegA,)) or "wgmma" in j.op.name
                    for j in walk(i.regions[0].block))]


def inside(loop: Instr, kind: type) -> list[Instr]:
    return [i for i in walk(loop.regions[0].block) if isinstance(i.op, kind)]


# ------------------------------------------------------------------------- structure
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize(("d", "causal"), [(64, False), (64, True), (128, False)])
def test_ring_structure_on_target_ir(d: int, causal: bool, stages: int) -> None:
    # the overlapped order itself (the deferred P V: test_attention_defer.py)
    fn = compiled(d, causal, stages=stages, defer_pv=False).kernel
    allocs = {i.op.sym: i.op.size for i in walk(fn.body) if isinstance(i.op, SharedAlloc)}
    rings = [size for sym, size in allocs.items() if sym.startswith("kv_ring")]
    assert rings == [stages * 64 * d * 2] * 2  # K and V, S blocks each
    inits = Counter(i.op.count for i in walk(fn.body) if isinstance(i.op, MbarrierInit))
    assert inits[128] == 2 * stages  # empty_k, empty_v: one arrival per thread
    assert inits[1] >= 2 * stages  # full_k, full_v (and the query's group ring)
    loops = key_loops(fn)
    assert len(loops) == (2 if causal else 1)  # a causal program: unmasked, then diagonal
    # the next scores overlap the softmax where registers do not cost CTAs per SM
    overlapped = (d, stages) != (64, 2)
    assert (overlap_problem(64, 64, d, stages) is None) == overlapped
    assert ("overlaps the softmax" in fn.attrs["kv_ring"]) == overlapped
    for loop in loops:
        assert not inside(loop, Bar)  # no CTA-wide barrier in a key loop
        assert [i.op.n for i in inside(loop, WgmmaWait)] == ([1, 0] if overlapped else [0, 0])
        assert len(inside(loop, WgmmaRegA)) == 64 // 16  # P stays in registers
        arrivals = inside(loop, MbarrierArrive)
        assert sum(i.op.tx == 0 for i in arrivals) == 2  # releases of K and V
        # refills announcing a block: one per loop the block may belong to (this or later)
        later = len(loops) - loops.index(loop)
        assert sum(i.op.tx == 64 * d * 2 for i in arrivals) == 2 * later
        # full k/v (and full v for the discarded product past the last block), empty k/v
        assert len(inside(loop, MbarrierWait)) == (5 if overlapped else 4)
        assert inside(loop, TmaLoad)
    shared_stores = [i.op for i in walk(fn.body) if isinstance(i.op, Store)
                     and i.op.space == "shared"]
    assert all(op.type != "b32" for op in shared_stores)  # P is never stored
    assert fn.attrs["ring_stages"] == stages


def loop_text(ptx: str) -> list[str]:
    """The PTX of each loop: from a loop label to its backward branch."""
    out = []
    for label in re.findall(r"^(\$?L\w*loop\w*):", ptx, re.M) or re.findall(r"^(\S+):", ptx,
                                                                            re.M):
        start = ptx.index(f"{label}:")
        back = ptx.find(f"bra.uni {label};", start)
        if back == -1:
            back = ptx.find(f" {label};", start)
        if back != -1:
            out.append(ptx[start:back])
    return out


@pytest.mark.parametrize("stages", [2, 3])
def test_ptx_text_of_the_ring(stages: int) -> None:
    ptx = compiled(64, True, stages=stages, defer_pv=False).ptx
    bodies = [b for b in loop_text(ptx) if "wgmma.mma_async" in b and "mbarrier" in b]
    assert len(bodies) == 2, "no key loops in the PTX"
    for body in bodies:
        assert ("wgmma.wait_group.sync.aligned 1;" in body) == (stages == 3)
        assert not re.search(r"\bbar\.sync\b|\bbarrier\.sync\b", body)
        assert "cp.async.bulk.tensor.2d.shared::cluster.global" in body
        assert re.search(r"mbarrier\.arrive\.expect_tx\.shared::cta\.b64", body)
        assert re.search(r"mbarrier\.try_wait\.parity", body)
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 "
                         r"\{[^}]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}", body)


def test_one_stage_keeps_the_tile_programs_sequence() -> None:
    fn = compiled(64, False, stages=1).kernel
    (loop,) = key_loops(fn)
    assert inside(loop, Bar) and not any(i.op.sym.startswith("kv_ring") for i in walk(fn.body)
                                         if isinstance(i.op, SharedAlloc))
    assert "ring_stages" not in fn.attrs


def test_sequential_order_where_registers_do_not_allow() -> None:
    """A 128x64 score tile: P is staged through shared memory (its own bar.sync), so the
    next scores are not issued early; the ring still streams K and V, and the reason is
    recorded on the kernel (tessera ptx --stats prints it)."""
    assert overlap_problem(128, 64, 64) and overlap_problem(64, 64, 64, 3) is None
    fn = compiled(64, False, bm=128).kernel
    (loop,) = key_loops(fn)
    assert 1 not in [i.op.n for i in inside(loop, WgmmaWait)]
    assert "sequential (P of a 128x64 block is staged" in fn.attrs["kv_ring"]
    off = compiled(64, False, stages=3, overlap_softmax=False).kernel
    (loop,) = key_loops(off)
    assert [i.op.n for i in inside(loop, WgmmaWait)] == [0, 0] and not inside(loop, Bar)
    assert "config overlap_softmax=False" in off.attrs["kv_ring"]


def test_registers_decide_the_order_at_64x64() -> None:
    """Two stages of 64x64 blocks with D=64 leave room for 5 CTAs in shared memory: the
    overlapped order's registers (about 136 to 164 a thread) would allow 3, the
    sequential order's (104 to 128) 4, so the order stays sequential and says why.
    Three stages fit only 3 CTAs anyway, and D=128 two: there the next scores overlap."""
    why = overlap_problem(64, 64, 64, 2)
    assert why == "registers: about 168 a thread would leave 3 CTAs per SM where the " \
                  "shared memory of 2 stages fits 5"
    assert "sequential (" + why in compiled(64, False).kernel.attrs["kv_ring"]
    assert overlap_problem(64, 64, 64, 3) is None and overlap_problem(64, 64, 128, 2) is None


def test_stats_print_the_ring(tmp_path: Any, capsys: Any) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing
    from tessera.cli import main

    src = "from tessera.conformance.kernels.flash_attention import flash_attention\n"
    (tmp_path / "fa.py").write_text(src)
    try:
        main(["ptx", f"{tmp_path / 'fa.py'}:flash_attention", "--target", "sm_90a",
              "--arg", "Q=2x256x64:bf16", "--arg", "K=2x256x64:bf16", "--arg",
              "V=2x256x64:bf16", "-o", str(tmp_path / "fa.ptx"), "--stats"])
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    err = capsys.readouterr().err
    assert re.search(r"flash_attention: K/V ring: [23] stages of \d+x64 bf16", err), err
    assert "0 bytes spill stores" in err


# ------------------------------------------------------------------------------ bits
@pytest.mark.parametrize(("seq", "d", "bm", "bn", "causal", "stages"), [
    (256, 64, 64, 64, True, 2), (256, 64, 64, 64, False, 3), (320, 128, 64, 64, True, 3),
    (192, 128, 64, 64, False, 2), (256, 64, 64, 128, True, 2), (256, 128, 128, 64, True, 2),
    (128, 64, 128, 128, True, 3), (64, 64, 64, 64, True, 2)])
def test_ring_gives_the_tile_interpreters_bits(seq: int, d: int, bm: int, bn: int,
                                               causal: bool, stages: int) -> None:
    q, k, v = qkv(2, seq, d)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=causal, backend="target",
                               target="sm_90a", config=config(bm, bn, stages))


@pytest.mark.parametrize(("d", "causal"), [(64, True), (128, False)])
def test_fast_mode_stays_within_its_bound(d: int, causal: bool) -> None:
    q, k, v = qkv(1, 256, d)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=causal, backend="target",
                               target="sm_90a", mode="fast", config=config(stages=3))


# ----------------------------------------------------------------- the causal loads
def count_loads(monkeypatch: Any, c: Any, arrays: list[np.ndarray]) -> list[int]:
    """Run ``c`` in the Target IR interpreter; the TMA boxes loaded from each tensor,
    fewest first."""
    from tessera.interp.target.memory import async_copy

    seen: Counter[int] = Counter()
    real = async_copy.tma_box

    def box(t: Any, buffer: Any, coords: np.ndarray) -> Any:
        seen[t.global_address] += len(coords)
        return real(t, buffer, coords)
    monkeypatch.setattr(async_copy, "tma_box", box)
    args, _ = target_arguments(c, arrays)
    # the interpreter alone: a GPU cross-check (make gpu-check) would run it twice more
    getattr(run_target, "__wrapped__", run_target)(c.kernel, args)
    return sorted(seen.values())


@pytest.mark.parametrize("stages", [2, 3])
def test_causal_programs_load_only_the_blocks_they_visit(monkeypatch: Any,
                                                         stages: int) -> None:
    """Query block i of a causal launch visits key blocks 0..i: the ring loads those
    and no block past the diagonal (the ring's phases would go out of step if the
    loads and the loops disagreed)."""
    q, k, v = qkv(2, 320, 64)
    c = ts.compile_kernel(flash_attention, q, k, v, is_causal=True, target="sm_90a",
                          config=config(stages=stages))
    seen = count_loads(monkeypatch, c, [q, k, v])
    blocks = 2 * sum(i + 1 for i in range(320 // 64))  # two batches
    assert seen == [2 * 320 // 64, blocks, blocks]  # Q; K and V


def test_a_ring_that_loads_past_the_diagonal_is_seen(monkeypatch: Any) -> None:
    """The check above fails for a ring that counts one block too many (a planted bug:
    the loads past the diagonal are never waited for, so nothing else reports them)."""
    from tessera.lower.sm90a.attention import ring as kvring

    real = kvring.KvRing.count
    monkeypatch.setattr(kvring.KvRing, "count",
                        lambda self, e: e.add(real(self, e), e.const(1, "u32"), "u32"))
    q, k, v = qkv(1, 256, 64)
    c = ts.compile_kernel(flash_attention, q, k, v, is_causal=True, target="sm_90a",
                          config=config())
    seen = count_loads(monkeypatch, c, [q, k, v])
    assert seen[-1] > sum(i + 1 for i in range(256 // 64))


# ----------------------------------------------------------------------------- ptxas
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize(("d", "causal", "mode"), [
    (64, False, "fast"), (64, True, "checked"), (128, True, "fast"), (128, False, "checked")])
def test_ptxas_no_spills_no_advisory(d: int, causal: bool, mode: str, stages: int) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing

    try:  # assemble raises on any ptxas advisory (a serialised wgmma, say)
        stats = compiled(d, causal, stages=stages, mode=mode).assemble().stats[
            "flash_attention"]
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0


# --------------------------------------------------------------------------- planted
def small() -> tuple[Any, list[np.ndarray]]:
    q, k, v = qkv(1, 256, 64)  # 4 key blocks: the two stages are refilled
    c = ts.compile_kernel(flash_attention, q, k, v, is_causal=False, target="sm_90a",
                          config=config())
    return c, [q, k, v]


def strip(block: Block, kind: type, keep: Any = lambda i: False) -> None:
    """Remove ``kind`` from ``block`` and the ``ptx.if`` regions in it that ``keep``
    does not protect (a planted bug)."""
    block.instrs[:] = [i for i in block.instrs if not isinstance(i.op, kind)]
    for i in block.instrs:
        if isinstance(i.op, If) and not keep(i):
            for r in i.regions:
                strip(r.block, kind, keep)


def loads(instr: Instr) -> bool:
    return any(isinstance(j.op, TmaLoad) for r in instr.regions for j in walk(r.block))


def test_planted_missing_release_is_reported() -> None:
    """Consumers that never arrive on the empty barriers: thread 0 waits forever to
    refill the first stage (at the product that releases K)."""
    c, arrays = small()
    (loop,) = key_loops(c.kernel)
    body = loop.regions[0].block
    body.instrs[:] = [i for i in body.instrs if not isinstance(i.op, MbarrierArrive)]
    args, _ = target_arguments(c, arrays)
    with pytest.raises(TargetFault, match="never completes") as err:
        run_target(c.kernel, args)
    assert err.value.loc.file.endswith("flash_attention.py")


def test_planted_read_before_full_is_reported() -> None:
    """Consumers that read a stage without waiting for its full barrier: the wgmma
    reading K is reported at the kernel's S = Q Kᵀ line."""
    c, arrays = small()
    (loop,) = key_loops(c.kernel)
    strip(loop.regions[0].block, MbarrierWait, keep=loads)  # thread 0's refills keep theirs
    args, _ = target_arguments(c, arrays)
    with pytest.raises(TargetFault, match="async copy read before its wait") as err:
        run_target(c.kernel, args)
    source = (err.value.loc.file, err.value.loc.line)
    assert source[0].endswith("flash_attention.py")
    text = open(source[0]).read().splitlines()[source[1] - 1]
    assert "ts.tile.mma(smem_q, smem_k.T)" in text
