"""The mbarrier state machine (PTX ISA sec. 9.7.13.15 "Parallel Synchronization and
Communication Instructions: mbarrier"), vectorised over many barriers.

An mbarrier object holds (the ISA's "Contents of the mbarrier object"): the current
phase, the expected arrival count, the pending arrival count and the tx-count.

* ``mbarrier.init`` sets expected = pending = count (1 .. 2^20-1), tx-count 0, phase 0.
* ``mbarrier.expect_tx`` raises the tx-count; ``mbarrier.arrive.expect_tx`` does that
  first and then arrives.  ``complete_tx`` (signalled by async copies such as TMA loads)
  lowers it.  The tx-count ranges over -(2^20-1) .. 2^20-1, so a copy may complete before
  its expect-tx while arrivals are still pending.
* The current phase completes when the pending arrivals and the tx-count are both zero:
  the phase advances (its parity flips) and pending arrivals reset to the expected count.
* ``mbarrier.try_wait.parity p`` succeeds once the phase with parity ``p`` has completed,
  i.e. while the current phase's parity differs from ``p``.
* ``mbarrier.inval`` must precede re-initialising the memory.

Beyond the ISA, which leaves these undefined, this model raises :class:`MbarrierError`
for: use before init or after inval, init of a live barrier, more arrivals than pending in
a phase, and a tx-count below zero once every arrival of the phase is in ("expect-tx count
too small": more bytes completed than were announced).
"""

from __future__ import annotations

import numpy as np

from tessera.arch.errors import MbarrierError

TX_LIMIT = (1 << 20) - 1
"""Largest magnitude of the tx-count and largest arrival count (PTX ISA sec. 9.7.13.15)."""


class MbarrierArray:
    """``count`` mbarrier objects, addressed by integer id (e.g. CTA * per_cta + slot).

    Every operation takes an id or an array of ids; repeated ids in one call act like
    that many operations on that barrier within one phase.
    """

    def __init__(self, count: int) -> None:
        self.initialized = np.zeros(count, bool)
        self.invalidated = np.zeros(count, bool)
        self.expected = np.zeros(count, np.int64)
        self.pending = np.zeros(count, np.int64)
        self.tx = np.zeros(count, np.int64)
        self.phase = np.zeros(count, np.int64)  # completed phases so far

    def _ids(self, ids: np.ndarray | int, op: str) -> np.ndarray:
        a = np.atleast_1d(np.asarray(ids, np.int64))
        if np.any((a < 0) | (a >= self.initialized.size)):
            raise MbarrierError(f"{op}: mbarrier id out of range 0..{self.initialized.size - 1}")
        live = self.initialized[a]
        if not np.all(live):
            bad = int(a[~live][0])
            why = ("was invalidated by mbarrier.inval" if self.invalidated[bad]
                   else "was never initialised")
            raise MbarrierError(f"{op} on mbarrier {bad}, which {why}",
                                hint="run mbarrier.init (and fence it) before using the barrier")
        return a

    def init(self, ids: np.ndarray | int, count: int | np.ndarray) -> None:
        """``mbarrier.init``: expected = pending = count, tx-count 0, phase 0."""
        a = np.atleast_1d(np.asarray(ids, np.int64))
        if np.any(self.initialized[a]):
            bad = int(a[self.initialized[a]][0])
            raise MbarrierError(f"mbarrier.init on live mbarrier {bad}",
                                hint="run mbarrier.inval before re-initialising its memory")
        c = np.broadcast_to(np.asarray(count, np.int64), a.shape)
        if np.any((c < 1) | (c > TX_LIMIT)):
            raise MbarrierError(f"mbarrier.init count must be 1..{TX_LIMIT}")
        self.initialized[a], self.invalidated[a] = True, False
        self.expected[a] = self.pending[a] = c
        self.tx[a] = 0
        self.phase[a] = 0

    def inval(self, ids: np.ndarray | int) -> None:
        """``mbarrier.inval``: the object may no longer be used until re-initialised."""
        a = self._ids(ids, "mbarrier.inval")
        self.initialized[a], self.invalidated[a] = False, True

    def expect_tx(self, ids: np.ndarray | int, nbytes: int | np.ndarray) -> None:
        """``mbarrier.expect_tx``: raise the tx-count of the current phase by ``nbytes``."""
        a = self._ids(ids, "mbarrier.expect_tx")
        np.add.at(self.tx, a, np.broadcast_to(np.asarray(nbytes, np.int64), a.shape))
        self._check_tx(a)

    def complete_tx(self, ids: np.ndarray | int, nbytes: int | np.ndarray) -> None:
        """``complete_tx`` of an async copy: lower the tx-count, maybe completing the phase."""
        a = self._ids(ids, "complete_tx")
        np.subtract.at(self.tx, a, np.broadcast_to(np.asarray(nbytes, np.int64), a.shape))
        self._check_tx(a)
        self._complete(a)

    def arrive(self, ids: np.ndarray | int, count: int = 1,
               expect_tx: int | np.ndarray = 0) -> np.ndarray:
        """``mbarrier.arrive{.expect_tx}``; returns each barrier's phase parity before it.

        The expect-tx increment happens before the arrival (PTX ISA sec. 9.7.13.15,
        mbarrier.arrive).
        """
        a = self._ids(ids, "mbarrier.arrive")
        token = self.phase[a] & 1
        if np.any(np.asarray(expect_tx)):
            np.add.at(self.tx, a, np.broadcast_to(np.asarray(expect_tx, np.int64), a.shape))
            self._check_tx(a)
        np.subtract.at(self.pending, a, count)
        if np.any(self.pending[a] < 0):
            bad = int(a[self.pending[a] < 0][0])
            raise MbarrierError(
                f"mbarrier {bad} received more arrivals than its expected count "
                f"{int(self.expected[bad])} in one phase",
                hint="match the init count to the number of arriving threads")
        self._check_tx(a)
        self._complete(a)
        return token

    def try_wait_parity(self, ids: np.ndarray | int, parity: int | np.ndarray) -> np.ndarray:
        """``mbarrier.try_wait.parity``: True where the phase of parity ``parity`` is done."""
        a = self._ids(ids, "mbarrier.try_wait.parity")
        return (self.phase[a] & 1) != (np.asarray(parity, np.int64) & 1)

    def phase_parity(self, ids: np.ndarray | int) -> np.ndarray:
        """Parity of each barrier's current (incomplete) phase."""
        return self.phase[self._ids(ids, "phase query")] & 1

    def _check_tx(self, a: np.ndarray) -> None:
        tx = self.tx[a]
        if np.any(np.abs(tx) > TX_LIMIT):
            raise MbarrierError(f"mbarrier tx-count left the range ±{TX_LIMIT}",
                                hint="split the transfer over several phases")
        short = (tx < 0) & (self.pending[a] == 0)
        if np.any(short):
            bad = int(a[short][0])
            raise MbarrierError(
                f"expect-tx count too small on mbarrier {bad}: {int(-tx[short][0])} more bytes "
                "completed than were announced for the phase",
                hint="make arrive.expect_tx announce the total bytes of all copies signalling "
                     "this phase (a TMA load counts its full box, even when partly out of "
                     "bounds)")

    def _complete(self, a: np.ndarray) -> None:
        u = np.unique(a)
        done = u[(self.pending[u] == 0) & (self.tx[u] == 0)]
        self.phase[done] += 1
        self.pending[done] = self.expected[done]
