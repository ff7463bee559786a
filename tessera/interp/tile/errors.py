"""Sanitizer reports of the tile simulator, worded like compute-sanitizer's.

A report is a :class:`SanitizerError` whose ``kind`` names the problem:

=====================  ===================================================================
kind                   what happened
=====================  ===================================================================
race                   two tiles of a group touched one shared (or global) element between
                       two barriers, at least one of them writing; or tiles of different
                       groups communicated through global memory (no sync exists for that)
out of bounds          a view of global or shared memory reaches outside it
divergent barrier      some tiles of a group reached a barrier (or another collective op,
                       ``alloc_shared``) that others did not
uninitialised read     a read of shared memory nobody wrote since it was allocated
async copy not waited  a read (or overwrite) of a ``cp_async`` destination before the copy
                       completed (``cp_wait_group`` / ``barrier``)
global write conflict  two tiles wrote one global element without a reduce (``+=``)
misaligned access      a vector load/store whose start is not a multiple of its width
=====================  ===================================================================

The message names the kernel, the user's file:line (the ``loc`` of the op), the tile
(linear id, group and local id, batch index when batched), the lane and the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.errors import Loc, TesseraError

RACE = "race"
OOB = "out of bounds"
DIVERGENT = "divergent barrier"
UNINIT = "uninitialised read"
ASYNC = "async copy not waited"
CONFLICT = "global write conflict"
MISALIGNED = "misaligned access"
KINDS = (RACE, OOB, DIVERGENT, UNINIT, ASYNC, CONFLICT, MISALIGNED)

_HINTS = {
    RACE: "put ts.tile.barrier() between the write and the other tile's access, or give "
          "each tile its own elements (groups cannot sync with each other: use a second "
          "launch)",
    OOB: "check the index arithmetic against the tensor's shape (edge tiles need the "
         "shape to be a multiple of the tile, or a guard)",
    DIVERGENT: "every tile of a group must reach the same barriers: move the barrier out of "
               "tile-dependent control flow",
    UNINIT: "write the shared buffer (or cp_async into it and wait) before reading it",
    ASYNC: "call ts.tile.cp_wait_group(n) (and ts.tile.barrier() when other tiles read the "
           "data) before using an async copy's destination",
    CONFLICT: "give each tile its own output elements, or accumulate with += (a reduce)",
    MISALIGNED: "vector accesses must start at a multiple of their width",
}


class SanitizerError(TesseraError):
    """A bug the tile simulator found while running a kernel (see the module table).

    Attributes: ``kind``, ``kernel``, ``tile`` (linear program id over the launch),
    ``group``, ``local``, ``batch``, ``lane``, ``index`` (the element, as a tuple) and
    ``memory`` (the tensor or buffer involved), each None when it does not apply.
    """

    def __init__(self, kind: str, message: str, *, kernel: str, loc: Loc,
                 who: dict[str, Any] | None = None, lane: int | None = None,
                 index: Sequence[int] | None = None, memory: str | None = None,
                 hint: str | None = None) -> None:
        self.kind = kind
        self.kernel = kernel
        who = who or {}
        self.tile: int | None = who.get("tile")
        self.group: int | None = who.get("group")
        self.local: int | None = who.get("local")
        self.batch: int | None = who.get("batch")
        self.lane = lane
        self.index = tuple(int(i) for i in index) if index is not None else None
        self.memory = memory
        parts = [f"kernel '{kernel}': {message}"]
        if who:
            parts.append(who["text"])
        if lane is not None:
            parts.append(f"lane {lane}")
        if self.index is not None:
            parts.append(f"index [{', '.join(map(str, self.index))}]")
        super().__init__(", ".join(parts), hint=hint or _HINTS.get(kind), loc=loc)


def lane_of(position: Sequence[int], shape: Sequence[int], lanes: int = 32) -> int:
    """The lane that handles element ``position`` of a tile of ``shape`` (row-major
    element number modulo the lane count)."""
    flat = 0
    for p, s in zip(position, shape):
        flat = flat * int(s) + int(p)
    return flat % lanes


__all__ = ["ASYNC", "CONFLICT", "DIVERGENT", "KINDS", "MISALIGNED", "OOB", "RACE", "UNINIT",
           "SanitizerError", "lane_of"]
