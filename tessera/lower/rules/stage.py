"""Register tiles staged through shared memory, for consumers that read memory.

The exact ``mma`` (:mod:`tessera.lower.exact.mma`) reads ``a[i, k]`` and ``b[k, j]``
from memory views: each thread walks K for its own output elements, so it needs
elements that other threads hold. An operand computed in the kernel (the softmax's
``P`` of ``P @ V``, a ``K`` computed before ``Q K^T``) is a register tile in the
blocked layout; it is staged: every thread stores its elements at their (row, col) of
a fresh f32 shared buffer, and a CTA barrier makes them visible before the buffer is
read as a :class:`~tessera.lower.values.Mem`. A ``tile.transpose`` of a register tile
stages it the same way and returns the transposed view of the buffer.

Each staging emits a barrier *before* its stores too: inside a loop, the buffer is
overwritten on every trip while threads may still be reading the previous trip's
elements (a write-after-read hazard across threads).
"""

from __future__ import annotations

from dataclasses import replace

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr
from tessera.lower.broadcast import reshape_view
from tessera.lower.core import Lowerer
from tessera.lower.layout import Blocked
from tessera.lower.rules.tensor import store_blocked
from tessera.lower.values import Dist, Mem
from tessera.numerics import f32

#: the alignment of a staging buffer (a 16-byte vector of f32)
STAGE_ALIGN = 16


def stage(low: Lowerer, value: Dist, instr: Instr) -> Mem:
    """``value`` (a 2-D blocked f32 register tile, an operand of ``instr``) stored into
    a fresh shared buffer, behind a barrier: the buffer as a row-major view."""
    layout = value.layout
    if not isinstance(layout, Blocked) or len(layout.shape) < 2 or value.type != "f32" \
            or any(d != 1 for d in layout.shape[:-2]):
        raise UnsupportedError(
            f"{instr.op.name} reads a register tile that cannot be staged through shared "
            f"memory (a {value.type} tile in layout {layout}); blocked f32 tiles of one "
            "matrix (2-D, or leading axes of 1) are", loc=instr.loc)
    rows, cols = layout.shape[-2:]
    size = 4 * rows * cols
    # allocated in the entry block: one buffer, however often the staging runs
    base = low.shared_buffer("stage", size, STAGE_ALIGN, entry=True)
    low.extra["staged_bytes"] = low.extra.get("staged_bytes", 0) + size
    sym = base.owner.op.sym  # type: ignore[union-attr]
    mem = Mem("shared", base, None, (rows, cols), (cols, 1), f32, buffer=sym,
              align=STAGE_ALIGN)
    e = low.em
    e.bar()  # another trip's readers of the buffer are done
    store_blocked(low, mem, value)
    e.bar()  # every element is stored before any thread reads one
    return reshape_view(mem, layout.shape) or mem  # leading unit axes: stride 0


def transposed(mem: Mem) -> Mem:
    """``mem`` with its last two axes swapped (a view: no data moves)."""
    shape, strides = mem.shape, mem.strides
    return replace(mem, shape=(*shape[:-2], shape[-1], shape[-2]),
                   strides=(*strides[:-2], strides[-1], strides[-2]),
                   transposed=not mem.transposed, meta=dict(mem.meta))


__all__ = ["stage", "transposed"]
