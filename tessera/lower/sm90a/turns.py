"""The ping-pong order of two consumer warpgroups (``schedule="pingpong"``): named
barriers make them take turns issuing their ``wgmma`` groups, so that one warpgroup's
tensor-core work overlaps the other's softmax, waits or address arithmetic
(FlashAttention-3, Shah et al. 2024, sec. 3.1; CUTLASS's ping-pong kernel schedule).

Warpgroup ``w`` waits for its turn at barrier ``TURN_BARRIERS[w]`` (``bar.sync``) and,
once its group is issued, hands the turn over with ``bar.arrive`` on the other's
barrier. Each barrier instance counts one warpgroup's ``bar.sync`` and the other's
``bar.arrive`` (256 threads; PTX ISA, "bar, barrier"). Warpgroup 1 arrives once
before its first turn so that warpgroup 0 goes first, and does not hand over after
its last turn, which nobody waits for: every instance completes, none is left open.
Barrier ids are immediates, so each step is a branch that is uniform per warpgroup::

    warpgroup 0                          warpgroup 1
                                         bar.arrive TURN[0]        (start)
    bar.sync TURN[0]  ◀───────────────   ...
    wgmma ...; commit
    bar.arrive TURN[1]  ─────────────▶   bar.sync TURN[1]
    (its softmax / waits)                wgmma ...; commit
    bar.sync TURN[0]  ◀───────────────   bar.arrive TURN[0]        (unless its last)
"""

from __future__ import annotations

from tessera.ir.core import Value
from tessera.ir.dialects.target.ops import Bar, BarArrive
from tessera.lower.emit import TargetEmitter

#: the named barriers of the turns of warpgroups 0 and 1 (0 is the CTA's bar.sync; 1
#: the GEMM epilogue's consumer barrier, 1 and 2 the attention consumers' own)
TURN_BARRIERS = (3, 4)
TURN_THREADS = 256


class Turns:
    """The turn-taking of the two consumer warpgroups; ``first`` is the predicate
    "this thread is in warpgroup 0"."""

    def __init__(self, first: Value) -> None:
        self.first = first

    @staticmethod
    def _arrive(t: TargetEmitter, whose: int) -> None:
        t.op(BarArrive(TURN_BARRIERS[whose], TURN_THREADS))

    @staticmethod
    def _sync(t: TargetEmitter, whose: int) -> None:
        t.op(Bar(TURN_BARRIERS[whose], TURN_THREADS))

    def start(self, e: TargetEmitter) -> None:
        """Warpgroup 1 lets warpgroup 0 take the first turn."""
        e.if_(self.first, lambda t: None, lambda t: self._arrive(t, 0))

    def wait(self, e: TargetEmitter) -> None:
        """Wait for this warpgroup's turn."""
        e.if_(self.first, lambda t: self._sync(t, 0), lambda t: self._sync(t, 1))

    def hand_over(self, e: TargetEmitter, more: Value | None) -> None:
        """Give the turn to the other warpgroup; warpgroup 1 only where ``more`` (it has
        another turn; None: always)."""
        def second(t: TargetEmitter) -> None:
            if more is None:
                self._arrive(t, 0)
            else:
                t.if_(more, lambda u: self._arrive(u, 0))
        e.if_(self.first, lambda t: self._arrive(t, 1), second)


def turns_of(e: TargetEmitter, warpgroup: Value) -> Turns:
    """The turns of the warpgroup whose index (``u32``, 0 or 1) is ``warpgroup``."""
    return Turns(e.setp("eq", warpgroup, e.const(0, "u32"), "u32"))


__all__ = ["TURN_BARRIERS", "TURN_THREADS", "Turns", "turns_of"]
