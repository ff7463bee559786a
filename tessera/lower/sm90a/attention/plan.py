"""Which sm_90a attention kernels stream their keys and values through a TMA ring, and
how (the lowering is :mod:`tessera.lower.sm90a.attention.ring` and
:mod:`tessera.lower.sm90a.attention.loop`).

An *attention-shaped* kernel (``tessera/conformance/kernels/flash_attention.py``) has
one or more top-level loops over key blocks whose bodies copy a ``(BN, D)`` block of K
and one of V into two shared buffers with ``tile.cp_async``, synchronise, multiply the
query buffer by the K buffer transposed (``S = Q Kᵀ``), and later multiply a register
tile (``P``) by the V buffer; the K and V buffers are touched nowhere else. A causal
kernel has two such loops (the unmasked blocks, then those on the diagonal); a
non-causal one has one. Such loops only need each block to *arrive* before it is read,
so the blocks of all the loops, in order, go through one ring of ``S`` stages, ``S``
being the configuration's ``num_stages`` (default 2; 1 keeps the tile program's
copy-wait-multiply sequence):

* K and V have a ring each, with a *full* mbarrier per stage (one arrival + the
  block's TMA bytes) and an *empty* one (one arrival per thread): K block ``m`` is
  released as soon as ``S_m`` has retired, V block ``m`` after ``P_m V_m``;
* the issuing thread refills a released stage with the block ``S`` further on, so a
  block is loaded while the ``S - 1`` before it are computed; the loads stop at the
  last block the loops visit (a causal program's skipped blocks are never loaded);
* where registers allow (:func:`overlap_problem`), ``S_{m+1} = Q K_{m+1}ᵀ`` is issued
  before the softmax of ``S_m`` and retired one step later (``wgmma.wait_group 1``),
  FlashAttention-3's intra-warpgroup overlap (Shah et al., 2024, sec. 3.2); where
  the kernel's shape allows, ``P_m V_m`` is also issued a block later, beside
  ``S_{m+2}``, so that both products run during a softmax
  (:mod:`tessera.lower.sm90a.attention.defer`, config ``defer_pv``);
* with ``schedule="pingpong"`` the two consumer warpgroups of a warp-specialised CTA
  take turns issuing ``S`` (sec. 3.1, :mod:`tessera.lower.sm90a.turns`): offered where
  every CTA's two tiles read as many blocks (equal turns) in the overlapped order.

The products are the same ``wgmma`` sequences on the same data as the tile program's,
so the bits are the tile interpreter's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.errors import UnsupportedError
from tessera.ir.core import Function, Instr
from tessera.ir.types import TensorType
from tessera.lower.sm90a.attention.order import KvLoop, match_kv_loops
from tessera.lower.sm90a.warpspec import (
    CONSUMER_REGS,
    PRODUCER_REGS,
    SHARED_BUDGET,
    config_of,
    schedule_of,
)
from tessera.lower.tiles import THREADS
from tessera.lower.values import ptx_elem

#: stages when the configuration names none
DEFAULT_STAGES = 2
#: per-thread f32 values of ``S``, ``S`` of the next block and the output accumulator
#: the overlapped order may hold at once (ptxas 13.5 assembles 64x64 blocks with a head
#: dimension of 128, 128 of them, without spilling)
OVERLAP_REGS = 128
#: registers a thread of the overlapped order takes, by head dimension up to 64 / 128:
#: ptxas 13.5 gives 136 to 164 (D=64) and 251 to 253 (D=128) at 64x64 blocks, checked
#: or fast, causal or not, where the sequential order takes 104 to 128 and 166
OVERLAP_THREAD_REGS = (168, 256)
#: registers a consumer warpgroup's thread of the overlapped order takes under
#: ``setmaxnreg``, by head dimension up to 64 / 128: the highest register ptxas 13.5
#: allocates after ``setmaxnreg.inc`` (SASS of 64x64 blocks, causal or not, fast mode)
#: is R144 to R155 (D=64) and R189 to R191 (D=128): capped, ptxas packs tighter than
#: the one-warpgroup kernel's 251 to 253. 64x128 blocks (:data:`SPLIT_OVERLAP_VALUES`)
#: fill the cap: R229 to R237 under 240 and R229 under 232, without spilling
SPLIT_OVERLAP_REGS = (160, 200)
#: an SM's shared memory and registers (H100: 228 KiB, 1 KiB of it reserved per CTA)
SM_SHARED, SM_REGS = 228 * 1024, 65536
#: registers a thread of a warp-specialised attention CTA takes under ``setmaxnreg``,
#: (producer, consumer) by consumer count: two consumers take FlashAttention-3's 24/240
#: split (2 * 240 + 24 registers of 128 threads fit the 64K register file; ptxas 13.5
#: assembles the overlapped order of 64x128 blocks at D=128 in 240 without spilling,
#: and spills 40 bytes in 232), one the GEMM pipeline's 40/232
ATTENTION_REGS = {1: (PRODUCER_REGS, CONSUMER_REGS), 2: (24, 240)}
#: ``P`` values a consumer thread holds as wgmma's register A: a 64x128 block (the
#: one-warpgroup kernel holds :data:`~tessera.lower.sm90a.mma.REGISTER_A_VALUES`)
SPLIT_REGISTER_A = 64
#: f32 values of two score tiles and the output accumulator a consumer thread of the
#: overlapped order may hold at once: 64x128 blocks at D=128 (ptxas 13.5, 240 registers)
SPLIT_OVERLAP_VALUES = 192
#: the most f32 values of two score tiles and the output accumulator a thread may hold
#: where the overlapped key loop runs two iterations a trip: each score tile is then
#: also a wgmma accumulator (64 aligned registers), and at 64x128 blocks with D=128
#: (192) ptxas 13.5 spills 48 bytes and serialises the wgmma (C7512); 64x128 at D=64
#: (160) and 64x64 blocks assemble without either
UNROLL_VALUES = 160


@dataclass(frozen=True)
class KvPlan:
    """How the key/value blocks of a kernel are streamed. ``overlap``: ``S_{m+1}`` is
    issued before the softmax of ``S_m``; ``why_sequential`` says why not, when not."""

    loops: tuple[KvLoop, ...]
    k_alloc: Instr
    v_alloc: Instr
    bm: int
    bn: int
    d: int
    elem: str
    stages: int
    overlap: bool
    why_sequential: str | None = None
    #: consumer warpgroups of a warp-specialised CTA (:mod:`tessera.lower.sm90a.attention.split`;
    #: each runs one query tile, a producer warpgroup fills the ring), 0 for none
    consumers: int = 0
    why_one_warpgroup: str | None = None
    #: the two consumers take turns issuing ``S = Q Kᵀ`` (``schedule="pingpong"``,
    #: :mod:`tessera.lower.sm90a.turns`)
    pingpong: bool = False
    #: ``P_m V_m`` is issued a block later, with ``S_{m+2}``
    #: (:mod:`tessera.lower.sm90a.attention.defer`); ``why_not_deferred`` says why not, when the
    #: order is overlapped but not deferred
    defer_pv: bool = False
    why_not_deferred: str | None = None
    #: iterations a trip of the overlapped key loops (:func:`tessera.lower.sm90a.attention.loop.
    #: unrolled_pairs`: 2 lets the two score tiles take turns in their registers)
    unroll: int = 1
    #: ``S_{m+1}`` is issued before the softmax of ``S_m``; False with ``defer_pv``:
    #: FlashAttention-3's order, ``S_m`` waited in its iteration beside ``P_{m-1} V_{m-1}``
    #: (config ``defer_pv="fa3"``, every key loop)
    scores_ahead: bool = True

    @property
    def threads(self) -> int:
        """Threads of the CTA: 128, or the consumers and the producer warpgroup."""
        return THREADS * (self.consumers + 1) if self.consumers else THREADS

    @property
    def regs(self) -> tuple[int, int]:
        """Registers a thread of the producer and of a consumer take (``setmaxnreg``)."""
        return ATTENTION_REGS[self.consumers]

    @property
    def block_bytes(self) -> int:
        """Bytes of one K (or V) block."""
        return self.bn * self.d * 2

    @property
    def ring_bytes(self) -> int:
        """Shared bytes of both rings and their mbarriers (the tile program's K and V
        buffers are one stage of them)."""
        return self.stages * (2 * self.block_bytes + 32)

    def describe(self) -> str:
        """One line for ``tessera ptx --stats``."""
        order = ("S of the next block overlaps the softmax" if self.overlap
                 else f"sequential ({self.why_sequential})")
        if self.defer_pv and not self.scores_ahead:
            order = ("S waited in its block, beside P V of the block before (deferred a "
                     "block in every loop: FlashAttention-3's order)")
        elif self.defer_pv:
            order += ("; P V deferred a block in the first loop (issued with the next S, "
                      "one wait a block)")
        elif self.overlap and self.why_not_deferred:
            order += f"; P V waited in its block ({self.why_not_deferred})"
        if self.unroll > 1:
            order += f"; {self.unroll} blocks an iteration"
        if self.consumers:
            who = (f"a producer warpgroup fills it for {self.consumers} consumer "
                   f"warpgroup(s) of {self.bm} query rows each"
                   + (" taking turns (ping-pong)" if self.pingpong else ""))
        else:
            who = "one warpgroup" + (f" ({self.why_one_warpgroup})"
                                     if self.why_one_warpgroup else "")
        return (f"K/V ring: {self.stages} stages of {self.bn}x{self.d} {self.elem} K and V "
                f"blocks ({self.ring_bytes} B shared) over {len(self.loops)} loop(s); "
                f"{who}; {order}")


def overlap_problem(bm: int, bn: int, d: int, stages: int = DEFAULT_STAGES) -> str | None:
    """Why ``S_{m+1}`` is not in flight during the softmax of ``S_m`` at this tile
    (None when it is): ``P`` must be ``wgmma``'s register A (at most 32 values a
    thread, :func:`tessera.lower.sm90a.mma.wgmma_regs`), two score tiles plus the
    output accumulator must fit :data:`OVERLAP_REGS` values a thread, and the
    overlapped order's registers (:data:`OVERLAP_THREAD_REGS`) must not leave fewer
    CTAs per SM than the ring's shared memory does: where they would, the sequential
    order (about 32 registers fewer) keeps the CTAs."""
    s_regs, o_regs = bm * bn // THREADS, bm * d // THREADS
    if s_regs > 32 or o_regs > 64:
        return (f"P of a {bm}x{bn} block is staged through shared memory, not held in "
                "registers")
    if 2 * s_regs + o_regs > OVERLAP_REGS:
        return (f"two {bm}x{bn} score tiles and a {bm}x{d} accumulator are "
                f"{2 * s_regs + o_regs} f32 values a thread, over {OVERLAP_REGS}")
    return occupancy_problem(OVERLAP_THREAD_REGS[0 if d <= 64 else 1], bm, bn, d, stages)


def occupancy_problem(regs: int, bm: int, bn: int, d: int, stages: int) -> str | None:
    """Why ``regs`` registers a thread cost a one-warpgroup attention CTA occupancy
    (None when they do not): they must leave as many CTAs per SM as the shared memory
    of the query tile and ``stages`` K/V stages does."""
    shared = bm * d * 2 + stages * (4 * bn * d + 32) + 2048  # Q, the ring, bookkeeping
    by_shared, by_regs = SM_SHARED // (shared + 1024), SM_REGS // (THREADS * regs)
    if by_regs < by_shared:
        return (f"registers: about {regs} a thread would leave {by_regs} CTAs per SM "
                f"where the shared memory of {stages} stages fits {by_shared}")
    return None


def wanted_consumers(config: dict) -> tuple[int, bool]:
    """Consumer warpgroups the configuration asks for, and whether it insists:
    ``num_warps`` 12 is two consumers and the producer, ``warp_specialize=True`` two
    (or one with ``num_warps`` 8); ``num_warps`` 4 or 8 alone, or
    ``warp_specialize=False``, keep one warpgroup."""
    ws, warps = config.get("warp_specialize"), config.get("num_warps")
    if ws is False or warps == 4 or (warps == 8 and not ws):
        return 0, False
    if warps == 12:
        return 2, ws is True
    if ws:
        if warps not in (None, 8):
            raise UnsupportedError(f"num_warps={warps} has no warp-specialised attention "
                                   "lowering", hint="use 12 (two consumer warpgroups and "
                                   "a producer), 8 (one and a producer) or 4 (no producer)")
        return (1 if warps == 8 else 2), True
    return 0, False


def split_problem(fn: Function, loops: tuple[KvLoop, ...], bm: int, bn: int, d: int,
                  consumers: int, pingpong: bool = False) -> str | None:
    """Why the query tiles of ``fn`` cannot run as ``consumers`` warpgroups over one ring
    filled by a producer warpgroup (None when they can): each consumer holds its
    64-row tile's ``P`` as ``wgmma``'s register A, and the tiles of a CTA read the same
    key blocks in the same order (:func:`tessera.lower.sm90a.attention.order.sharing_problem`)."""
    from tessera.lower.sm90a.attention.order import sharing_problem

    if bm != 64 or bm * bn // THREADS > SPLIT_REGISTER_A or bm * d // THREADS > 64:
        return (f"a consumer warpgroup holds a 64-row tile with P in registers, not a "
                f"{bm}x{bn} tile at D={d}")
    return sharing_problem(fn, loops, consumers, aligned=bn == bm, equal=pingpong)


def plan_kv_ring(fn: Function) -> KvPlan | None:
    """The K/V ring of ``fn`` for sm_90a, or None for the tile program's sequence
    (no attention-shaped loops, or ``num_stages`` 1). A configuration that insists on
    warp specialisation the kernel cannot have is an ``UnsupportedError``."""
    config = config_of(fn)
    stages = int(config.get("num_stages") or DEFAULT_STAGES)
    if stages < 2:
        return None
    matched = match_kv_loops(fn)
    if matched is None:
        return None
    loops, k_alloc, v_alloc = matched
    q_type = loops[0].qk.operands[0].type
    bn, d = k_alloc.op.shape
    elem = ptx_elem(k_alloc.op.element)
    if (elem not in ("bf16", "f16") or ptx_elem(v_alloc.op.element) != elem
            or tuple(v_alloc.op.shape) != (bn, d) or not isinstance(q_type, TensorType)):
        return None
    bm = q_type.shape[0]
    consumers, insist = wanted_consumers(config)
    pingpong = schedule_of(fn)
    if pingpong:  # two consumers take turns
        if config.get("num_warps") not in (None, 12) or config.get("warp_specialize") is False:
            raise UnsupportedError("schedule='pingpong' alternates two consumer warpgroups",
                                   loc=fn.loc, hint="use num_warps=12")
        consumers, insist = 2, True
    why_one = None
    if consumers:
        why_one = split_problem(fn, loops, bm, bn, d, consumers, pingpong)
        if why_one is not None and insist:
            raise UnsupportedError(f"warp-specialised attention: {why_one}", loc=fn.loc,
                                   hint="use BLOCK_M=64 tiles, or warp_specialize=False")
        if why_one is not None:
            consumers = 0
    why = (overlap_problem(bm, bn, d, stages) if not consumers
           else split_overlap_problem(bm, bn, d, consumers))
    if why is None and not config.get("register_a", True):
        why = "config register_a=False stages P through shared memory"
    if why is None and not config.get("overlap_softmax", True):
        why = "config overlap_softmax=False"
    if why is not None and pingpong:  # the turns are the issues of the next scores
        raise UnsupportedError(f"schedule='pingpong' needs the overlapped order: {why}",
                               loc=fn.loc, hint="drop schedule='pingpong'")
    from tessera.lower.sm90a.attention.defer import defer_decision

    why_wait = defer_decision(fn, loops, bm, bn, d, consumers, stages, config, why)
    unroll = unroll_of(config, fn, bm, bn, d, why or (None if why_wait else "P V is deferred"))
    plan = KvPlan(loops, k_alloc, v_alloc, bm, bn, d, elem, stages, why is None, why,
                  consumers, why_one, pingpong, why is None and why_wait is None, why_wait,
                  unroll, config.get("defer_pv") != "fa3")
    if plan.ring_bytes > SHARED_BUDGET:
        return None
    return plan


def unroll_of(config: dict, fn: Function, bm: int, bn: int, d: int, why: str | None) -> int:
    """Key blocks an iteration of the overlapped loop: 1, or 2 where the configuration
    asks (``unroll=2``) and the two score tiles and the accumulator fit
    :data:`UNROLL_VALUES`; ``why``: why the loop is not the overlapped one (an
    ``UnsupportedError`` at the kernel's line where ``unroll=2`` cannot be had)."""
    want = config.get("unroll", 1)
    if want == 1:
        return 1
    values = 2 * bm * bn // THREADS + bm * d // THREADS
    if why is None and values > UNROLL_VALUES:
        why = (f"two {bm}x{bn} score tiles and a {bm}x{d} accumulator are {values} f32 "
               f"values a thread, over {UNROLL_VALUES}")
    if want != 2 or why is not None:
        raise UnsupportedError(f"unroll={want!r}: " + (why or "1 or 2 key blocks an iteration"),
                               loc=fn.loc, hint="drop unroll (one key block an iteration)")
    return 2


def split_overlap_problem(bm: int, bn: int, d: int, consumers: int) -> str | None:
    """Why a consumer warpgroup does not overlap the next scores with the softmax (None
    when it does): the overlapped order's registers must fit the consumer's
    ``setmaxnreg`` share (one CTA fills the SM either way)."""
    s_regs, o_regs = bm * bn // THREADS, bm * d // THREADS
    if 2 * s_regs + o_regs > SPLIT_OVERLAP_VALUES:
        return (f"two {bm}x{bn} score tiles and a {bm}x{d} accumulator are "
                f"{2 * s_regs + o_regs} f32 values a thread, over {SPLIT_OVERLAP_VALUES}")
    regs = SPLIT_OVERLAP_REGS[0 if d <= 64 else 1]
    have = ATTENTION_REGS[consumers][1]
    if regs > have:
        return f"registers: about {regs} a thread, over a consumer warpgroup's {have}"
    return None


def ring_extra_bytes(fn: Function) -> int:
    """Shared bytes the K/V ring adds to the kernel's own buffers (the autotuner's cost
    model counts them): ``S - 1`` more K and V blocks, and the mbarriers."""
    plan = plan_kv_ring(fn)
    if plan is None:
        return 0
    return plan.ring_bytes - 2 * plan.block_bytes


__all__ = ["ATTENTION_REGS", "DEFAULT_STAGES", "OVERLAP_REGS", "OVERLAP_THREAD_REGS",
           "SPLIT_OVERLAP_REGS", "SPLIT_OVERLAP_VALUES", "SPLIT_REGISTER_A", "KvLoop", "KvPlan",
           "match_kv_loops", "occupancy_problem", "overlap_problem", "plan_kv_ring",
           "ring_extra_bytes",
           "split_overlap_problem", "split_problem", "wanted_consumers"]
