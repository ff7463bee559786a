"""Launch geometry: how many CTAs of how many threads a lowered kernel runs, and which
group (output tile) each CTA runs.

A block kernel runs one group per CTA of :data:`THREADS` threads; a scalar kernel one
group per CTA of ``group_size`` threads, or, when it never talks within its group, 128
groups per CTA. CTA ``ctaid.x`` runs group ``ctaid.x`` (C order over the grid), except
in a pipelined GEMM, whose CTAs walk the grid in *grouped order*.

**Grouped order.** Groups of a tile kernel are independent, so the lowering may hand
them to CTAs in any one-to-one order without changing a bit of the result. The order
decides what the CTAs resident at one time read: in C order (``ctaid.x`` walks a row
of output tiles, then the next) a wave of 132 CTAs on an 8192-square GEMM with 128x128
tiles covers about two rows of tiles, so it reads two 2 MiB panels of ``A`` and all 64
panels of ``B`` (128 MiB), which L2 (50 MiB on an H100) cannot keep from one wave to
the next: every wave streams ``B`` from HBM again. Grouped order (Triton's
``GROUP_SIZE_M``, the swizzled tile schedulers of CUTLASS) walks ``G`` rows at a time,
column by column, so a wave covers about ``G`` rows by ``132 / G`` columns and its
panels fit L2 together::

    per   = G * cols                   CTA pid -> its group
    first = (pid / per) * G            the band of rows it is in
    size  = min(rows - first, G)       (the last band may be shorter)
    row   = first + (pid % per) % size
    col   = (pid % per) / size         group = row * cols + col

It applies to the GEMM pipelines (:mod:`tessera.lower.sm90a.pipeline`,
:mod:`tessera.lower.sm80.pipeline`) over a 2-D grid of at least two rows that update
nothing in place; ``config={"group_m": G}`` sets ``G`` (1 keeps C order).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from tessera.errors import UnsupportedError
from tessera.ir.core import Function, Value, walk
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.emit import TargetEmitter

#: threads of a block kernel's CTA (four warps: one warpgroup)
THREADS = 128
#: rows of output tiles a band of CTAs walks together (Triton's tutorial takes 8)
GROUP_M = 8


@dataclass
class CtaGeometry:
    """Launch geometry of the lowered kernel."""

    grid: tuple[int, ...]  # Tessera grid of groups
    group_size: int
    batch: int
    block: int  # threads per CTA
    ctas: int  # CTAs along x
    packed: bool  # several single-tile groups per CTA

    @property
    def n_groups(self) -> int:
        return prod(self.grid)

    @property
    def launch_threads(self) -> int:
        """Threads of the whole launch: every CTA of every batch."""
        return self.ctas * self.batch * self.block


def geometry_of(fn: Function, block_kernel: bool) -> CtaGeometry:
    """The geometry of ``fn`` from its launch attributes (grid, group size, batch)."""
    a = fn.attrs
    grid = tuple(int(g) for g in a.get("grid", (1,)))
    group = int(a.get("group_size", 1))
    batch = int(a.get("batch", 0) or 1)
    ngroups = prod(grid)
    if block_kernel:
        if group != 1:
            raise UnsupportedError(
                f"kernel '{fn.name}': groups of {group} tiles holding tensors are "
                "not lowered to PTX", hint="launch with group_size=1 (one tile per CTA)",
                loc=fn.loc)
        return CtaGeometry(grid, 1, batch, THREADS, ngroups, False)
    talks = any(type(i.op).__name__ in ("AllocShared", "Barrier", "LocalId")
                for i in walk(fn.body))
    if group == 1 and not talks:
        block = min(THREADS, ngroups)
        return CtaGeometry(grid, 1, batch, block, -(-ngroups // block), True)
    if group > 1024:
        raise UnsupportedError(f"a group of {group} tiles exceeds a CTA's 1024 threads",
                               loc=fn.loc)
    return CtaGeometry(grid, group, batch, group, ngroups, False)


def raster_rows(fn: Function) -> int | None:
    """``G`` for the pipelined GEMM ``fn`` over its launch grid, or None for C order: a
    grid of one row, ``group_m=1``, or a kernel that updates memory in place (its
    groups' order is part of its meaning)."""
    config = dict(fn.attrs.get("config", ()))
    grid = tuple(int(g) for g in fn.attrs.get("grid", (1,)))
    rows = config.get("group_m", GROUP_M)
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
        raise UnsupportedError(f"group_m={rows!r}: a band of CTAs walks a whole number of "
                               "rows of tiles", loc=fn.loc,
                               hint="use a positive integer (1 keeps the launch's C order)")
    if len(grid) != 2 or grid[0] < 2 or rows == 1:
        return None
    if any(isinstance(i.op, tile_memory.Update) for i in walk(fn.body)):
        return None
    return min(rows, grid[0])


def grouped(e: TargetEmitter, pid: Value, rows: int, cols: int, g: int) -> Value:
    """The linear group (``row * cols + col``, ``s32``) that CTA ``pid`` runs in grouped
    order (the module doc has the formula)."""
    per = e.const(g * cols, "s32")
    first = e.mul(e.bin("div", pid, per, "s32"), e.const(g, "s32"), "s32")
    within = e.bin("rem", pid, per, "s32")
    size = (e.const(g, "s32") if rows % g == 0 else  # else the last band is shorter
            e.bin("min", e.bin("sub", e.const(rows, "s32"), first, "s32"),
                  e.const(g, "s32"), "s32"))
    row = e.add(first, e.bin("rem", within, size, "s32"), "s32")
    col = e.bin("div", within, size, "s32")
    return e.add(e.mul(row, e.const(cols, "s32"), "s32"), col, "s32")


__all__ = ["GROUP_M", "THREADS", "CtaGeometry", "geometry_of", "grouped", "raster_rows"]
