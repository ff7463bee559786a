"""The deterministic cost model ``@ts.kernel.autotune`` picks configurations with.

On a CPU nothing can be timed that says anything about a GPU, so every configuration
of the space is compiled to Tile IR for the call's shapes, checked, and *estimated* on
an H100 SXM roofline.

A configuration is **valid** when (:func:`check`; the reasons of the others are kept):

* it compiles for these shapes (a compile error, such as shared memory over 227 KiB
  per group, drops it);
* no tile of its launch is sure to access memory out of bounds
  (:mod:`tessera.frontend.kernel.tuning.bounds`): a block that does not divide the
  dimension it tiles reaches past the last full block;
* a configuration that asks for the sm_90a warp-specialised GEMM pipeline
  (``num_warps`` 8 or 12, ``num_stages``, ``warp_specialize``) can have it: its stages
  fit in shared memory and each consumer thread holds at most 128 accumulators
  (:mod:`tessera.lower.sm90a.warpspec`);
* a group needs at most 1024 threads (a CTA's limit; a pipelined GEMM's CTA has a
  producer warpgroup besides its consumers);
* by the register estimate of :mod:`tessera.frontend.kernel.tuning.regs`, a thread needs at
  most 255 registers (more would spill: sm_90's limit) and a group at most the SM's
  65,536.

The estimate of a valid configuration:

* per tile, from the IR: tensor-core flops (``2·M·N·K`` per ``mma``), vector flops
  (one per element of every other compute op), and global bytes (every load, store
  and ``cp_async`` of global memory; ``+=`` counts twice). Loops multiply by their
  trip count when their bounds are constants after specialisation (they almost
  always are: ``range(0, ctx.S, BN)``), else by 1; a ``tile.if`` counts its larger
  branch; a ``while`` counts one trip;
* per group ``t = max(mma_flops / (989 TFLOP/s / 132), vec_flops / (67 TFLOP/s / 132),
  bytes / (3.35 TB/s / 132))`` — one SM's share of the machine;
* occupancy ``c = min(32, 227 KiB // shared bytes per group, 64 // num_warps,
  65536 // registers per group)`` groups per SM (``num_warps`` from the config, else
  4; registers rounded up to 8 per thread). Shared bytes count an attention's sm_90a
  K/V ring: ``num_stages`` K and V blocks and their mbarriers
  (:func:`tessera.lower.sm90a.attention.plan.ring_extra_bytes`); elsewhere ``num_stages``
  does not change the simulated kernel and only ever ties;
* ``time = ceil(groups / (132·c)) · (c · t + 2 µs)``.

The smallest estimate wins; ties go to the first configuration in the order of the
space (``itertools.product`` over the dict in insertion order). The choice is cached
per call signature (shapes, dtypes, constants), so it is reproducible.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from tessera.frontend.kernel.compiler.compile import SHARED_LIMIT
from tessera.frontend.kernel.tuning.bounds import sure_violations
from tessera.frontend.kernel.tuning.regs import RegisterEstimate, pipeline_problems
from tessera.ir.core import Block, Function, Instr, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

#: H100 SXM: SMs, peak rates, and the per-SM and per-block limits (CUDA programming
#: guide, compute capability 9.0): shared memory per block, warps and blocks per SM,
#: 32-bit registers per thread and per SM, threads per block
H100 = {"sms": 132, "mma_flops": 989e12, "vec_flops": 67e12, "bandwidth": 3.35e12,
        "shared": SHARED_LIMIT, "warps": 64, "groups": 32, "wave": 2e-6,
        "regs_thread": 255, "regs_sm": 65536, "threads": 1024, "reg_unit": 8}


@dataclass(frozen=True)
class Estimate:
    """The cost model's view of one configuration."""

    config: tuple[tuple[str, Any], ...]
    seconds: float
    mma_flops: float
    vec_flops: float
    bytes: float
    shared: int
    groups: int
    registers: int = 0  # estimated per thread


def _bytes(t: Any) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n * storage_of(t.element).np_dtype.itemsize


def _const(v: Any) -> int | None:
    instr = v.owner
    if isinstance(instr, Instr) and isinstance(instr.op, tile_ir.Constant):
        return int(instr.op.value)
    return None


