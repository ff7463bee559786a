"""Where a lowered kernel's shared buffers live: static ``.shared`` variables, or one
dynamic ``.extern .shared`` array, and the per-target limit on their total.

Statically declared shared memory is limited to 48 KiB per CTA on every target; a
kernel whose buffers need more gets them as offsets into dynamic shared memory, which
the launch sizes (and opts in to above 48 KiB) and which may grow to the target's
per-block maximum (:mod:`tessera.arch.limits`). The offsets are
:func:`tessera.arch.limits.place_shared`'s, the layout the Target IR interpreter gives
every kernel, so a dynamic kernel's shared addresses are exactly the interpreter's: the
array, like the first static buffer, starts at shared address
:data:`~tessera.arch.limits.SHARED_BASE` (1024), above the kilobyte reserved for system
use, on the GPU and in the interpreter. The PTX names buffers ``smem + offset`` and
never assumes where ``smem`` lies.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.arch.errors import SharedMemoryLimitError
from tessera.arch.limits import STATIC_SHARED_LIMIT, TARGETS, place_shared, shared_limit
from tessera.ir.core import Function, Instr, walk
from tessera.ir.dialects.target.ops import SharedAlloc


@dataclass(frozen=True)
class SharedPlan:
    """The shared buffers of a kernel: each symbol's offset, the total bytes, whether
    they are one dynamic array, and the largest alignment any buffer needs."""

    offsets: dict[str, int]
    total: int
    dynamic: bool
    align: int

    @property
    def dynamic_bytes(self) -> int:
        """The dynamic shared memory a launch must request (0 for static buffers)."""
        return self.total if self.dynamic else 0


def shared_allocs(fn: Function) -> list[Instr]:
    """The kernel's ``ptx.shared`` instructions in program order."""
    return [i for i in walk(fn.body) if isinstance(i.op, SharedAlloc)]


def shared_plan(fn: Function) -> SharedPlan:
    """Offsets and total of ``fn``'s shared buffers; dynamic above the static limit."""
    allocs = shared_allocs(fn)
    offsets, total = place_shared((i.op.sym, i.op.size, i.op.align) for i in allocs)
    align = max([16, *(i.op.align for i in allocs)])
    return SharedPlan(offsets, total, total > STATIC_SHARED_LIMIT, align)


def check_shared_limit(fn: Function, target: str) -> SharedPlan:
    """``fn``'s shared plan; :class:`SharedMemoryLimitError` at the kernel's line, with
    the sizes of its largest buffers, when it needs more than ``target`` allows."""
    plan = shared_plan(fn)
    if target not in TARGETS:
        return plan
    limit = shared_limit(target)
    if plan.total <= limit:
        return plan
    seen: dict[str, Instr] = {}
    for i in shared_allocs(fn):
        seen.setdefault(i.op.sym, i)
    biggest = sorted(seen.values(), key=lambda i: -i.op.size)[:4]
    parts = ", ".join(f"{i.op.size:,} bytes at {i.loc}" for i in biggest)
    raise SharedMemoryLimitError(
        f"kernel '{fn.attrs.get('source', fn.name)}' needs {plan.total:,} bytes of shared "
        f"memory per CTA, more than the {limit:,} bytes ({limit // 1024} KiB) one CTA may "
        f"use on {target}; largest buffers: {parts}",
        hint="use smaller tiles (tile_shape or config) or fewer pipeline stages",
        loc=fn.loc)


__all__ = ["SharedPlan", "check_shared_limit", "shared_allocs", "shared_plan"]
