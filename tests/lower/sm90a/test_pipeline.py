"""The warp-specialised sm_90a GEMM pipeline (tessera.lower.sm90a.pipeline): its
structure on Target IR and PTX, the configuration knobs, its bits in the Target IR
interpreter against the tile interpreter, ptxas's statistics, and planted bugs."""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.estimate.trips import constant
from tessera.errors import UnsupportedError
from tessera.frontend.kernel.backends.compile import target_arguments
from tessera.interp.target import TargetFault, run_target
from tessera.ir.core import Block, Function, Instr, walk
from tessera.ir.dialects.target import For, If
from tessera.ir.dialects.target.async_ops import MbarrierInit, MbarrierWait, WgmmaWait
from tessera.ir.dialects.target.check import check_kernel
from tessera.ir.dialects.target.ops import Bar, Binary, SharedAlloc, Shfl, Special
from tessera.ir.dialects.target.ptx_ops import Elect
from tessera.ir.dialects.target.warp_ops import SetMaxNReg

#: the corrected seed kernels (examples/kernels/ runs them from here)
KERNELS = Path(__file__).resolve().parents[3] / "tessera" / "conformance" / "kernels"
GEMM = runpy.run_path(str(KERNELS / "gemm.py"))["gemm"]
DOUBLE = runpy.run_path(str(KERNELS / "double_buffered_gemm.py"))["double_buffered_gemm"]