def _count(block: Block, mult: float, acc: list[float]) -> None:
    for instr in block.instrs:
        op = instr.op
        if isinstance(op, tile_ir.For):
            lo, hi, st = (_const(v) for v in instr.operands[:3])
            trips = len(range(lo, hi, st)) if None not in (lo, hi, st) and st else 1
            _count(instr.regions[0].block, mult * trips, acc)
        elif isinstance(op, tile_ir.While):
            for r in instr.regions:
                _count(r.block, mult, acc)
        elif isinstance(op, tile_ir.If):
            parts = []
            for r in instr.regions:
                part = [0.0, 0.0, 0.0]
                _count(r.block, mult, part)
                parts.append(part)
            best = max(parts, key=sum)
            for k in range(3):
                acc[k] += best[k]
        elif isinstance(op, tile_compute.Mma):
            (m, k), n = instr.operands[0].type.shape, instr.operands[1].type.shape[1]  # type: ignore
            acc[0] += 2.0 * m * n * k * mult
        elif isinstance(
            op,
            (
                tile_memory.Load,
                tile_memory.LoadVector,
                tile_memory.Store,
                tile_memory.StoreVector,
                tile_memory.Update,
                tile_memory.CpAsync,
            ),
        ):
            mem = instr.operands[1 if isinstance(op, tile_memory.CpAsync) else 0].type
            if isinstance(mem, MemRefType) and mem.space == "global":
                acc[2] += _bytes(mem) * mult * (2 if isinstance(op, tile_memory.Update) else 1)
        elif instr.results and isinstance(instr.results[0].type, TensorType):
            t = instr.results[0].type
            acc[1] += max(1, t.size) * mult


def _shared(fn: Function) -> int:
    """The kernel's shared buffers, plus what an sm_90a K/V ring of ``num_stages`` adds
    to an attention's K and V buffers (:mod:`tessera.lower.sm90a.attention.plan`)."""
    from tessera.lower.sm90a.attention.plan import ring_extra_bytes

    return sum(_bytes(instr.results[0].type) for instr in walk(fn.body)
               if isinstance(instr.op, tile_memory.AllocShared)) + ring_extra_bytes(fn)


def threads_per_group(fn: Function, regs: RegisterEstimate) -> int:
    """CUDA threads one group of ``fn`` runs on (the PTX backend's mapping)."""
    return regs.threads * int(fn.attrs.get("group_size", 1))


def check(fn: Function) -> list[str]:
    """Why one specialisation cannot run as configured on an H100 (empty: it can)."""
    reasons = [f"out of bounds for these shapes: {v}" for v in sure_violations(fn)[:1]]
    reasons += pipeline_problems(fn)
    regs = RegisterEstimate(fn)
    threads = threads_per_group(fn, regs)
    if threads > H100["threads"]:
        reasons.append(f"a group needs {threads} threads; a CUDA block has at most "
                       f"{H100['threads']}")
    per_thread = regs.per_thread()
    if per_thread > H100["regs_thread"]:
        reasons.append(f"needs about {per_thread} registers per thread (estimate), over "
                       f"the {H100['regs_thread']} of sm_90: it would spill")
    elif _round_regs(per_thread) * threads > H100["regs_sm"]:
        reasons.append(f"needs about {_round_regs(per_thread) * threads} registers per "
                       f"group (estimate), over the {H100['regs_sm']} of an SM")
    return reasons


def _round_regs(n: int) -> int:
    unit = H100["reg_unit"]
    return -(-n // unit) * unit


def estimate(fn: Function, config: dict[str, Any]) -> Estimate:
    """The modelled H100 time of one specialisation (see the module doc)."""
    acc = [0.0, 0.0, 0.0]
    _count(fn.body, 1.0, acc)
    shared = _shared(fn)
    regs = RegisterEstimate(fn)
    per_thread = regs.per_thread()
    grid = fn.attrs.get("grid", (1,))
    gs = int(fn.attrs.get("group_size", 1))
    groups = int(fn.attrs.get("batch", 1)) * math.prod(grid)
    sm = H100["sms"]
    per = [acc[0] * gs / (H100["mma_flops"] / sm), acc[1] * gs / (H100["vec_flops"] / sm),
           acc[2] * gs / (H100["bandwidth"] / sm)]
    t = max(per)
    warps = int(config.get("num_warps", 4))
    by_regs = H100["regs_sm"] // max(1, _round_regs(per_thread) * threads_per_group(fn, regs))
    occ = min(H100["groups"], H100["warps"] // max(1, warps), by_regs,
              H100["shared"] // shared if shared else H100["groups"])
    occ = max(1, int(occ))
    waves = math.ceil(groups / (sm * occ))
    seconds = waves * (occ * t + H100["wave"])
    return Estimate(tuple(config.items()), seconds, acc[0] * gs * groups,
                    acc[1] * gs * groups, acc[2] * gs * groups, shared, groups, per_thread)


def configurations(space: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every configuration of a search space, in ``itertools.product`` order."""
    keys = list(space)
    for k in keys:
        if not isinstance(space[k], (list, tuple)) or not space[k]:
            from tessera.errors import ArgumentError

            raise ArgumentError(f"autotune space entry {k!r} must be a non-empty list")
    return [dict(zip(keys, values)) for values in itertools.product(*(space[k] for k in keys))]


def choose(estimates: list[Estimate]) -> Estimate:
    """The fastest estimate; the earliest wins ties."""
    best = estimates[0]
    for e in estimates[1:]:
        if e.seconds < best.seconds:
            best = e
    return best


__all__ = ["H100", "Estimate", "check", "choose", "configurations", "estimate",
           "threads_per_group"]
