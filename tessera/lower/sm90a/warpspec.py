"""Which sm_90a kernels lower to the warp-specialised GEMM pipeline, and how.

A *GEMM-shaped* kernel (``examples/kernels/gemm.py``) has one top-level K loop whose
body copies an ``(BM, BK)`` tile of A and a ``(BK, BN)`` tile of B into two shared
buffers with ``tile.cp_async``, synchronises, and accumulates ``tile.mma`` of the two
buffers into the loop's one carried value; the buffers, copies and ``mma`` appear
nowhere else. Such a loop only needs its tiles to *arrive* before each ``mma``, so it
is lowered as a producer/consumer pipeline (:mod:`tessera.lower.sm90a.pipeline`)
instead of the copy-wait-multiply sequence of the tile program: the products are the
same ``wgmma`` sequence over the same K order, only the data arrives earlier.

The kernel's configuration (``config=`` at launch, or the autotuner's choice) drives
it:

* ``warp_specialize`` (default True): False keeps the one-warpgroup lowering. By
  default a tile the pipeline cannot hold (see :func:`fit_problem`) keeps it too; when
  the configuration asks for the pipeline (``warp_specialize``, ``num_warps`` 8/12 or
  ``num_stages``) that is an ``UnsupportedError`` instead;
* ``num_warps``: 8 is one consumer warpgroup plus the producer warpgroup, 12 two
  consumer warpgroups (each holds half of the accumulator's 64-row blocks); 4 keeps
  the one-warpgroup lowering. Default: two consumers when one would hold more than
  128 accumulator registers per thread (``BM * BN > 128 * 128``);
* ``num_stages``: shared-memory stages of the ring (default: as many as fit in
  :data:`SHARED_BUDGET`, at most 4, at least 2);
* ``schedule``: ``"cooperative"`` (default) lets two consumer warpgroups issue their
  ``wgmma`` groups as they come; ``"pingpong"`` orders them with two named barriers
  so that warpgroup 0's group of K step ``k`` is issued before warpgroup 1's, and
  that one before warpgroup 0's of step ``k + 1`` (the inter-warpgroup schedule of
  FlashAttention-3, Shah et al. 2024, sec. 3.1, and CUTLASS's ping-pong kernels): one
  warpgroup's tensor-core work overlaps the other's waits and address arithmetic.
  It needs two consumers (``num_warps`` 12, the default for it);
* ``persistent``: one CTA an SM walks several output tiles
  (:mod:`tessera.lower.sm90a.persistent`);
* ``tma_store``: the epilogue (:mod:`tessera.lower.sm90a.epilogue`) stores the tile
  through shared memory with TMA where it can (default), ``st.global`` with False;
  True makes a tile it cannot store that way an ``UnsupportedError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tessera.errors import UnsupportedError
from tessera.ir.core import Function, Instr, Value, walk
from tessera.ir.dialects.tile import Constant, MemRefType
from tessera.ir.dialects.tile import For as TileFor
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.lower.values import ptx_elem

#: shared memory a pipelined CTA may use for its stages (227 KiB on sm_90, less the
#: mbarriers and a margin for the kernel's other buffers)
SHARED_BUDGET = 227 * 1024 - 1024
#: registers per thread after ``setmaxnreg``: the producer warpgroup gives registers
#: back, the consumers take them (CUTLASS's 40/232 split of sm_90 warp-specialised
#: kernels; 2 * 232 + 40 registers of 128 threads fit the 64K register file)
PRODUCER_REGS = 40
CONSUMER_REGS = 232
#: the largest number of f32 accumulators a consumer thread holds (the rest of its
#: registers hold addresses, descriptors and the epilogue's values)
MAX_ACC_REGS = 128
MAX_STAGES = 4

_SYNC_OPS = (tile_memory.CpAsync, tile_memory.CpCommitGroup, tile_memory.CpWaitGroup,
             tile_memory.Barrier, tile_memory.AllocShared, tile_compute.Mma)


@dataclass(frozen=True)
class GemmLoop:
    """The matched K loop: its instructions and tile sizes."""

    loop: Instr
    a_alloc: Instr
    b_alloc: Instr
    a_copy: Instr
    b_copy: Instr
    mma: Instr
    bm: int
    bn: int
    bk: int
    elem: str
    lo: int
    hi: int
    step: int

    @property
    def k_tiles(self) -> int:
        """Trips of the K loop."""
        return max(0, -(-(self.hi - self.lo) // self.step))

    @property
    def stage_bytes(self) -> int:
        """Shared bytes of one stage: an A tile and a B tile."""
        return (self.bm + self.bn) * self.bk * elem_bytes_of(self.elem)


def elem_bytes_of(elem: str) -> int:
    """Bytes of a 16- or 8-bit PTX operand element."""
    return 1 if elem in ("e4m3", "e5m2") else 2


@dataclass(frozen=True)
class PipelinePlan:
    """How a matched loop is pipelined. With two consumer warpgroups each holds half of
    the accumulator, so ``store`` is the kernel's store of the loop's result into global
    memory, which the pipeline writes itself."""

    gemm: GemmLoop
    stages: int
    consumers: int  # consumer warpgroups (1 or 2)
    store: Instr | None = None
    #: the kernel's final store of the tile, which the TMA-store epilogue writes
    #: (:mod:`tessera.lower.sm90a.epilogue`)
    epilogue: Instr | None = None
    #: the consumers take turns issuing their wgmma groups (``schedule="pingpong"``)
    pingpong: bool = False
    #: each CTA walks several output tiles (:mod:`tessera.lower.sm90a.persistent`)
    persistent: bool = False

    @property
    def threads(self) -> int:
        """Threads of the CTA: the consumer warpgroups, then the producer warpgroup."""
        return 128 * (self.consumers + 1)

    @property
    def entry_regs(self) -> int:
        """Registers per thread at launch (``.maxnreg``): ``setmaxnreg`` needs the entry
        count, and the producer's release must cover the consumers' growth,
        ``consumers * (CONSUMER - entry) <= entry - PRODUCER``."""
        need = (self.consumers * CONSUMER_REGS + PRODUCER_REGS) / (self.consumers + 1)
        return -(-int(need) // 8) * 8

    @property
    def shared_bytes(self) -> int:
        """Shared bytes of the ring (stages and their full/empty mbarriers)."""
        return self.stages * self.gemm.stage_bytes + 16 * self.stages


def _const(v: Value) -> int | None:
    owner = v.owner
    if isinstance(owner, Instr) and isinstance(owner.op, Constant):
        return int(owner.op.value)
    return None


def _source(v: Value, loads: dict[Value, Instr]) -> Instr | None:
    """The ``alloc_shared`` a value loaded for ``mma`` reads, if it is a plain load."""
    owner = v.owner
    if isinstance(owner, Instr) and isinstance(owner.op, tile_memory.Load):
        return loads.get(owner.operands[0])
    return None


def index_op(instr: Instr) -> bool:
    """Scalar arithmetic and views: what the producer recomputes for its copies."""
    if isinstance(instr.op, tile_memory.View):
        return True
    if instr.regions or isinstance(instr.op, (*_SYNC_OPS, tile_memory.Load,
                                              tile_memory.Store)):
        return False
    return all(isinstance(r.type, TensorType) and r.type.rank == 0 for r in instr.results)


def match_gemm_loop(fn: Function) -> GemmLoop | None:
    """The kernel's GEMM-shaped K loop (see the module doc), or None."""
    allocs = {i.results[0]: i for i in fn.body.instrs
              if isinstance(i.op, tile_memory.AllocShared)}
    loops = [i for i in fn.body.instrs if isinstance(i.op, TileFor)]
    for loop in loops:
        found = _match(loop, allocs)
        if found is None:
            continue
        mine = {id(i) for i in (found.a_alloc, found.b_alloc, found.a_copy, found.b_copy,
                                found.mma)}
        body = loop.regions[0].block
        stray = [i for i in walk(fn.body) if isinstance(i.op, _SYNC_OPS) and id(i) not in mine
                 and not (isinstance(i.op, tile_memory.Barrier) and i in body.instrs)]
        return None if stray else found
    return None


