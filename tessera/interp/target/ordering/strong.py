"""Strong accesses and memory fences in the race check of the Target IR interpreter
(PTX ISA sec. 8, "Memory Consistency Model").

A *strong* access is an ``ld`` or ``st`` with a memory order (``.volatile``,
``.relaxed``, ``.acquire``, ``.release``) or an ``atom``/``red``. Two strong accesses
never race: they are morally strong. With a plain access a strong one races as a plain
one would, so a strong store is recorded as an atomic is, and a strong load is checked
as an atomic is but leaves no record (:class:`~tessera.interp.target.memory.state.
SharedMemory`).

Threads synchronise through them by the ISA's release and acquire patterns:

* a strong write *heads a release sequence* when it is a release itself
  (``st.release``, ``atom.release`` or ``.acq_rel``, ``red.release``) or when a memory
  fence of its thread (``fence.sc``, ``fence.acq_rel``, ``membar``) came before it; every
  atomic after it on the same bytes lengthens the sequence (with its own release, if it
  has one), another write ends it;
* another thread's strong read (a load, or an atomic's read) of those bytes is an
  *acquire* when it is one itself (``ld.acquire``, ``atom.acquire`` or ``.acq_rel``) or
  when a fence of the reading thread comes after it.

Each release in the sequence the read observed then orders its thread's accesses
before it before the reader's accesses after its acquire: the bytes only that thread
accessed before its release start a new race epoch
(:func:`~tessera.interp.target.memory.async_order.release`), as they do when an
mbarrier phase it arrived on completes. The classic flag hand-off is then no race: data
stored, ``fence.acq_rel.cta``, ``st.relaxed.cta`` of a flag; in another warp, the flag
read with ``ld.acquire.cta`` (or ``ld.volatile`` and a fence), then the data. So is the
last-arriver pattern: each warp stores its part, fences and adds one to a counter with
``atom``; the warp that reads the final count reads every part. Without the fences
the data reads are reported.

Approximations, each of which may miss a race and never reports a false one: the new
epoch holds for every thread, not only the reader; a strong load leaves no record, so
a later plain store of another thread that nothing orders after it is not reported; a
fence's scope is not compared with the threads' distance; the writes of asynchronous
copies (TMA, ``cp.async``) and of ``stmatrix`` do not end a release sequence.
"""

from __future__ import annotations

import numpy as np

from tessera.interp.target.memory.async_order import release
from tessera.interp.target.memory.global_memory import Fail
from tessera.interp.target.state import Machine, Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import async_ops as target_async
from tessera.ir.dialects.target.memory_ops import acquires, releases


class StrongOrder:
    """One launch's synchronisation state: each thread's latest release point (the
    shared memory's clock then; 0: none), the release sequence of each shared byte
    (flat index: {writer: its release point}), and, per thread, the releases it
    observed without an acquire yet."""

    def __init__(self, n: int) -> None:
        self.released_at = np.zeros(n, np.int32)
        self.any = False  # whether any thread has a release point
        self.sequences: dict[int, dict[int, int]] = {}
        self.observed: dict[int, dict[int, int]] = {}

    def hits(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, byte) of the bytes of ``flat`` (M, nbytes) that have a sequence."""
        keys = np.fromiter(self.sequences, np.int64, len(self.sequences))
        return np.nonzero(np.isin(flat, keys))


def order_of(m: Machine) -> StrongOrder:
    """The launch's :class:`StrongOrder`, made on first use."""
    if not hasattr(m, "strong_order"):
        m.strong_order = StrongOrder(m.n)  # type: ignore[attr-defined]
    return m.strong_order  # type: ignore[attr-defined, no-any-return]


def release_point(m: Machine, who: np.ndarray) -> None:
    """Threads ``who`` (global ids) fence or release now: their accesses so far may be
    ordered before another thread's acquire."""
    sh = m.shared
    if not sh.races or not len(who):
        return
    st = order_of(m)
    st.released_at[who] = sh.clock
    st.any = True
    sh.clock += 1


def wrote(m: Machine, flat: np.ndarray, who: np.ndarray, kind: str) -> None:
    """Threads ``who`` wrote the bytes ``flat`` (M, nbytes): a ``plain`` store ends
    their release sequences, a ``strong`` store ends them and, where its thread has a
    release point, heads new ones; an ``atomic`` lengthens them with its thread's
    release point, if it has one."""
    st = order_of(m)
    if not m.shared.races or not (st.sequences or st.any):
        return
    if kind != "atomic" and st.sequences:
        for key in flat[st.hits(flat)].tolist():
            st.sequences.pop(key, None)
    if kind == "plain":
        return
    at = st.released_at[who]
    heads = np.flatnonzero(at)
    for keys, writer, t in zip(flat[heads].tolist(), who[heads].tolist(), at[heads].tolist()):
        for key in keys:
            if kind == "atomic":
                st.sequences.setdefault(key, {})[writer] = t
            else:
                st.sequences[key] = {writer: t}


