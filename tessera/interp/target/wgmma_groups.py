"""The shared memory an unretired ``wgmma`` group still reads.

This interpreter computes a ``wgmma`` when it is issued, but on hardware the
instruction reads its shared-memory operands asynchronously until a
``wgmma.wait_group`` retires its group (PTX ISA sec. 9.7.15.6: the operands must not
be modified before then). A pipelined kernel that keeps one group in flight
(``wait_group 1``) may only let a stage be refilled once the group reading it has
retired, so the bytes each warpgroup's groups read are counted here from the
``wgmma`` until the ``wait_group`` that retires them, and an async copy landing on
such bytes is reported (``shared memory overwritten while a wgmma reads it``).
"""

from __future__ import annotations

import numpy as np

from tessera.interp.target.state import Machine


class WgmmaGroups:
    """Per warpgroup (global index ``thread // 128``): the bytes of its open group and
    of its committed groups, oldest first; ``busy`` counts readers per shared byte."""

    def __init__(self, size: int) -> None:
        self.busy = np.zeros(size, np.int32)
        self.open: dict[int, list[np.ndarray]] = {}
        self.committed: dict[int, list[list[np.ndarray]]] = {}

    def read(self, warpgroup: int, flat: np.ndarray) -> None:
        """A ``wgmma`` of ``warpgroup`` reads the shared bytes ``flat``."""
        self.open.setdefault(warpgroup, []).append(flat)
        np.add.at(self.busy, flat, 1)

    def commit(self, warpgroups: np.ndarray) -> None:
        """``wgmma.commit_group``: the open reads become the newest group."""
        for g in warpgroups.tolist():
            self.committed.setdefault(g, []).append(self.open.pop(g, []))

    def wait(self, warpgroups: np.ndarray, n: int) -> None:
        """``wgmma.wait_group n``: all but the ``n`` newest groups have retired."""
        for g in warpgroups.tolist():
            groups = self.committed.get(g, [])
            while len(groups) > n:
                for flat in groups.pop(0):
                    np.subtract.at(self.busy, flat, 1)


def groups_of(m: Machine) -> WgmmaGroups:
    """The machine's record (created on first use)."""
    rec: WgmmaGroups | None = getattr(m, "wgmma_groups", None)
    if rec is None:
        rec = WgmmaGroups(m.ncta * m.shared.size)
        m.wgmma_groups = rec  # type: ignore[attr-defined]
    return rec


def active_warpgroups(m: Machine, mask: np.ndarray) -> np.ndarray:
    """Global indices of the warpgroups with an active thread."""
    return np.unique(m.lin[mask] // 128)


__all__ = ["WgmmaGroups", "active_warpgroups", "groups_of"]