def _match(loop: Instr, allocs: dict[Value, Instr]) -> GemmLoop | None:
    body = loop.regions[0].block
    bounds = [_const(v) for v in loop.operands[:3]]
    if len(loop.operands) != 4 or len(body.args) != 2 or None in bounds:
        return None
    copies, mmas = [], []
    for instr in body.instrs:
        op = instr.op
        if op.terminator or isinstance(op, (tile_memory.Barrier, tile_memory.Load)):
            continue
        if isinstance(op, tile_memory.CpAsync):
            copies.append(instr)
        elif isinstance(op, tile_compute.Mma):
            mmas.append(instr)
        elif not index_op(instr):
            return None
    if len(copies) != 2 or len(mmas) != 1:
        return None
    mma = mmas[0]
    term = body.terminator
    if (term is None or list(term.operands) != [mma.results[0]] or len(mma.operands) != 3
            or mma.operands[2] is not body.args[1]):
        return None
    a_alloc, b_alloc = (_source(v, allocs) for v in mma.operands[:2])
    if a_alloc is None or b_alloc is None or a_alloc is b_alloc:
        return None
    by_dst = {c.operands[0]: c for c in copies}
    a_copy, b_copy = by_dst.get(a_alloc.results[0]), by_dst.get(b_alloc.results[0])
    if a_copy is None or b_copy is None:
        return None
    for copy in (a_copy, b_copy):
        src = copy.operands[1].owner
        if not (isinstance(src, Instr) and isinstance(src.op, tile_memory.View)
                and isinstance(src.operands[0].type, MemRefType)
                and not isinstance(src.operands[0].owner, Instr)):  # a kernel parameter
            return None
    (bm, bk), (bk2, bn) = a_alloc.op.shape, b_alloc.op.shape
    elem = ptx_elem(a_alloc.op.element)
    if bk != bk2 or ptx_elem(b_alloc.op.element) != elem or elem not in ("bf16", "f16"):
        return None
    lo, hi, step = bounds
    assert lo is not None and hi is not None and step is not None
    return GemmLoop(loop, a_alloc, b_alloc, a_copy, b_copy, mma, bm, bn, bk, elem, lo, hi,
                    step)


