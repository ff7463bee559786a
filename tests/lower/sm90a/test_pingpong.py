"""The ping-pong schedule of the warp-specialised sm_90a GEMM (``schedule="pingpong"``,
tessera.lower.sm90a.pipeline): its barriers on Target IR and PTX, the order it gives
the two consumer warpgroups' wgmma groups in the Target IR interpreter, its bits
against the tile interpreter, ptxas, and planted bugs."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera.errors import ArgumentError, UnsupportedError
from tessera.frontend.kernel.backends.compile import target_arguments
from tessera.interp.target.barriers import BarrierDeadlock
from tessera.interp.target.memory.async_order import WgmmaGroups
from tessera.ir.core import walk
from tessera.ir.dialects.target import If
from tessera.ir.dialects.target.ops import Bar, BarArrive
from tests.lower.sm90a.test_pipeline import (
    GEMM,
    MMA_LINE,
    compile_gemm,
    loops,
    operands,
    run,
    split,
)

PINGPONG = {"schedule": "pingpong"}


def test_the_consumer_loop_takes_turns_on_two_named_barriers() -> None:
    """Warpgroup 0 waits at barrier 3 and hands over on 4, warpgroup 1 the other way
    round; warpgroup 1 arrives once before the loop; two consumers by default."""
    fn = compile_gemm(256, 256, 512, (128, 128, 64), PINGPONG).kernel
    assert fn.attrs["block"] == [384]
    consumer = split(fn).regions[1].block
    (main,) = loops(consumer)
    body = list(walk(main.regions[0].block))
    syncs = [(i.op.id, i.op.count) for i in body if isinstance(i.op, Bar)]
    arrives = [(i.op.id, i.op.count) for i in body if isinstance(i.op, BarArrive)]
    assert syncs == [(3, 256), (4, 256)] and sorted(arrives) == [(3, 256), (4, 256)]
    before = [i for i in walk(consumer) if isinstance(i.op, BarArrive)
              and i not in body]
    assert [(i.op.id, i.op.count) for i in before] == [(3, 256)]
    cooperative = compile_gemm(256, 256, 512, (128, 128, 64), {"num_warps": 12})
    assert "bar.arrive" not in cooperative.ptx


def test_ptx_order_of_a_consumer_step() -> None:
    """In the consumer's K loop: the mbarrier wait, the turn's bar.sync, the wgmma
    group and its commit, the hand-over bar.arrive, then wgmma.wait_group 1."""
    ptx = compile_gemm(256, 256, 512, (128, 128, 64), PINGPONG).ptx
    consumer = ptx[ptx.index("setmaxnreg.inc"):]
    loop = consumer[:re.search(r"\n\$L__endfor_\d+:", consumer).start()]
    marks = ["mbarrier.try_wait", "bar.sync 3, 256;", "bar.sync 4, 256;",
             "wgmma.mma_async", "wgmma.commit_group", "bar.arrive 4, 256;",
             "bar.arrive 3, 256;", "wgmma.wait_group.sync.aligned 1;"]
    where = [loop.rindex(m) for m in marks]
    assert where == sorted(where)
    assert consumer[:consumer.index(marks[0])].count("bar.arrive 3, 256;") == 1


def test_knob_errors() -> None:
    with pytest.raises(UnsupportedError, match="num_warps=8 has one"):
        compile_gemm(256, 256, 256, (128, 128, 64), {**PINGPONG, "num_warps": 8})
    with pytest.raises(ArgumentError, match="schedule='round-robin' should be 'cooperative' or"):
        compile_gemm(256, 256, 256, (128, 128, 64), {"schedule": "round-robin"})
    with pytest.raises(UnsupportedError, match="BM=64 is not 2 consumer"):
        compile_gemm(128, 128, 128, (64, 64, 64), PINGPONG)


def test_the_interpreter_issues_the_groups_in_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """In every CTA each commit of a wgmma group is one warpgroup's, warpgroup 0 first,
    then alternating every K step, where the cooperative schedule commits both
    warpgroups' groups together."""
    def order(config: dict[str, Any]) -> list[list[tuple[int, ...]]]:
        seen: dict[int, list[tuple[int, ...]]] = {}
        commit = WgmmaGroups.commit

        def spy(self: WgmmaGroups, warpgroups: np.ndarray) -> None:
            by_cta: dict[int, set[int]] = {}
            for g in warpgroups.tolist():  # 3 warpgroups a CTA: 2 consumers, 1 producer
                by_cta.setdefault(g // 3, set()).add(g % 3)
            for cta, mine in by_cta.items():
                seen.setdefault(cta, []).append(tuple(sorted(mine)))
            commit(self, warpgroups)
        monkeypatch.setattr(WgmmaGroups, "commit", spy)
        a, b, c = operands(256, 256, 512)
        run(compile_gemm(256, 256, 512, (128, 128, 64), config), a, b, c)
        monkeypatch.setattr(WgmmaGroups, "commit", commit)
        np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32),
                                   rtol=1e-4, atol=1e-3)
        return [seen[k] for k in sorted(seen)]
    steps = 512 // 64
    assert order(PINGPONG) == [[(0,), (1,)] * steps] * 4  # 2 x 2 CTAs
    assert order({"num_warps": 12}) == [[(0, 1)] * steps] * 4


