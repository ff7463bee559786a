"""The time model of the static estimate: one main-loop iteration, then a launch.

Per iteration of the hot loop (the ``ptx.for`` holding the most tensor-core work, else
the most instructions) one CTA needs, on pipes its SM shares with the other resident
CTAs, ``R_x`` cycles of each resource ``x`` (tensor core, f64/f32/int/special-function
pipes, warp issue, L2-to-SM bytes). Alone, it also waits: its own critical path is

    P = busy + sync + exposed
    busy    = max(non-tensor, tensor)          wgmma overlapped with the next issue
            = non-tensor + tensor + L_wgmma    wgmma.wait_group 0 in every iteration
            = max(non-tensor, (1-z) tensor) + max(0, z tensor - h) + L_wgmma
                                               z: the share of its wait_groups that are 0,
                                               h: issue cycles between the commit and
                                               each wait_group 0 (run beside the groups)
    sync    = (bar.sync + mbarrier waits) x L_bar
    exposed = L_mem                            the iteration waits for its own copies
            = max(0, L_mem - d busy) / d       copies issued d iterations ahead

With ``k`` CTAs resident per SM (registers, shared memory, threads), an SM retires
``k`` iterations in ``max(k max_x R_x, P)`` cycles. A launch runs ``ceil(CTAs / SMs)``
CTAs on the busiest SM, ``k`` at a time, each running its prologue and epilogue
(everything outside the loop, charged the same way) and the loop's trips; the kernel
also needs its unique bytes from HBM. Kernel time is the larger of the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tessera.backend.ptx.estimate.census import Census
from tessera.backend.ptx.estimate.hardware import SMHardware

PIPES = ("f64", "f32", "int", "sfu", "shfl")
BOUND_NAMES = {"tensor": "tensor core", "memory": "memory (L2 to SM)", "f64": "f64 pipe",
               "f32": "f32 pipe", "int": "int pipe", "sfu": "special-function pipe",
               "shfl": "shuffle", "issue": "instruction issue", "latency": "latency"}


def resources(c: Census, hw: SMHardware) -> dict[str, float]:
    """Cycles of each SM-shared resource one CTA needs for the census ``c``."""
    out = {"tensor": sum(f / hw.tensor_rate(fmt) for fmt, f in c.tensor_flops.items())}
    for pipe in PIPES:
        out[pipe] = c.warp_instrs[pipe] * 32 / hw.lanes_per_clk[pipe]
    out["issue"] = sum(c.warp_instrs.values()) / hw.schedulers
    l2_per_sm = hw.hbm_bytes_per_clk * hw.l2_bandwidth_ratio / hw.sms
    out["memory"] = (c.global_read_bytes + c.global_store_bytes) / l2_per_sm
    return out


def lead(c: Census) -> float:
    """Iterations by which a loop's async copies run ahead of their wait: 0 when an
    iteration waits for the copies it issued, ``n // commits`` for ``wait_group n``
    after the iteration's commits (one more when it waits before committing),
    ``stages - 1`` when a producer's ring of ``stages`` feeds it, infinite when the
    loop copies but never waits."""
    if c.global_load_bytes:
        return 0.0  # a synchronous load waits for itself
    if not (c.tma_bytes or c.cp_async_bytes):
        return math.inf
    if c.ring_stages:  # a producer refills a stage as soon as its consumers release it
        return float(max(0, c.ring_stages - 1))
    if c.async_waits:  # a wait before this iteration's commits only sees older groups
        return float(min(c.async_waits) // max(1, c.async_commits) + c.wait_first)
    return 0.0 if c.mbarrier_waits else math.inf


@dataclass(frozen=True)
class CriticalPath:
    """One CTA's own time through a region, split by cause (cycles)."""

    resources: dict[str, float]
    non_tensor: float  # the busiest non-tensor resource, or the CTA's own issue
    drain: float  # wgmma pipeline latency waited for in each iteration
    busy: float
    sync: float
    exposed: float
    lead: float
    serial_wgmma: bool

    @property
    def total(self) -> float:
        return self.busy + self.sync + self.exposed