def config_of(fn: Function) -> dict[str, Any]:
    """The kernel's configuration (launch ``config=`` or the autotuner's choice)."""
    return dict(fn.attrs.get("config", ()))


def plan_pipeline(fn: Function) -> PipelinePlan | None:
    """The pipeline of ``fn`` for sm_90a, or None for the one-warpgroup lowering.
    A configuration that asks for a pipeline the kernel cannot have is an
    ``UnsupportedError`` at the kernel's line."""
    config = config_of(fn)
    if not config.get("warp_specialize", True):
        return None
    gemm = match_gemm_loop(fn)
    warps = config.get("num_warps")
    if gemm is None or warps == 4:
        return None
    acc_regs = gemm.bm * gemm.bn // 128
    pingpong = schedule_of(fn)
    if pingpong and warps == 8:
        raise UnsupportedError("schedule='pingpong' alternates two consumer warpgroups; "
                               "num_warps=8 has one", hint="use num_warps=12",
                               loc=fn.loc)
    if warps is None:
        consumers = 2 if pingpong or acc_regs > MAX_ACC_REGS else 1
    elif warps in (8, 12):
        consumers = warps // 4 - 1
    else:
        raise UnsupportedError(f"num_warps={warps} has no warp-specialised GEMM lowering",
                               hint="use 8 (one consumer warpgroup), 12 (two) or 4 (no "
                                    "warp specialisation)", loc=fn.loc)
    why = fit_problem(gemm, consumers, config.get("num_stages"))
    asked = ("warp_specialize" in config or warps is not None or "num_stages" in config
             or pingpong)
    if why and not asked:  # the default: tiles the pipeline cannot hold keep one warpgroup
        return None
    if why:
        raise UnsupportedError(f"the warp-specialised GEMM of a {gemm.bm}x{gemm.bn}x{gemm.bk} "
                               f"tile: {why}", loc=fn.loc,
                               hint="change the tile shape, num_warps or num_stages, or set "
                                    "warp_specialize=False")
    store = None
    if consumers > 1:
        store = split_store(fn, gemm)
        if store is None:
            why = ("two consumer warpgroups need the zero-initialised accumulator stored "
                   "straight into an f32, bf16 or f16 global view after the loop")
            if not asked:
                return None
            raise UnsupportedError(why, loc=fn.loc, hint="use num_warps=8")
    stages = config.get("num_stages") or default_stages(gemm)
    epilogue = store if store is not None else epilogue_store(fn, gemm)
    if epilogue is None and config.get("tma_store"):
        raise UnsupportedError("tma_store=True: the kernel does not end by storing the "
                               f"{gemm.bm}x{gemm.bn} tile into a view of a parameter",
                               loc=fn.loc, hint="store the tile last, or drop tma_store")
    plan = PipelinePlan(gemm, int(stages), consumers, store, epilogue, pingpong)
    if config.get("persistent"):
        from tessera.lower.sm90a.persistent import persist

        plan = persist(fn, plan, config.get("num_stages"), config.get("tma_store"))
    return plan


#: the values of the ``schedule`` knob
SCHEDULES = ("cooperative", "pingpong")


def schedule_of(fn: Function) -> bool:
    """Whether the kernel's configuration asks for the ping-pong schedule."""
    schedule = config_of(fn).get("schedule", "cooperative")
    if schedule not in SCHEDULES:
        raise UnsupportedError(f"schedule={schedule!r} is not a warp-specialised schedule",
                               hint=f"use one of {SCHEDULES}", loc=fn.loc)
    return schedule == "pingpong"