def operands(m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    return a, b, np.zeros((m, n), np.float32)


def compile_gemm(m: int, n: int, k: int, tile: tuple[int, int, int],
                 config: dict[str, Any] | None = None, kernel: Any = GEMM) -> Any:
    kw = {"config": config} if config else {}
    return ts.compile_kernel(kernel, *operands(m, n, k), target="sm_90a", tile_shape=tile,
                             **kw)


def split(fn: Function) -> Instr:
    """The ``ptx.if`` that splits the CTA into the producer and the consumers."""
    for instr in fn.body.instrs:
        if isinstance(instr.op, If) and any(isinstance(i.op, SetMaxNReg)
                                            for i in instr.regions[0].block.instrs):
            return instr
    raise AssertionError("no producer/consumer split")


def loops(block: Block) -> list[Instr]:
    return [i for i in walk(block) if isinstance(i.op, For)]


# ------------------------------------------------------------------------- structure
def test_structure_of_the_default_128x128x64_gemm() -> None:
    """One consumer warpgroup and the producer warpgroup (256 threads); the producer
    gives registers back, one elected thread fills >= 3 stages; the consumer's K loop
    keeps one wgmma group in flight (wait_group 1) and has no bar.sync."""
    fn = compile_gemm(256, 256, 512, (128, 128, 64)).kernel
    assert fn.attrs["block"] == [256] and fn.attrs["maxnreg"] == 136
    sp = split(fn)
    producer, consumer = (r.block for r in sp.regions)
    regs = [i.op for i in walk(fn.body) if isinstance(i.op, SetMaxNReg)]
    assert [(r.count, r.inc) for r in regs] == [(40, False), (232, True)]
    assert any(isinstance(i.op, Elect) for i in walk(producer))
    inits = [i for i in walk(fn.body) if isinstance(i.op, MbarrierInit)]
    stages = len(inits) // 2
    assert stages >= 3 and sorted({i.op.count for i in inits}) == [1, 128]
    ring = {i.op.sym: i.op.size for i in walk(fn.body) if isinstance(i.op, SharedAlloc)}
    assert ring["pipe_ring0"] == stages * (128 + 128) * 64 * 2  # A then B stages
    (main,) = loops(consumer)
    body = list(walk(main.regions[0].block))
    assert [i.op.n for i in body if isinstance(i.op, WgmmaWait)] == [1]
    assert sum(isinstance(i.op, MbarrierWait) for i in body) == 1
    for loop in loops(fn.body):
        assert not any(isinstance(i.op, Bar) for i in walk(loop.regions[0].block))


def test_ptx_text_of_the_pipeline() -> None:
    ptx = compile_gemm(256, 256, 512, (128, 128, 64)).ptx
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in ptx
    assert re.search(r"elect\.sync %r\d+\|%p\d+, 0xFFFFFFFF;", ptx)
    assert ".maxntid 256, 1, 1" in ptx and ".maxnreg 136" in ptx
    # every K loop of the kernel (producer and consumer) runs without bar.sync
    for body in re.findall(r"(\$L__for_\d+):(.*?)\$L__endfor", ptx, re.S):
        assert "bar.sync" not in body[1]
    consumer = ptx[ptx.index("setmaxnreg.inc"):]
    loop = consumer[:re.search(r"\n\$L__endfor_\d+:", consumer).start()]
    assert "wgmma.wait_group.sync.aligned 1;" in loop and "mbarrier.try_wait" in loop
    assert "wgmma.wait_group.sync.aligned 0;" in consumer[len(loop):]


def test_knobs_drive_the_ptx() -> None:
    """num_stages sizes the ring, num_warps picks one or two consumer warpgroups, and
    warp_specialize=False (or num_warps=4) keeps the one-warpgroup lowering."""
    sizes = {}
    for stages in (2, 3, 4):
        fn = compile_gemm(256, 256, 512, (128, 128, 64), {"num_stages": stages}).kernel
        sizes[stages] = sum(1 for i in walk(fn.body) if isinstance(i.op, MbarrierInit))
    assert sizes == {2: 4, 3: 6, 4: 8}
    two = compile_gemm(256, 256, 256, (128, 128, 64), {"num_warps": 12}).kernel
    assert two.attrs["block"] == [384] and two.attrs["maxnreg"] == 168
    plain = compile_gemm(256, 256, 256, (128, 128, 64), {"warp_specialize": False})
    four = compile_gemm(256, 256, 256, (128, 128, 64), {"num_warps": 4})
    assert plain.kernel.attrs["block"] == [128] and "setmaxnreg" not in plain.ptx
    assert four.ptx == plain.ptx
    assert "wgmma.wait_group.sync.aligned 1;" not in plain.ptx


@pytest.mark.parametrize("config", [{"num_warps": 12}, {"schedule": "pingpong"}])
def test_consumers_read_their_warpgroup_from_lane_0(config: dict[str, Any]) -> None:
    """Two consumer warpgroups: each reads its index ``%tid.x >> 7`` through a
    broadcast from lane 0 (``shfl.sync.idx``), so that ptxas knows it is warp-uniform
    and keeps the descriptors' offsets and the turns that follow from it in uniform
    registers (the epilogue's per-thread addresses may still shift ``%tid.x``)."""
    fn = compile_gemm(256, 256, 256, (128, 128, 64), config).kernel
    consumer = split(fn).regions[1].block
    instrs = list(walk(consumer))
    shifts = [i for i in instrs if isinstance(i.op, Binary) and i.op.op == "shr"
              and isinstance(i.operands[0].owner, Instr)
              and isinstance(i.operands[0].owner.op, Special)
              and i.operands[0].owner.op.reg == "tid.x"
              and constant(i.operands[1]) == 7]
    broadcasts = [i for i in instrs if isinstance(i.op, Shfl) and i.op.mode == "idx"
                  and constant(i.operands[1]) == 0
                  and any(i.operands[0] is s.results[0] for s in shifts)]
    assert len(broadcasts) == 1  # the turns of ping-pong read the same one


def test_double_buffered_gemm_keeps_its_own_pipeline() -> None:
    """Its ring is written in the tile program (copies before the loop, the last mma
    after it): it is not GEMM-shaped and keeps the one-warpgroup lowering."""
    fn = compile_gemm(256, 256, 256, (128, 128, 64), kernel=DOUBLE).kernel
    assert fn.attrs["block"] == [128]
    assert not any(isinstance(i.op, SetMaxNReg) for i in walk(fn.body))


@pytest.mark.parametrize("config, why", [
    ({"num_warps": 16}, "num_warps=16"),
    ({"num_stages": 8}, "shared memory"),
    ({"num_stages": 1}, "at least two stages"),
    ({"num_warps": 8, "num_stages": 2}, "accumulators"),
])
def test_configurations_that_cannot_be_pipelined(config: dict[str, Any], why: str) -> None:
    tile = (128, 256, 64)
    with pytest.raises(UnsupportedError, match=why) as err:
        compile_gemm(256, 256, 256, tile, config)
    assert err.value.loc is not None and err.value.loc.file.endswith("gemm.py")


def test_default_falls_back_for_tiles_the_pipeline_cannot_hold() -> None:
    fn = compile_gemm(128, 128, 64, (64, 32, 32)).kernel
    assert fn.attrs["block"] == [128]


# ------------------------------------------------------------------------------ bits
@pytest.mark.parametrize("shape, tile, config", [
    ((256, 256, 256), (128, 128, 64), None),
    ((256, 128, 640), (128, 128, 64), {"num_stages": 3}),
    ((128, 256, 448), (64, 128, 64), {"num_stages": 2, "num_warps": 8}),
    ((128, 128, 192), (64, 64, 64), {"num_stages": 2}),
    ((256, 512, 384), (128, 256, 64), None),
    ((512, 256, 320), (256, 128, 64), {"num_stages": 3}),
    ((256, 256, 512), (128, 128, 64), {"num_warps": 12, "num_stages": 4}),
])
def test_pipelined_gemm_has_the_tile_interpreters_bits(
        shape: tuple[int, int, int], tile: tuple[int, int, int],
        config: dict[str, Any] | None) -> None:
    kw = {"config": config} if config else {}
    ts.check_against_reference(GEMM, *operands(*shape), backend="target", target="sm_90a",
                               tile_shape=tile, **kw)


@pytest.mark.parametrize("config", [None, {"num_warps": 12}])
def test_independent_ctas_give_the_lockstep_bits(config: dict[str, Any] | None) -> None:
    """Each warpgroup of each CTA as a task of its own (``ctas="independent"``, as a GPU
    runs them) gives the bits of every CTA's producer, and consumers, in lockstep,
    with every check on (races, mbarrier phases, wgmma operands in flight)."""
    compiled = compile_gemm(256, 256, 256, (128, 128, 64), config)
    outs = []
    for ctas in ("lockstep", "independent"):
        a, b, c = operands(256, 256, 256)
        args, _ = target_arguments(compiled, [a, b, c])
        run_target(compiled.kernel, args, ctas=ctas)
        outs.append(c)
    assert outs[0].any() and np.array_equal(outs[0], outs[1])


# ----------------------------------------------------------------------------- ptxas
@pytest.mark.parametrize("tile", [(128, 128, 64), (128, 256, 64), (256, 128, 64)])
def test_ptxas_assembles_without_spills_or_advisories(tile: tuple[int, int, int]) -> None:
    """``assemble`` fails on any (C75xx) advisory, e.g. a setmaxnreg ptxas ignores."""
    pathfinder = pytest.importorskip("cuda.pathfinder")
    if not pathfinder.find_nvidia_binary_utility("ptxas"):
        pytest.skip("ptxas is not installed")
    compiled = compile_gemm(512, 512, 512, tile)
    stats = compiled.assemble().stats["gemm"]
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0
    assert stats.registers == compiled.kernel.attrs["maxnreg"]


# --------------------------------------------------------------------------- planted
def run(compiled: Any, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    args, _ = target_arguments(compiled, [a, b, c])
    run_target(compiled.kernel, args)


_SOURCE = (KERNELS / "gemm.py").read_text().splitlines()
MMA_LINE = 1 + next(k for k, t in enumerate(_SOURCE) if "ts.tile.mma(" in t)
A_COPY_LINE = 1 + next(k for k, t in enumerate(_SOURCE) if "cp_async(smem_a" in t)


def drop_wait(fn: Function, region: int) -> None:
    """Remove the mbarrier waits of the producer (0) or consumer (1) branch."""
    for instr in walk(split(fn).regions[region].block):
        for r in instr.regions:
            r.block.instrs[:] = [i for i in r.block.instrs if not isinstance(i.op, MbarrierWait)]


def test_planted_consumer_reads_a_stage_before_it_is_full() -> None:
    ops = operands(256, 128, 512)
    compiled = compile_gemm(256, 128, 512, (128, 128, 64), {"num_stages": 2})
    drop_wait(compiled.kernel, 1)
    with pytest.raises(TargetFault, match="async copy read before its wait") as err:
        run(compiled, *ops)
    assert err.value.loc.file.endswith("gemm.py") and err.value.loc.line == MMA_LINE


def test_planted_producer_overwrites_a_stage_before_it_is_empty() -> None:
    ops = operands(256, 128, 512)
    compiled = compile_gemm(256, 128, 512, (128, 128, 64), {"num_stages": 2})
    drop_wait(compiled.kernel, 0)
    with pytest.raises(TargetFault, match="async copy overwritten before its wait") as err:
        run(compiled, *ops)
    assert err.value.loc.file.endswith("gemm.py") and err.value.loc.line == A_COPY_LINE


def test_planted_hang_is_reported() -> None:
    """A consumer that never releases its stages: the producer waits forever for the
    third fill of a two-stage ring, and the consumer for that fill."""
    ops = operands(128, 128, 512)
    compiled = compile_gemm(128, 128, 512, (128, 128, 64), {"num_stages": 2})
    block = split(compiled.kernel).regions[1].block
    (main,) = loops(block)
    body = main.regions[0].block
    body.instrs[:] = [i for i in body.instrs if not isinstance(i.op, If)]
    with pytest.raises(TargetFault, match="never completes"):
        run(compiled, *ops)


def test_planted_stage_released_before_its_wgmma_retires() -> None:
    """Without wgmma.wait_group 1 the consumer releases the previous stage while the
    wgmma group reading it may still run (PTX ISA sec. 9.7.15.6): the producer's refill
    of that stage is reported at its cp_async line. ptxas and the ordering check both
    accept this kernel (the groups retire at the wait_group 0 after the loop)."""
    ops = operands(128, 128, 512)
    compiled = compile_gemm(128, 128, 512, (128, 128, 64), {"num_stages": 2})
    (main,) = loops(split(compiled.kernel).regions[1].block)
    body = main.regions[0].block
    body.instrs[:] = [i for i in body.instrs if not isinstance(i.op, WgmmaWait)]
    check_kernel(compiled.kernel)
    with pytest.raises(TargetFault, match="overwritten while a wgmma reads it") as err:
        run(compiled, *ops)
    assert err.value.loc.line == A_COPY_LINE