@pytest.mark.parametrize("shape, tile, config", [
    ((256, 256, 512), (128, 128, 64), PINGPONG),
    ((256, 256, 320), (256, 128, 64), {**PINGPONG, "num_warps": 12, "num_stages": 3}),
])
def test_pingpong_gemm_has_the_tile_interpreters_bits(
        shape: tuple[int, int, int], tile: tuple[int, int, int], config: dict[str, Any]) -> None:
    ts.check_against_reference(GEMM, *operands(*shape), backend="target", target="sm_90a",
                               tile_shape=tile, config=config)


@pytest.mark.parametrize("tile", [(128, 128, 64), (128, 256, 64), (256, 128, 64)])
def test_ptxas_assembles_without_spills_or_advisories(tile: tuple[int, int, int]) -> None:
    pathfinder = pytest.importorskip("cuda.pathfinder")
    if not pathfinder.find_nvidia_binary_utility("ptxas"):
        pytest.skip("ptxas is not installed")
    compiled = compile_gemm(512, 512, 512, tile, PINGPONG)
    stats = compiled.assemble().stats["gemm"]
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0
    assert stats.registers == compiled.kernel.attrs["maxnreg"]


def test_planted_missing_first_turn_is_a_deadlock() -> None:
    """Without warpgroup 1's arrival before the loop each consumer warpgroup waits for
    the other's: reported at the kernel's mma line, naming the barrier."""
    ops = operands(256, 128, 256)
    compiled = compile_gemm(256, 128, 256, (128, 128, 64), PINGPONG)
    consumer = split(compiled.kernel).regions[1].block
    first = next(i for i in consumer.instrs if isinstance(i.op, If)
                 and any(isinstance(j.op, BarArrive) for j in walk(i.regions[1].block)))
    consumer.instrs.remove(first)
    with pytest.raises(BarrierDeadlock, match=r"bar\.sync 3, 256 never completes: 128 of "
                                              r"256 threads arrived") as err:
        run(compiled, *ops)
    assert err.value.loc.file.endswith("gemm.py") and err.value.loc.line == MMA_LINE


def test_its_ptx_read_back_runs_with_the_cooperative_bits() -> None:
    """The PTX text, read back and run as a control-flow graph (a bar.sync waits
    where it is until the other warpgroup's bar.arrive), gives the bits of the
    cooperative schedule's PTX run the same way (PTX registers round each wgmma's
    accumulators to f32, which the structured run keeps exact)."""
    a, b, _ = operands(256, 256, 256)
    outs = []
    for config in (PINGPONG, {"num_warps": 12}):
        compiled = compile_gemm(256, 256, 256, (128, 128, 64), config)
        c = np.zeros((256, 256), np.float32)
        args, _ = target_arguments(compiled, [a, b, c])
        values = [ts.ptx.tensor_map(x.array, x.box, x.swizzle, elem=x.elem)
                  if hasattr(x, "tensor_map") else x for x in args]
        ts.ptx.load(compiled.ptx).kernel(compiled.name).run(
            grid=compiled.grid, block=compiled.block, args=values,
            shared_bytes=compiled.shared_bytes)
        outs.append(c)
    assert np.array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], a.astype(np.float32) @ b.astype(np.float32),
                               rtol=1e-4, atol=1e-3)
