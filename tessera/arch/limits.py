"""Per-launch resource limits of the targets: for the scheduler's cost model, and the
shared-memory sizes a kernel may declare and request.

H100 SXM5 (sm_90a): 132 SMs; 227 KiB of shared memory per thread block (of 228 KiB per
SM, opt-in above 48 KiB); 65,536 32-bit registers per SM and per block, at most 255 per
thread; 3.35 TB/s of HBM3 bandwidth (NVIDIA H100 Tensor Core GPU Architecture
whitepaper, 2022; CUDA C++ Programming Guide, "Compute Capabilities", table 21).
A100 SXM4 (sm_80): 108 SMs, 163 KiB of shared memory per block, 65,536 registers,
2.04 TB/s (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020).
A40 (sm_86, GA102): 84 SMs, 99 KiB per block, 696 GB/s (NVIDIA A40 datasheet).
L40S (sm_89, AD102): 142 SMs, 99 KiB per block, 864 GB/s (NVIDIA L40S datasheet).

Shared memory of a CTA (CUDA C++ Programming Guide, "Compute Capabilities", the
"Technical Specifications per Compute Capability" table, rows "Maximum amount of shared
memory per thread block"; and "Shared Memory" of the Ampere, Ada and Hopper tuning
guides): statically declared ``.shared`` variables may total at most 48 KiB; more
needs dynamic shared memory (an ``.extern .shared`` array sized at launch), which a
kernel may request up to its architecture's per-block maximum after opting in with
``cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)``: 163 KiB on
compute capability 8.0, 99 KiB on 8.6 and 8.9, 227 KiB on 9.0.

Where a CTA's shared memory starts: on compute capability 8.x and 9.0, "1 KB of shared
memory is reserved for system use" (CUDA C++ Programming Guide, "Compute Capabilities",
the same table; the driver reports it as
``CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK``, 1024 bytes on every target
here), and it is the first kilobyte of the CTA's shared window: a kernel's first buffer,
a static ``.shared`` variable or the ``.extern .shared`` dynamic array, lies at shared
address :data:`SHARED_BASE`, 1024.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from math import prod


@dataclass(frozen=True)
class TargetLimits:
    """What one kernel launch may use on a target, and how fast memory is."""

    name: str
    sms: int
    shared_per_block: int  # bytes, dynamic shared memory after the opt-in
    registers_per_block: int  # 32-bit registers
    hbm_bytes_per_s: float

    @property
    def register_bytes(self) -> int:
        """The register file one block may use, in bytes."""
        return 4 * self.registers_per_block


H100 = TargetLimits("sm_90a", 132, 227 * 1024, 65536, 3.35e12)
A100 = TargetLimits("sm_80", 108, 163 * 1024, 65536, 2.04e12)
A40 = TargetLimits("sm_86", 84, 99 * 1024, 65536, 6.96e11)
L40S = TargetLimits("sm_89", 142, 99 * 1024, 65536, 8.64e11)
TARGETS = {"sm_90a": H100, "sm_80": A100, "sm_86": A40, "sm_89": L40S}

#: the most static ``.shared`` a kernel may declare on every target (bytes)
STATIC_SHARED_LIMIT = 48 * 1024

#: the shared address of a CTA's first buffer on every target: the kilobyte below it
#: is reserved for system use (see the module docstring)
SHARED_BASE = 1024


def arch_number(target: str) -> int:
    """The SM number of a ``.target`` (``sm_90a``: 90); a large one when unknown."""
    m = re.match(r"sm_(\d+)", target)
    return int(m[1]) if m else 1000


def shared_limit(target: str) -> int:
    """The most shared memory (bytes) one CTA of a kernel for ``target`` may use."""
    return TARGETS[target].shared_per_block


#: the SMs of the device the interpreter runs (``%nsmid``; a launch's CTAs are dealt to
#: them in turn, ``%smid``), and the warp slots of one (``%nwarpid``: 2048 threads an SM
#: on these targets). ``tessera run-cuda``'s device reports the same SM count, so that
#: grids sized by it stay small on a CPU.
SM_COUNT = 4
WARP_SLOTS = 64

#: the largest CTA and grid a launch may have on every target here (CUDA C++ Programming
#: Guide, "Compute Capabilities", "Technical Specifications per Compute Capability":
#: block dimensions x, y <= 1024, z <= 64, 1024 threads; grid x < 2^31, y, z <= 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)


def launch_problem(target: str, grid: tuple[int, int, int], block: tuple[int, int, int],
                   static_shared: int, dynamic_shared: int,
                   directives: dict[str, object]) -> str | None:
    """Why a GPU would refuse to launch a kernel for ``target`` over ``grid`` x
    ``block`` with these shared-memory bytes, or None. ``directives`` are the kernel's
    performance directives (PTX ISA sec. 11.4: ``.reqntid`` is the CTA's exact shape,
    ``.maxntid`` bounds its threads); a target without a row here (``sm_75``) is held
    to the largest shared memory of those that have one."""
    threads = block[0] * block[1] * block[2]
    for what, dims, most in (("block", block, MAX_BLOCK), ("grid", grid, MAX_GRID)):
        for axis, d, m in zip("xyz", dims, most):
            if d > m:
                return f"a {what} of {d} along {axis}: at most {m}"
    if threads > MAX_THREADS:
        return f"a block of {threads} threads: at most {MAX_THREADS}"
    req = tuple(directives.get("reqntid", ()))  # type: ignore[arg-type]
    if req and (*req, 1, 1)[:3] != block:
        return f"the kernel's .reqntid {', '.join(map(str, req))} asks for exactly that block"
    most_threads = tuple(directives.get("maxntid", ()))  # type: ignore[arg-type]
    if most_threads and threads > prod(most_threads):
        return (f"a block of {threads} threads: the kernel's .maxntid "
                f"{', '.join(map(str, most_threads))} allows {prod(most_threads)}")
    if static_shared > STATIC_SHARED_LIMIT:
        return (f"{static_shared} bytes of static .shared variables: at most "
                f"{STATIC_SHARED_LIMIT} (more is dynamic shared memory, .extern .shared)")
    known = TARGETS.get(target) or TARGETS.get(target + "a")  # sm_90 is sm_90a's
    limit = known.shared_per_block if known else \
        max(t.shared_per_block for t in TARGETS.values())
    if static_shared + dynamic_shared > limit:
        return (f"{static_shared + dynamic_shared} bytes of shared memory a CTA "
                f"({static_shared} static, {dynamic_shared} dynamic): at most {limit} on "
                f"{target if known else 'any target here'}")
    return None


def place_shared(buffers: Iterable[tuple[str, int, int]]) -> tuple[dict[str, int], int]:
    """Offsets of shared buffers ``(symbol, bytes, alignment)`` placed in order, each at
    the next multiple of its alignment (a symbol seen again keeps its first place), and
    the total size rounded up to 16 bytes. Offsets count from the start of the CTA's
    buffers, shared address :data:`SHARED_BASE` (a multiple of every alignment up to
    1 KiB, so an offset keeps its buffer's alignment as an address). This is the layout
    of a kernel's dynamic shared memory, and the one the Target IR interpreter gives
    every kernel."""
    offsets: dict[str, int] = {}
    end = 0
    for sym, size, align in buffers:
        if sym in offsets:
            continue
        start = -(-end // align) * align
        offsets[sym] = start
        end = start + size
    return offsets, -(-end // 16) * 16


__all__ = ["A40", "A100", "H100", "L40S", "MAX_BLOCK", "MAX_GRID", "MAX_THREADS", "SHARED_BASE",
           "STATIC_SHARED_LIMIT", "TARGETS", "TargetLimits", "arch_number", "launch_problem",
           "place_shared", "shared_limit"]
