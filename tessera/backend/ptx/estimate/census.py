"""Instruction census of a Target IR kernel: what one CTA issues, per loop iteration.

Counts are per CTA, in *warp instructions* (one instruction issued by one warp) and in
bytes and FLOPs, because the SM's pipes and the memory system are shared by the warps of
a CTA. A region's instructions count once per warp that runs it: every warp of the CTA,
except where a ``ptx.if`` compares ``tid.x`` with a constant or tests ``elect.sync``
(:func:`split_threads`): thread 0 issuing TMA copies, a producer warpgroup and its
consumers. Both regions of any other ``ptx.if`` are counted (a divergent warp runs
both) except a ``rare`` then region (checked ``exp``'s slow path, taken about once in
2^24 elements), a ``ptx.for`` body is multiplied by its trip
count when its bounds are constants, or by the mean over the grid and the warps that run
it when they are integer arithmetic on ``ctaid`` and ``tid.x`` (a causal key loop, per
consumer warpgroup; :mod:`~tessera.backend.ptx.estimate.trips`; else counted once, and
``unknown_trips`` says so),
and a ``ptx.while`` body (the ``mbarrier.try_wait`` retry loops) is counted once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from tessera.backend.ptx.estimate.threads import split_threads, warps_of
from tessera.backend.ptx.estimate.trips import TripCounts, constant, trip_count
from tessera.ir.core import Block, Function, Instr
from tessera.ir.dialects.target import For, If, TensorMapType, While
from tessera.ir.dialects.target import async_ops as target_async
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.ptx_ops import Atom, Stmatrix
from tessera.ir.dialects.target.tables import ModuleVar, TableLoad

#: bytes of one element of the formats a tensor map or a tensor-core operand can hold
ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "tf32": 4, "e4m3": 1, "e5m2": 1, "f64": 8,
                 "u8": 1, "s8": 1, "u16": 2, "s16": 2, "u32": 4, "s32": 4, "b32": 4}

#: special-function-unit instructions (the MUFU pipe) and their f64 slow paths
SPECIAL_UNARY = ("ex2", "lg2", "rcp", "sqrt")
#: instructions that only name registers (no SASS instruction of their own)
FREE = (target_ops.Const, target_ops.Pack, target_ops.Unpack, target_ops.SharedAlloc,
        target_ops.Special, ModuleVar)


@dataclass
class Census:
    """What one CTA executes in a region (a whole kernel or one loop iteration)."""

    warp_instrs: Counter[str] = field(default_factory=Counter)  # by pipe class
    tensor_flops: Counter[str] = field(default_factory=Counter)  # by input format
    wgmma: int = 0  # per warpgroup
    mma_sync: int = 0  # per warp
    tma_bytes: int = 0
    tma_copies: int = 0
    cp_async_bytes: int = 0
    global_load_bytes: int = 0
    global_store_bytes: int = 0
    barriers: int = 0  # bar.sync
    mbarrier_waits: int = 0
    async_commits: int = 0  # cp.async.commit_group (closes TMA groups too)
    async_waits: list[int] = field(default_factory=list)  # n of each cp.async.wait_group
    wgmma_waits: list[int] = field(default_factory=list)  # n of each wgmma.wait_group
    #: warp instructions issued between the last wgmma.commit_group and each
    #: wait_group of ``wgmma_waits`` in the same region (0 where it committed elsewhere):
    #: work the retired groups ran beside
    wgmma_overlap: list[int] = field(default_factory=list)
    #: warp instructions counted when this region last committed a wgmma group
    commit_mark: int | None = None
    unknown_trips: int = 0  # loops whose trip count is not a constant
    ring_stages: int = 0  # stages of a producer/consumer mbarrier ring feeding this loop
    wait_first: bool = False  # a cp.async.wait_group comes before the first commit

    @property
    def global_read_bytes(self) -> int:
        """Bytes one CTA reads from global memory (TMA, cp.async and loads)."""
        return self.tma_bytes + self.cp_async_bytes + self.global_load_bytes

    def add(self, other: Census, times: int = 1) -> None:
        """Add ``times`` executions of ``other``."""
        for key, n in other.warp_instrs.items():
            self.warp_instrs[key] += n * times
        for key, n in other.tensor_flops.items():
            self.tensor_flops[key] += n * times
        for name in ("wgmma", "mma_sync", "tma_bytes", "tma_copies", "cp_async_bytes",
                     "global_load_bytes", "global_store_bytes", "barriers", "mbarrier_waits",
                     "async_commits", "unknown_trips"):
            setattr(self, name, getattr(self, name) + getattr(other, name) * times)
        self.wait_first = self.wait_first or (other.wait_first and not self.async_commits)
        self.async_waits += other.async_waits * times
        self.wgmma_waits += other.wgmma_waits * times
        self.wgmma_overlap += other.wgmma_overlap * times

    def add_traffic(self, other: Census) -> None:
        """Add the copies and instructions of a loop that runs beside this one in other
        warps (a producer's), but not its waits: they are on the other warps' path."""
        for key, n in other.warp_instrs.items():
            self.warp_instrs[key] += n
        for name in ("tma_bytes", "tma_copies", "cp_async_bytes", "global_load_bytes",
                     "global_store_bytes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _cost(c: Census) -> tuple[int, int]:
    return (c.global_read_bytes + c.global_store_bytes, sum(c.warp_instrs.values()))


def pipe_of(op: object) -> str | None:
    """The SM pipe class of an arithmetic instruction: ``f64``, ``f32`` (also 16-bit
    floats), ``int``, ``sfu`` (special functions and conversions to or from f64), ``shfl``,
    ``mem`` (loads, stores and copies), ``sync``; None for a register naming."""
    if isinstance(op, FREE):
        return None
    if isinstance(op, target_ops.Unary):
        if op.op in SPECIAL_UNARY:
            return "f64" if op.type == "f64" else "sfu"
        return "f64" if op.type == "f64" else "f32" if op.type.startswith(("f", "bf")) \
            else "int"
    if isinstance(op, target_ops.Cvt):
        # F2F/F2I/I2F with an f64 side run at the 16/clk conversion rate; an integer
        # widening (cvt.u64.u32) is a register move in SASS
        return "sfu" if "f64" in (op.to, op.frm) else "int"
    if isinstance(op, (target_ops.Binary, target_ops.Fma, target_ops.Setp, target_ops.Selp)):
        kind = op.type
        return "f64" if kind == "f64" else "f32" if kind.startswith(("f", "bf")) else "int"
    if isinstance(op, target_ops.Shfl):
        return "shfl"
    if isinstance(op, (target_ops.Load, target_ops.Store, target_ops.Reduce, TableLoad, Atom,
                       target_async.CpAsync, target_async.TmaLoad, target_async.TmaStore,
                       target_async.Ldmatrix, Stmatrix)):
        return "mem"
    if isinstance(op, (target_async.MmaSync, target_async.Wgmma)):
        return "tensor"
    return "sync"


class _Counter:
    """Walks a kernel once, building the census of every region it is asked for."""

    def __init__(self, counts: TripCounts, skip: tuple[Instr, ...] = ()) -> None:
        self.skip = skip  # loops left out (the hot loop and its producers)
        self.counts = counts  # on the launch's grid (bounds that depend on ctaid)

    def block(self, block: Block, threads: range) -> Census:
        out = Census()
        for instr in block.instrs:
            self.instr(instr, threads, out)
        return out

    def instr(self, instr: Instr, threads: range, out: Census) -> None:
        op = instr.op
        warps = warps_of(threads)
        if any(instr is loop for loop in self.skip):
            return
        if isinstance(op, For):
            trips = self.counts(instr, threads)
            if trips is None:
                out.unknown_trips += 1
            out.add(self.block(instr.regions[0].block, threads), 1 if trips is None else trips)
            return
        if isinstance(op, If):
            shares = split_threads(instr.operands[0], threads)
            parts = [self.block(region.block, inner) if len(inner) and not (k == 0 and op.rare)
                     else Census()  # a rare then region: a slow path (exp's) almost never run
                     for k, (region, inner) in enumerate(zip(instr.regions, shares))]
            if len(threads) == 1 and shares == (threads, threads):
                # a lone thread cannot diverge: it runs one region (the producer's choice
                # of which key loop's copy loads a block), charged the costlier
                parts = [max(parts, key=_cost)]
            for part in parts:
                out.add(part)
            return
        if isinstance(op, While):
            for region in instr.regions:
                out.add(self.block(region.block, threads))
            return
        pipe = pipe_of(op)
        if pipe is not None:
            out.warp_instrs[pipe] += warps
        self.effects(instr, len(threads), warps, out)

    def effects(self, instr: Instr, threads: int, warps: int, out: Census) -> None:
        op = instr.op
        if isinstance(op, target_async.Wgmma):
            groups = -(-threads // 128)
            out.wgmma += groups
            out.tensor_flops[op.atype] += groups * 2 * 64 * op.n * op.k
        elif isinstance(op, target_async.MmaSync):
            m, n, k = target_async.mma_shape(op.shape)
            out.mma_sync += warps
            out.tensor_flops[op.atype] += warps * 2 * m * n * k
        elif isinstance(op, target_async.TmaLoad):
            tmap = instr.operands[1].type
            assert isinstance(tmap, TensorMapType)
            out.tma_copies += threads
            out.tma_bytes += threads * tmap.box[0] * tmap.box[1] * ELEMENT_BYTES[tmap.elem]
        elif isinstance(op, target_async.TmaStore):  # the epilogue's box, to global
            tmap = instr.operands[1].type
            assert isinstance(tmap, TensorMapType)
            out.global_store_bytes += threads * tmap.box[0] * tmap.box[1] * \
                ELEMENT_BYTES[tmap.elem]
        elif isinstance(op, target_async.CpAsync):
            out.cp_async_bytes += threads * op.size
        elif isinstance(op, target_ops.Load) and op.space == "global":
            out.global_load_bytes += threads * op.vec * ELEMENT_BYTES.get(op.type, 4)
        elif isinstance(op, (target_ops.Store, target_ops.Reduce)) and op.space == "global":
            vec = getattr(op, "vec", 1)
            out.global_store_bytes += threads * vec * ELEMENT_BYTES.get(op.type, 4)
        elif isinstance(op, target_ops.Bar):
            out.barriers += 1
        elif isinstance(op, target_async.MbarrierWait):
            out.mbarrier_waits += 1
        elif isinstance(op, target_async.CpAsyncCommit):
            out.async_commits += 1
        elif isinstance(op, target_async.CpAsyncWait):
            out.wait_first = out.wait_first or not out.async_commits
            out.async_waits.append(op.n)
        elif isinstance(op, target_async.WgmmaCommit):
            out.commit_mark = sum(out.warp_instrs.values())
        elif isinstance(op, target_async.WgmmaWait):
            out.wgmma_waits.append(op.n)
            mark = out.commit_mark  # (the wait itself is counted already: not beside)
            out.wgmma_overlap.append(
                0 if mark is None else sum(out.warp_instrs.values()) - warps - mark)


def loops(block: Block, runs: int = 1, grid: Sequence[int] | None = None, *,
          threads: range | None = None, counts: TripCounts | None = None,
          ) -> list[tuple[Instr, int, int]]:
    """Every ``ptx.for`` below ``block``, outermost first, as (loop, how many times its
    body runs in one CTA, nesting depth); unknown trip counts count as one (``grid``,
    the ``threads`` that run ``block``: see :func:`trip_count`; ``counts`` remembers
    them)."""
    counts = counts or TripCounts(grid)
    found = []
    for instr in block.instrs:
        inner = runs
        if isinstance(instr.op, For):
            trips = counts(instr, threads)  # a known count of 0 stays 0
            inner = runs * (1 if trips is None else trips)
            found.append((instr, inner, 0))
        shares = split_threads(instr.operands[0], threads) \
            if isinstance(instr.op, If) and threads is not None else (threads,) * 2
        for region, share in zip(instr.regions, shares):
            found += [(loop, n, depth + isinstance(instr.op, For))
                      for loop, n, depth in loops(region.block, inner, threads=share,
                                                  counts=counts)]
    return found


def block_threads(kernel: Function) -> int:
    """Threads per CTA of a Target IR kernel."""
    return int(kernel.attrs.get("block", [128])[0])


def census(kernel: Function, skip: tuple[Instr, ...] = (),
           counts: TripCounts | None = None) -> Census:
    """The census of one CTA running the whole kernel (except the loops ``skip``)."""
    counter = _Counter(counts or TripCounts(kernel.attrs.get("grid")), skip)
    return counter.block(kernel.body, range(block_threads(kernel)))


def loop_threads(kernel: Function, loop: Instr) -> range:
    """The threads of a CTA that run ``loop`` (its enclosing ``ptx.if`` splits)."""
    def find(block: Block, threads: range) -> range | None:
        for instr in block.instrs:
            if instr is loop:
                return threads
            shares = split_threads(instr.operands[0], threads) if isinstance(instr.op, If) \
                else (threads,) * len(instr.regions)
            for region, inner in zip(instr.regions, shares):
                got = find(region.block, inner)
                if got is not None:
                    return got
        return None
    return find(kernel.body, range(block_threads(kernel))) or range(0)


def companions(kernel: Function, loop: Instr, counts: TripCounts | None = None,
               ) -> list[tuple[Instr, int]]:
    """Loops that run beside ``loop`` in other warps, each with its iterations per trip
    of ``loop``: in the other region of a thread-splitting ``ptx.if`` around it, with as
    many trips as ``loop``, or at most one more than the loops of its block together (a
    warp-specialised producer's loop feeding a consumer's; a causal consumer splits the
    blocks the producer loads in one loop into those below its diagonal and the
    diagonal's, and the producer loads the CTA's last tile's, at most one block more
    than the mean tile's), or a small multiple of ``loop``'s trips (a consumer loop of
    two key blocks a trip: two of the producer's iterations a trip)."""
    counts = counts or TripCounts(kernel.attrs.get("grid"))

    def path_to(block: Block, threads: range) -> list[tuple[Instr, int, range]] | None:
        for instr in block.instrs:
            if instr is loop:
                return []
            shares = split_threads(instr.operands[0], threads) if isinstance(instr.op, If) \
                else (threads,) * len(instr.regions)
            for k, (region, inner) in enumerate(zip(instr.regions, shares)):
                sub = path_to(region.block, inner)
                if sub is not None:
                    return [(instr, k, threads), *sub]
        return None

    path = path_to(kernel.body, range(block_threads(kernel))) or []
    own = loop_threads(kernel, loop)
    trips = counts(loop, own)
    home = path[-1][0].regions[path[-1][1]].block if path else kernel.body
    total = sum(counts(f, own) or 0 for f in home.instrs if isinstance(f.op, For))
    found: list[tuple[Instr, int]] = []
    for instr, k, threads in path:
        if not isinstance(instr.op, If):
            continue
        shares = split_threads(instr.operands[0], threads)
        if shares == (threads, threads):  # not split by thread: the same warps run both
            continue
        for f, _, _ in loops(instr.regions[1 - k].block, threads=shares[1 - k],
                             counts=counts):
            beside = counts(f, loop_threads(kernel, f))
            if beside == trips or (trips is not None and beside is not None
                                   and trips <= beside <= total + 1):
                found.append((f, 1))
            elif trips and beside and beside % trips == 0 and beside // trips <= 4:
                found.append((f, beside // trips))
    return found


def mbarrier_inits(kernel: Function) -> int:
    """How many ``mbarrier.init`` a kernel executes (its barriers, counted once)."""
    return sum(isinstance(i.op, target_async.MbarrierInit) for i in _walk(kernel.body))


def loop_census(kernel: Function, loop: Instr, counts: TripCounts | None = None) -> Census:
    """The census of one iteration of ``loop`` (nested loops multiplied out), run by
    the threads that reach it."""
    counter = _Counter(counts or TripCounts(kernel.attrs.get("grid")))
    return counter.block(loop.regions[0].block, loop_threads(kernel, loop))


def shared_bytes(kernel: Function) -> int:
    """Static shared memory of a kernel: its ``ptx.shared`` buffers, each aligned."""
    total = 0
    for instr in _walk(kernel.body):
        if isinstance(instr.op, target_ops.SharedAlloc):
            total = -(-total // instr.op.align) * instr.op.align + instr.op.size
    return total


def _walk(block: Block):  # type: ignore[no-untyped-def]
    for instr in block.instrs:
        yield instr
        for region in instr.regions:
            yield from _walk(region.block)


__all__ = ["ELEMENT_BYTES", "Census", "TripCounts", "block_threads", "census", "companions",
           "constant", "loop_census", "loop_threads", "loops", "mbarrier_inits", "pipe_of",
           "shared_bytes", "split_threads", "trip_count", "warps_of"]
