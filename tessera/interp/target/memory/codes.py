"""Thread ids as the shared-memory race records hold them (:mod:`.state`): coded so
that 0 means "none", which lets a launch allocate its records as zero pages and
touch only those its CTAs access; and which records a barrier's arrivals order
(:func:`released`); which records an access meets (:func:`unordered`), and how a
race report words a clash with them (:func:`race_text`)."""

from __future__ import annotations

import numpy as np

_BIG = np.int32(np.iinfo(np.int32).max)


def code_first(ids: np.ndarray | int) -> np.ndarray:
    """The code of a lowest reader: its global thread id minus int32 max, so that "no
    reader" is 0 and above every reader (a minimum keeps the lowest)."""
    return np.asarray(ids, np.int32) - _BIG


def code_last(ids: np.ndarray | int) -> np.ndarray:
    """The code of a highest reader or a writer: its global thread id plus 1 ("none"
    is 0, below every thread)."""
    return np.asarray(ids, np.int32) + np.int32(1)


def released(base: np.ndarray, who: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             w: np.ndarray, stamps: list[np.ndarray] | None = None,
             times: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Where (per row of records whose thread ids start at ``base[i]``, (R, 1)) the
    writer ``w`` and where the readers ``lo``..``hi`` (coded global thread ids,
    :func:`code_first` and :func:`code_last`) are among the threads
    ``who`` (R, W: from ``base`` on), and with ``times`` (when each arrived) accessed
    the byte before they arrived (``stamps``: the clock of the write and of the last
    read; for a range of readers, before the later of its two ends' arrivals):
    (writer, readers), each cleared where it is. An atomic's writer code is negated."""
    w = np.abs(w)
    top = who.shape[1] - 1
    first = who.argmax(axis=1)
    last = top - who[:, ::-1].argmax(axis=1)
    count = who.sum(axis=1)
    r = np.arange(len(who))[:, None]
    if (count == last - first + 1).all():  # each row's arrivals are one range of threads
        # Every id in a row is at least its base, and "none" is 0, which minus 1 is
        # 0xFFFFFFFF unsigned: an access by the range has a code in 1 .. t + 1; the
        # first ones need checking only when the range starts above the row's base.
        f, t = base + first[:, None], (base + last[:, None]).astype(np.uint32)
        writer = (w - np.int32(1)).view(np.uint32) <= t
        readers = (hi - np.int32(1)).view(np.uint32) <= t
        if (first > 0).any():
            writer &= w >= code_last(f)
            readers &= lo >= code_first(f)
    else:
        prefix = np.concatenate([np.zeros((len(who), 1), np.int64),
                                 np.cumsum(who, axis=1)], axis=1)
        a = np.clip(lo + np.iinfo(np.int32).max - base, 0, top)
        b = np.clip(hi - np.int32(1) - base, 0, top)
        readers = (hi > 0) & (prefix[r, b + 1] - prefix[r, a] == b - a + 1)
        writer = (w > 0) & who[r, np.clip(w - np.int32(1) - base, 0, top)]
    if stamps is not None and times is not None:
        writer &= stamps[0] <= times[r, np.clip(w - np.int32(1) - base, 0, top)]
        ends = (np.clip(x - base, 0, top) for x in (lo + np.iinfo(np.int32).max, hi - 1))
        readers &= stamps[1] <= np.maximum(*(times[r, e] for e in ends))
    return writer, readers


def unordered(w: np.ndarray, first: np.ndarray, last: np.ndarray | None = None,
              readers: tuple[np.ndarray, np.ndarray] | None = None,
              atomic: bool = False) -> np.ndarray:
    """Per byte (R, nbytes): whether an access by threads ``first[i]`` .. ``last[i]``
    (None: ``first[i]`` alone) meets a record that nothing orders before it: the
    writer ``w`` (a store's, or an atomic's, its code negated: an ``atomic`` access
    passes those) or, with ``readers`` (the lowest and highest reader codes), a reader.
    Only a thread's own records are ordered before its access, and only where it
    accesses alone: a range of threads (a warpgroup's ``wgmma`` operand, the threads
    of one address's atomics) meets every record."""
    mine = code_last(first) if last is None else \
        np.where(last == first, code_last(first), np.int32(-1))
    mine = mine[:, None]
    clash = ((w > 0) if atomic else (w != 0)) & (np.abs(w) != mine)
    if readers is not None:
        lo, hi = readers
        clash |= (hi > 0) & ((lo != code_first(first)[:, None]) | (hi != mine))
    return clash


#: per access: (whether it writes, whether it is strong: passes atomics' records)
ACCESSES = {"read": (False, False), "strong load": (False, True), "write": (True, False),
            "strong store": (True, True), "atomic": (True, True)}
#: how a race report names each access
_VERBS = {"read": "read of", "strong load": "strong load of", "write": "write of",
          "strong store": "strong store to", "atomic": "atomic on"}


def race_text(access: str, where: str, other: str, by_atomic: bool) -> str:
    """A race report's words: an ``access`` (``read``, ``strong load``, ``write``,
    ``strong store`` or ``atomic``) of ``where`` that meets a record of thread
    ``other`` (named with the barrier that would have ordered the two), made by an
    atomic or a strong store where ``by_atomic`` (a writer code below 0)."""
    by = f"an atomic or strong store of {other}" if by_atomic else other
    if access in ("read", "strong load"):
        return f"{_VERBS[access]} {where} {'updated' if by_atomic else 'written'} by {by}"
    return f"{_VERBS[access]} {where} also accessed by {by}"


__all__ = ["ACCESSES", "code_first", "code_last", "race_text", "released", "unordered"]