def observe(m: Machine, flat: np.ndarray, who: np.ndarray, acquire: bool) -> None:
    """Threads ``who`` read the bytes ``flat`` (M, nbytes) strongly: the releases of
    other threads in those bytes' sequences are acquired now (``acquire``) or at the
    reader's next fence."""
    st = order_of(m)
    if not m.shared.races or not st.sequences:
        return
    found: dict[int, dict[int, int]] = {}
    for row, col in zip(*st.hits(flat)):
        reader = int(who[row])
        for writer, at in st.sequences[int(flat[row, col])].items():
            if writer != reader:
                mine = found.setdefault(reader, {})
                mine[writer] = max(mine.get(writer, 0), at)
    for reader, writers in found.items():
        if acquire:
            synchronise(m, writers)
            continue
        pending = st.observed.setdefault(reader, {})
        for writer, at in writers.items():
            pending[writer] = max(pending.get(writer, 0), at)


def fence(m: Machine, who: np.ndarray) -> None:
    """A memory fence of threads ``who``: they acquire the releases they observed
    (:func:`observe`), then their accesses so far are released (:func:`release_point`)."""
    if not m.shared.races:
        return
    st = order_of(m)
    for reader in who.tolist() if st.observed else ():
        if writers := st.observed.pop(reader, None):
            synchronise(m, writers)
    release_point(m, who)


def synchronise(m: Machine, writers: dict[int, int]) -> None:
    """The accesses of each thread of ``writers`` (global id: its release point) made
    before its release point start a new race epoch, in their CTA's records and in the
    records of other CTAs' memory."""
    n = m.nthreads
    ctas = np.unique(np.fromiter(writers, np.int64, len(writers)) // n)
    times = np.zeros((len(ctas), n), np.int32)
    for writer, at in writers.items():
        times[np.searchsorted(ctas, writer // n), writer % n] = at
    release(m, ctas, times > 0, times, cross=True)


def load(m: Machine, flat: np.ndarray, who: np.ndarray, fail: Fail, order: str) -> np.ndarray:
    """The shared-memory bytes ``flat`` (M, nbytes) a load of ``order`` by threads ``who``
    reads, checked (and a strong load's observations noted)."""
    if not order:
        return m.shared.read(flat, who, fail)
    data = m.shared.read(flat, who, fail, strong=True)
    observe(m, flat, who, acquires(order))
    return data


def store(m: Machine, flat: np.ndarray, data: np.ndarray, who: np.ndarray, fail: Fail,
          order: str, consecutive: bool = False) -> None:
    """A checked store of ``order`` of ``data`` by threads ``who`` to shared memory."""
    if releases(order):
        release_point(m, who)
    m.shared.write(flat, data, who, fail, consecutive=consecutive, strong=bool(order))
    wrote(m, flat, who, "strong" if order else "plain")


def atomic(m: Machine, flat: np.ndarray, who: np.ndarray, order: str) -> None:
    """What an ``atom``/``red`` of ``order`` by threads ``who`` on the shared bytes ``flat``
    orders: it may release, it lengthens the bytes' release sequences, and it reads
    them strongly. The threads' updates of one byte apply one after another, each
    reading the one before, so each thread observes the releases of all the others,
    in whichever order they apply."""
    if releases(order):
        release_point(m, who)
    wrote(m, flat, who, "atomic")
    observe(m, flat, who, acquires(order))


#: the fences that order ordinary memory
_MEMORY_FENCES = {k for k in target_async.FENCES if k not in ("proxy_async", "mbarrier_init")}


@step_rule(target_async.Fence)
def _fence(c: TargetCompiler, instr: Instr) -> Step:
    kind = instr.op.kind

    def step(fr: TargetFrame) -> None:
        m = fr.m
        if kind == "proxy_async":
            m.shared.fence(fr.mask.reshape(m.ncta, m.nthreads).any(axis=1))
        elif kind in _MEMORY_FENCES:
            fence(m, np.flatnonzero(fr.mask))
    return step


__all__ = ["StrongOrder", "atomic", "fence", "load", "observe", "order_of", "release_point",
           "store", "synchronise", "wrote"]