def path(c: Census, hw: SMHardware, warps: int, in_loop: bool = True) -> CriticalPath:
    """The critical path of one CTA through a region with census ``c``."""
    res = resources(c, hw)
    own_issue = sum(c.warp_instrs.values()) / max(1, min(warps, hw.schedulers))
    non_tensor = max([own_issue, res["memory"]] + [res[p] for p in PIPES])
    serial = bool(c.wgmma) and 0 in c.wgmma_waits
    drain = float(hw.wgmma_latency) if serial else 0.0
    busy = max(non_tensor, res["tensor"])
    if serial:
        # the share of the groups that wait_group 0 retires waits for them, less the
        # instructions issued between their commit and the wait (which ran beside them:
        # an attention's softmax after both products are issued); groups in flight past
        # a wait_group n > 0 (the next scores during the softmax) overlap
        share = c.wgmma_waits.count(0) / len(c.wgmma_waits)
        beside = sum(o for n, o in zip(c.wgmma_waits, c.wgmma_overlap, strict=True) if n == 0)
        hidden = beside / max(1, min(warps, hw.schedulers))
        busy = max(non_tensor, res["tensor"] * (1 - share)) + drain + \
            max(0.0, res["tensor"] * share - hidden)
    sync = (c.barriers + c.mbarrier_waits) * hw.barrier_latency
    ahead = lead(c) if in_loop else (0.0 if c.global_read_bytes else math.inf)
    if ahead == math.inf:
        exposed = 0.0
    elif ahead == 0:
        exposed = float(hw.memory_latency)
    else:
        exposed = max(0.0, hw.memory_latency - ahead * (busy + sync)) / ahead
    return CriticalPath(res, non_tensor, drain, busy, sync, exposed, ahead, serial)


def sm_cycles(p: CriticalPath, k: int) -> float:
    """Cycles for ``k`` co-resident CTAs to each run the region once."""
    return max(k * max(p.resources.values()), p.total)


def bound_of(p: CriticalPath, k: int) -> str:
    """Which resource decides ``sm_cycles(p, k)``: the SM-shared resource when ``k``
    CTAs saturate it, else the largest part of one CTA's own path (its busiest
    resource, the tensor core when serialised, or latency: waits, barriers and the
    ``wgmma`` pipeline drain)."""
    shared = {key: k * v for key, v in p.resources.items()}
    top = max(shared, key=lambda key: shared[key])
    if shared[top] >= p.total:
        return BOUND_NAMES[top]
    own = {key: v for key, v in p.resources.items() if key != "tensor"}
    busiest = max(own, key=lambda key: own[key])
    latency = p.sync + p.exposed
    if p.serial_wgmma:
        parts = {busiest: p.non_tensor, "tensor": p.resources["tensor"],
                 "latency": latency + p.drain}
    else:
        name = "tensor" if p.resources["tensor"] >= own[busiest] else busiest
        parts = {name: p.busy, "latency": latency}
    return BOUND_NAMES[max(parts, key=lambda key: parts[key])]


@dataclass(frozen=True)
class Occupancy:
    """CTAs resident per SM, and the resource that limits them."""

    ctas: int
    limit: str


def occupancy(hw: SMHardware, threads: int, smem: int, registers: int | None) -> Occupancy:
    """Resident CTAs per SM from threads, shared memory (plus the 1 KiB the driver
    reserves per block) and registers (allocated in units of 8 per thread)."""
    limits = {"blocks": hw.blocks_per_sm, "threads": hw.threads_per_sm // threads,
              "shared memory": hw.shared_per_sm // (smem + 1024)}
    if registers:
        limits["registers"] = hw.registers_per_sm // (-(-registers // 8) * 8 * threads)
    limit = min(limits, key=lambda key: limits[key])
    return Occupancy(max(1, limits[limit]), limit)


@dataclass
class KernelTime:
    """A launch's estimated time on the busiest SM and against HBM."""

    cycles: float
    hbm_cycles: float
    rounds: int
    ctas_per_sm: int
    waves: float
    parts: dict[str, float] = field(default_factory=dict)


def launch_time(loop: CriticalPath | None, trips: int, outside: CriticalPath, hw: SMHardware,
                ctas: int, occ: Occupancy, unique_bytes: float) -> KernelTime:
    """Time of a launch of ``ctas`` CTAs (see the module docstring)."""
    per_sm = -(-ctas // hw.sms)
    cycles, left, rounds = 0.0, per_sm, 0
    while left > 0:
        k = min(occ.ctas, left)
        cycles += sm_cycles(outside, k) + (trips * sm_cycles(loop, k) if loop else 0.0)
        left -= k
        rounds += 1
    hbm = unique_bytes / hw.hbm_bytes_per_clk
    return KernelTime(cycles, hbm, rounds, occ.ctas, ctas / (hw.sms * occ.ctas))


__all__ = ["BOUND_NAMES", "CriticalPath", "KernelTime", "Occupancy", "bound_of", "launch_time",
           "lead", "occupancy", "path", "resources", "sm_cycles"]
