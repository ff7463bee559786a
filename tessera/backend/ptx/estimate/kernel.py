"""``estimate(kernel)``: the static performance estimate of a lowered Target IR kernel.

It finds the hot loop, counts what one CTA does per iteration and outside the loop
(:mod:`~tessera.backend.ptx.estimate.census`), charges it with the time model of
:mod:`~tessera.backend.ptx.estimate.model` on one GPU's constants
(:mod:`~tessera.backend.ptx.estimate.hardware`) and reports the launch's time, its
TFLOP/s and the bound that decides it. It is an estimate, not a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tessera.backend.ptx.estimate import census as census_mod
from tessera.backend.ptx.estimate import model
from tessera.backend.ptx.estimate.hardware import H100_SXM, SMHardware
from tessera.errors import ArgumentError, TesseraError
from tessera.ir.core import Function, Instr
from tessera.ir.dialects.target import KERNEL


@dataclass(frozen=True)
class LaunchEstimate:
    """The estimate of one launch of a kernel on one GPU."""

    kernel: str
    device: str
    iteration: census_mod.Census | None  # one CTA, one iteration of the hot loop
    loop_path: model.CriticalPath | None
    runs: int  # iterations of the hot loop per CTA
    outside: model.CriticalPath
    ctas: int
    threads: int
    shared_bytes: int
    registers: int | None
    occupancy: model.Occupancy
    time: model.KernelTime
    flops: float  # tensor-core FLOPs of the launch
    peak_flops: float
    clock_hz: float
    bound: str

    @property
    def cycles(self) -> float:
        return max(self.time.cycles, self.time.hbm_cycles)

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12 if self.seconds else 0.0

    @property
    def percent_of_peak(self) -> float:
        return 100 * self.flops / self.seconds / self.peak_flops if self.seconds else 0.0


def hot_loop(kernel: Function, counts: census_mod.TripCounts | None = None,
             ) -> tuple[Instr, int] | None:
    """The main loop (K loop, KV loop) and how often its body runs per CTA: the loop
    with the most tensor-core work (else instructions) over the launch, descending into
    a nested loop that holds at least half of it (``counts``: the trip counts, kept
    for the rest of an estimate)."""
    counts = counts or census_mod.TripCounts(kernel.attrs.get("grid"))
    found = census_mod.loops(kernel.body, threads=range(census_mod.block_threads(kernel)),
                             counts=counts)
    if not found:
        return None

    def score(entry: tuple[Instr, int, int]) -> tuple[float, float]:
        body = census_mod.loop_census(kernel, entry[0], counts)
        return (entry[1] * sum(body.tensor_flops.values()),
                entry[1] * sum(body.warp_instrs.values()))

    scores = {id(e[0]): score(e) for e in found}
    best = max(found, key=lambda e: (scores[id(e[0])], -e[2]))
    for entry in found:  # a deeper loop holding at least half the work is the hot one
        if entry[2] > best[2] and _inside(entry[0], best[0], counts) and \
                scores[id(entry[0])] >= tuple(0.5 * s for s in scores[id(best[0])]):
            best = entry
    return best[0], best[1]


def _inside(inner: Instr, outer: Instr, counts: census_mod.TripCounts) -> bool:
    return any(loop is inner
               for loop, _, _ in census_mod.loops(outer.regions[0].block, counts=counts))


def _wgmma_order(serial: bool, it: census_mod.Census) -> str:
    if not serial:
        return "overlapped"
    if max(it.wgmma_waits):
        return "partly overlapped (wait_group 1, then 0)"
    beside = sum(it.wgmma_overlap)
    return (f"retired by wait_group 0 after {beside} warp instructions beside them"
            if beside else "serialised (wait_group 0)")


def estimate(kernel: Function, device: SMHardware = H100_SXM, *, registers: int | None = None,
             unique_bytes: float | None = None) -> LaunchEstimate:
    """LaunchEstimate one launch of the lowered ``kernel`` on ``device``. ``registers`` per
    thread (ptxas's count) limit occupancy when given; ``unique_bytes`` is what the
    launch must move through HBM at least (its arguments), by default every CTA's
    global traffic (no reuse in L2)."""
    if kernel.kind != KERNEL:
        raise ArgumentError(f"estimate takes a lowered ptx.kernel, not a {kernel.kind}",
                            hint="lower it first: ts.compile_kernel(...).kernel")
    counts = census_mod.TripCounts(kernel.attrs.get("grid"))  # each loop counted once
    hot = hot_loop(kernel, counts)
    iteration, skip = None, ()
    if hot:
        iteration = census_mod.loop_census(kernel, hot[0], counts)
        beside = census_mod.companions(kernel, hot[0], counts)
        for loop, per_trip in beside:  # a producer's loop: its copies feed this one's
            for _ in range(per_trip):  # iterations
                iteration.add_traffic(census_mod.loop_census(kernel, loop, counts))
        if beside:  # a ring of full and empty mbarriers: the lowering's stages, or a
            # pair of barriers per stage when it does not say (a kernel's other barriers
            # would count as stages: the warp-specialised attention's query copies')
            iteration.ring_stages = int(kernel.attrs.get("ring_stages")
                                        or census_mod.mbarrier_inits(kernel) // 2)
        elif kernel.attrs.get("ring_stages"):  # refilled inside the loop as it releases
            iteration.ring_stages = int(kernel.attrs["ring_stages"])
        skip = (hot[0], *(loop for loop, _ in beside))
    return estimate_census(
        kernel.name, iteration, hot[1] if hot else 0, census_mod.census(kernel, skip, counts),
        threads=census_mod.block_threads(kernel),
        ctas=math.prod(int(g) for g in kernel.attrs.get("grid", [1])),
        shared=census_mod.shared_bytes(kernel), registers=registers,
        unique_bytes=unique_bytes, device=device)


def estimate_census(name: str, iteration: census_mod.Census | None, runs: int,
                    rest: census_mod.Census, *, threads: int, ctas: int, shared: int,
                    registers: int | None = None, unique_bytes: float | None = None,
                    device: SMHardware = H100_SXM) -> LaunchEstimate:
    """The estimate of a launch from censuses counted elsewhere (a PTX file's, say):
    ``iteration`` of the hot loop, which runs ``runs`` times per CTA, and ``rest``,
    everything else one CTA does."""
    warps = -(-threads // 32)
    loop_path = model.path(iteration, device, warps) if iteration else None
    outside = model.path(rest, device, warps, in_loop=False)
    occ = model.occupancy(device, threads, shared, registers)
    whole = census_mod.Census()
    whole.add(rest)
    if iteration is not None:
        whole.add(iteration, runs)
    traffic = ctas * (whole.global_read_bytes + whole.global_store_bytes)
    time = model.launch_time(loop_path, runs, outside, device, ctas, occ,
                             traffic if unique_bytes is None else unique_bytes)
    flops = ctas * sum(whole.tensor_flops.values())
    fmt = next(iter(whole.tensor_flops), "bf16")
    resident = min(occ.ctas, -(-ctas // device.sms))  # CTAs that share an SM at once
    if time.hbm_cycles > time.cycles:
        bound = "memory (HBM)"
    elif loop_path is not None and runs * model.sm_cycles(loop_path, resident) >= \
            model.sm_cycles(outside, resident):
        bound = model.bound_of(loop_path, resident)
    else:
        bound = model.bound_of(outside, resident)
    return LaunchEstimate(name, device.name, iteration, loop_path, runs, outside, ctas,
                    threads, shared, registers, occ, time, flops, device.peak_flops(fmt),
                    device.clock_hz, bound)


def format_estimate(est: LaunchEstimate) -> str:
    """A readable report of ``est``, one fact per line."""
    lines = [f"{est.kernel} on {est.device} (static estimate, not a measurement)"]
    it, p = est.iteration, est.loop_path
    if it is not None and p is not None:
        warps = -(-est.threads // 32)
        per_thread = {k: v / warps for k, v in it.warp_instrs.items()}
        lines += [
            f"  main loop: {est.runs} iterations per CTA; per iteration and CTA:",
            f"    tensor core: {it.wgmma} wgmma + {it.mma_sync} mma.sync, "
            f"{sum(it.tensor_flops.values()):.0f} FLOP, {p.resources['tensor']:.0f} cycles",
            f"    global->shared: {it.tma_bytes} B by TMA ({it.tma_copies} boxes), "
            f"{it.cp_async_bytes} B by cp.async; global loads {it.global_load_bytes} B, "
            f"stores {it.global_store_bytes} B",
            "    instructions per thread: " + ", ".join(
                f"{k} {per_thread.get(k, 0):.0f}" for k in ("f64", "f32", "sfu", "int", "mem")),
            "    pipe cycles: " + ", ".join(
                f"{k} {p.resources[k]:.0f}" for k in ("f64", "f32", "sfu", "issue", "memory")),
            f"    sync: {it.barriers} bar.sync, {it.mbarrier_waits} mbarrier waits, "
            f"cp.async.wait_group {it.async_waits or '-'}, wgmma.wait_group "
            f"{it.wgmma_waits or '-'}",
            f"    copies ahead: {_lead(p.lead)}; exposed latency {p.exposed:.0f} cycles; "
            f"wgmma {_wgmma_order(p.serial_wgmma, it)}",
            f"    one CTA alone: {p.total:.0f} cycles (busy {p.busy:.0f}, sync {p.sync:.0f}, "
            f"exposed {p.exposed:.0f})"]
    else:
        lines.append("  no loop: the kernel body is one straight region")
    regs = f"{est.registers} registers" if est.registers else "registers unknown"
    occ, t = est.occupancy, est.time
    lines += [
        f"  launch: {est.ctas} CTAs x {est.threads} threads, {est.shared_bytes} B shared, "
        f"{regs}; {occ.ctas} CTAs per SM (limit: {occ.limit}); {t.waves:.2f} waves",
        f"  time: {est.seconds * 1e6:.1f} us ({est.cycles:.0f} cycles; SMs {t.cycles:.0f}, "
        f"HBM {t.hbm_cycles:.0f})",
        f"  {est.tflops:.1f} TFLOP/s, {est.percent_of_peak:.1f}% of the dense peak; "
        f"bound: {est.bound}"]
    return "\n".join(lines)


def estimate_compiled(compiled: Any, arrays: Sequence[Any] = (),
                      device: SMHardware = H100_SXM) -> LaunchEstimate:
    """The estimate of a ``CompiledKernel``: registers from ptxas when it is installed,
    unique HBM bytes from the launch's ``arrays`` (when given)."""
    try:
        registers: int | None = int(compiled.assemble().stats[compiled.name].registers)
    except (TesseraError, OSError):  # no ptxas here: occupancy ignores registers
        registers = None
    unique = sum(getattr(a, "nbytes", 0) for a in arrays) or None
    return estimate(compiled.kernel, device, registers=registers, unique_bytes=unique)


def _lead(lead: float) -> str:
    return "no copies" if lead == math.inf else f"{lead:.0f} iterations"


__all__ = ["LaunchEstimate", "estimate", "estimate_census", "estimate_compiled", "format_estimate",
           "hot_loop"]
