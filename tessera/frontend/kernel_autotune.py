"""The deterministic cost model ``@ts.kernel.autotune`` picks configurations with.

On a CPU nothing can be timed that says anything about a GPU, so every configuration
of the space is compiled to Tile IR and *estimated* on an H100 SXM roofline:

* per tile, from the IR: tensor-core flops (``2·M·N·K`` per ``mma``), vector flops
  (one per element of every other compute op), and global bytes (every load, store
  and ``cp_async`` of global memory; ``+=`` counts twice). Loops multiply by their
  trip count when their bounds are constants after specialisation (they almost
  always are: ``range(0, ctx.S, BN)``), else by 1; a ``tile.if`` counts its larger
  branch; a ``while`` counts one trip;
* per group ``t = max(mma_flops / (989 TFLOP/s / 132), vec_flops / (67 TFLOP/s / 132),
  bytes / (3.35 TB/s / 132))`` — one SM's share of the machine;
* occupancy ``c = min(32, 227 KiB // shared bytes per group, 64 // num_warps)`` groups
  per SM (``num_warps`` from the config, else 4; ``num_stages`` does not change the
  simulated kernel and only ever ties);
* ``time = ceil(groups / (132·c)) · c · t + 2 µs`` per wave.

The smallest estimate wins; ties go to the first configuration in the order of the
space (``itertools.product`` over the dict in insertion order). The choice is cached
per call signature (shapes, dtypes, constants), so it is reproducible.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from tessera.ir import tile as T
from tessera.ir import tile_compute as C
from tessera.ir import tile_memory as M
from tessera.ir.core import Block, Function, Instr
from tessera.ir.tile import MemRefType
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

H100 = {"sms": 132, "mma_flops": 989e12, "vec_flops": 67e12, "bandwidth": 3.35e12,
        "shared": 227 * 1024, "warps": 64, "groups": 32, "wave": 2e-6}


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


def _bytes(t: Any) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n * storage_of(t.element).np_dtype.itemsize


def _const(v: Any) -> int | None:
    instr = v.owner
    if isinstance(instr, Instr) and isinstance(instr.op, T.Constant):
        return int(instr.op.value)
    return None


def _count(block: Block, mult: float, acc: list[float]) -> None:
    for instr in block.instrs:
        op = instr.op
        if isinstance(op, T.For):
            lo, hi, st = (_const(v) for v in instr.operands[:3])
            trips = len(range(lo, hi, st)) if None not in (lo, hi, st) and st else 1
            _count(instr.regions[0].block, mult * trips, acc)
        elif isinstance(op, T.While):
            for r in instr.regions:
                _count(r.block, mult, acc)
        elif isinstance(op, T.If):
            parts = []
            for r in instr.regions:
                part = [0.0, 0.0, 0.0]
                _count(r.block, mult, part)
                parts.append(part)
            best = max(parts, key=sum)
            for k in range(3):
                acc[k] += best[k]
        elif isinstance(op, C.Mma):
            (m, k), n = instr.operands[0].type.shape, instr.operands[1].type.shape[1]  # type: ignore
            acc[0] += 2.0 * m * n * k * mult
        elif isinstance(op, (M.Load, M.LoadVector, M.Store, M.StoreVector, M.Update,
                             M.CpAsync)):
            mem = instr.operands[1 if isinstance(op, M.CpAsync) else 0].type
            if isinstance(mem, MemRefType) and mem.space == "global":
                acc[2] += _bytes(mem) * mult * (2 if isinstance(op, M.Update) else 1)
        elif instr.results and isinstance(instr.results[0].type, TensorType):
            t = instr.results[0].type
            acc[1] += max(1, t.size) * mult


def estimate(fn: Function, config: dict[str, Any]) -> Estimate:
    """The modelled H100 time of one specialisation (see the module doc)."""
    acc = [0.0, 0.0, 0.0]
    _count(fn.body, 1.0, acc)
    shared = 0
    from tessera.ir.core import walk

    for instr in walk(fn.body):
        if isinstance(instr.op, M.AllocShared):
            shared += _bytes(instr.results[0].type)
    grid = fn.attrs.get("grid", (1,))
    gs = int(fn.attrs.get("group_size", 1))
    groups = int(fn.attrs.get("batch", 1)) * math.prod(grid)
    sm = H100["sms"]
    per = [acc[0] * gs / (H100["mma_flops"] / sm), acc[1] * gs / (H100["vec_flops"] / sm),
           acc[2] * gs / (H100["bandwidth"] / sm)]
    t = max(per)
    warps = int(config.get("num_warps", 4))
    occ = min(H100["groups"], H100["warps"] // max(1, warps),
              H100["shared"] // shared if shared else H100["groups"])
    occ = max(1, int(occ))
    waves = math.ceil(groups / (sm * occ))
    seconds = waves * (occ * t + H100["wave"])
    return Estimate(tuple(config.items()), seconds, acc[0] * gs * groups,
                    acc[1] * gs * groups, acc[2] * gs * groups, shared, groups)


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


__all__ = ["H100", "Estimate", "choose", "configurations", "estimate"]
