"""The state of one launch: geometry, mode, per-program and per-group counters, result.

The sanitizer's per-program state lives here as flat arrays over all programs of the
launch (async-copy group counters) and over all groups (barrier epochs); the contexts
index them with their program ids. Report builders turn a position in a program-axis
array back into the tile, lane and element a report names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import Loc
from tessera.interp.tile.context import Ctx, LaunchGeometry
from tessera.interp.tile.errors import SanitizerError, lane_of


class Reschedule(Exception):  # a control-flow signal, not an error
    """Raised inside a vectorised run when programs turn out to depend on each other
    through global memory in a way the vectorised order would change; the launcher
    restores the written tensors and runs the groups one after another (or, when the
    vectorised schedule was asked for, refuses at ``loc`` saying ``why``)."""

    def __init__(self, loc: Loc | None = None, why: str = "") -> None:
        super().__init__(why)
        self.loc = loc
        self.why = why


class State:
    """Everything one launch of a compiled kernel mutates."""

    def __init__(self, kernel: str, geom: LaunchGeometry, *, checked: bool, fast: bool,
                 vectorized: bool, lanes: int = 32) -> None:
        self.kernel = kernel
        self.geom = geom
        self.checked = checked
        self.fast = fast
        self.vectorized = vectorized
        self.lanes = lanes
        # per-program copy-group counters, made on first use (most launches copy nothing)
        self._counters: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.memo: dict[Any, Any] = {}  # what steps remember during this launch
        self.epoch = np.zeros(geom.n_groups, np.int32)  # barriers passed, per group
        self.shared: list[Any] = []  # shared buffers allocated so far
        self.output: Any = None  # the GlobalMem a returned tile is written to
        self.result: Any = None
        self.result_set = False
        #: the tensors saved before their first write, to restore if the launch fails
        self.journal: list[Any] = []

    def _copy_counters(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._counters is None:
            n = self.geom.n_programs
            self._counters = (np.zeros(n, np.int32), np.zeros(n, bool), np.zeros(n, np.int32))
        return self._counters

    @property
    def copies(self) -> bool:
        """Whether any copy, commit or wait has run (else every counter is zero)."""
        return self._counters is not None

    @property
    def open_id(self) -> np.ndarray:
        """Per program: the id of the copy group being filled."""
        return self._copy_counters()[0]

    @property
    def open_used(self) -> np.ndarray:
        """Per program: whether the open copy group holds copies."""
        return self._copy_counters()[1]

    @property
    def done_upto(self) -> np.ndarray:
        """Per program: copy groups with a smaller id have completed."""
        return self._copy_counters()[2]

    # -- reports
    def report(self, kind: str, message: str, loc: Loc, *, pid: int | None = None,
               index: Any = None, position: Any = None, shape: Any = None,
               memory: str | None = None) -> SanitizerError:
        """Build a SanitizerError naming the tile ``pid`` and element ``index``."""
        who = self.geom.who(pid) if pid is not None else None
        lane = lane_of(position, shape, self.lanes) if position is not None and \
            shape is not None else None
        return SanitizerError(kind, message, kernel=self.kernel, loc=loc, who=who, lane=lane,
                              index=index, memory=memory)


def first_true(mask: np.ndarray) -> tuple[int, ...]:
    """The first position (C order) where ``mask`` is true."""
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask.reshape(-1))),
                                                  mask.shape))


def pid_at(ctx: Ctx, pshape: tuple[int, ...], ppos: tuple[int, ...]) -> int:
    """The program id at position ``ppos`` of program axes ``pshape`` (axes of size 1
    stand for every program along them: the first is named)."""
    if not ppos:
        return int(ctx.pid_flat[0])
    idx = tuple(p if n > 1 else 0 for p, n in zip(ppos, pshape))
    return int(ctx.pid[idx])


def element_at(ctx: Ctx, starts: Any, squeeze: tuple[int, ...], pshape: tuple[int, ...],
               ppos: tuple[int, ...], tpos: tuple[int, ...]) -> tuple[int, ...]:
    """The memory index of tile position ``tpos`` in the program at ``ppos``."""
    out = []
    k = 0
    for d, s in enumerate(starts):
        a = np.asarray(s)
        if a.ndim:
            idx = tuple(p if n > 1 else 0 for p, n in zip(ppos, a.shape)) if ppos else \
                (0,) * a.ndim
            base = int(a[idx])
        else:
            base = int(a)
        if d in squeeze:
            out.append(base)
        else:
            out.append(base + (tpos[k] if k < len(tpos) else 0))
            k += 1
    return tuple(out)


__all__ = ["Reschedule", "State", "element_at", "first_true", "pid_at"]