def epilogue_store(fn: Function, gemm: GemmLoop) -> Instr | None:
    """The ``tile.store`` of a ``(BM, BN)`` tile into a view of a kernel parameter that
    the kernel ends with (only index arithmetic follows): the store the TMA-store
    epilogue may write; whether the tile allows it is decided when it is lowered."""
    after = fn.body.instrs[fn.body.instrs.index(gemm.loop) + 1:]
    stores = [i for i in after if isinstance(i.op, tile_memory.Store)]
    if not stores or any(not (i.op.terminator or index_op(i))
                         for i in after[after.index(stores[-1]) + 1:]):
        return None
    store = stores[-1]
    view, vt = store.operands[0].owner, store.operands[1].type
    if not (isinstance(view, Instr) and isinstance(view.op, tile_memory.View)
            and not isinstance(view.operands[0].owner, Instr)
            and isinstance(vt, TensorType) and tuple(vt.shape) == (gemm.bm, gemm.bn)):
        return None
    return store


def split_store(fn: Function, gemm: GemmLoop) -> Instr | None:
    """The ``tile.store`` of the loop's result that two consumer warpgroups can split:
    the accumulator starts as zeros and goes, unchanged (rounded by the store), into an
    f32, bf16 or f16 view of a kernel parameter; everything else after the loop is
    index arithmetic."""
    init = gemm.loop.operands[3].owner
    if not (isinstance(init, Instr) and isinstance(init.op, tile_compute.Full)
            and init.op.value == 0):
        return None
    after = fn.body.instrs[fn.body.instrs.index(gemm.loop) + 1:]
    stores = [i for i in after if isinstance(i.op, tile_memory.Store)]
    if len(stores) != 1 or any(not (i.op.terminator or index_op(i) or i in stores)
                               for i in after):
        return None
    store = stores[0]
    view = store.operands[0].owner
    result = gemm.loop.results[0]
    uses = [i for i in walk(fn.body) if result in i.operands]
    if (uses != [store] or store.operands[1] is not result or not isinstance(view, Instr)
            or ptx_elem(view.results[0].type.element)  # type: ignore[union-attr]
            not in ("f32", "bf16", "f16")):
        return None
    return store


def default_stages(gemm: GemmLoop) -> int:
    """As many stages as fit the shared budget, between 2 and :data:`MAX_STAGES`."""
    fit = SHARED_BUDGET // (gemm.stage_bytes + 16)
    return max(2, min(MAX_STAGES, fit))


def fit_problem(gemm: GemmLoop, consumers: int, stages: int | None) -> str | None:
    """Why the pipeline cannot hold this tile with these consumers and stages (None when
    it can): wgmma's m64 blocks, per-thread accumulators, shared memory."""
    blocks = gemm.bm // 64
    if gemm.bm % 64 or blocks % consumers:
        return f"BM={gemm.bm} is not {consumers} consumer warpgroup(s) of 64-row wgmma blocks"
    if gemm.bn % 64 or gemm.bn > 256 or (gemm.bk * elem_bytes_of(gemm.elem)) % 128:
        return "BN must be a multiple of 64 up to 256 and BK one 128-byte swizzle span"
    per_thread = gemm.bm * gemm.bn // (128 * consumers)
    if per_thread > MAX_ACC_REGS:
        return (f"each consumer thread would hold {per_thread} accumulators (at most "
                f"{MAX_ACC_REGS} fit in {CONSUMER_REGS} registers without spilling)")
    n = stages if stages is not None else default_stages(gemm)
    if int(n) < 2:  # wgmma.wait_group 1 holds a stage until the next one is full
        return (f"num_stages={n}: the consumers release a stage one K step later (after "
                "wgmma.wait_group 1), so the ring needs at least two stages")
    need = int(n) * (gemm.stage_bytes + 16)
    if need > SHARED_BUDGET:
        return (f"{n} stages of {gemm.stage_bytes} bytes need {need} bytes of shared memory, "
                f"more than the {SHARED_BUDGET} available")
    return None


__all__ = [
    "CONSUMER_REGS",
    "MAX_ACC_REGS",
    "MAX_STAGES",
    "PRODUCER_REGS",
    "SCHEDULES",
    "SHARED_BUDGET",
    "GemmLoop",
    "PipelinePlan",
    "config_of",
    "default_stages",
    "epilogue_store",
    "fit_problem",
    "match_gemm_loop",
    "plan_pipeline",
    "schedule_of",
]
