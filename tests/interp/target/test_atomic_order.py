"""Atomic updates apply one at a time in arrival order: the integer updates applied as
running values (all at once, or an address at a time) give the bits and the old values
of one update after another; and the race check of shared-memory atomics an address at
a time gives the per-thread check's report and records."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.interp.target.memory import atomics
from tessera.interp.target.memory.codes import code_first, code_last
from tessera.interp.target.memory.state import SharedMemory


def _one_by_one(target: np.ndarray, index: np.ndarray, op: str, b: np.ndarray) -> np.ndarray:
    olds = np.empty(len(index), target.dtype)
    with np.errstate(all="ignore"):
        for k, (i, v) in enumerate(zip(index.tolist(), b)):
            olds[k] = target[i]
            target[i] = atomics.updated(op, target.dtype, target[i:i + 1], np.array([v]))[0]
    return olds


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(["u32", "s32", "u64", "s64"]),
       op=st.sampled_from(["add", "xor", "min", "max", "and", "or"]),
       cells=st.integers(1, 60), n=st.integers(1, 80), seed=st.integers(0, 2**32 - 1))
def test_running_values_are_one_update_after_another(dtype: str, op: str, cells: int, n: int,
                                                     seed: int) -> None:
    dt = np.dtype({"u32": np.uint32, "s32": np.int32, "u64": np.uint64, "s64": np.int64}[dtype])
    rng = np.random.default_rng(seed)
    info = np.iinfo(dt)
    # values near the ends of the type: the sums wrap
    start = rng.integers(info.min, info.max, cells, dtype=dt, endpoint=True)
    b = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    index = rng.integers(0, cells, n)
    want_target = start.copy()
    want = _one_by_one(want_target, index, op, b)
    got_target = start.copy()
    got = atomics.apply_in_order(got_target, index, op, b)
    assert got.tobytes() == want.tobytes() and got_target.tobytes() == want_target.tobytes()


NCTA, NTHREADS, SIZE = 2, 64, 256


def _records(seed: int) -> SharedMemory:
    """Shared memory (every byte written) whose first 64 bytes of each CTA hold random
    plain writers, atomics' writers and reader ranges of the CTA's threads."""
    rng = np.random.default_rng(seed)
    sh = SharedMemory(NCTA, NTHREADS, SIZE, races=True)
    sh.init[:] = True
    for c in range(NCTA):
        at = c * SIZE + np.sort(rng.choice(64, rng.integers(0, 12), replace=False))
        who = c * NTHREADS + rng.integers(0, NTHREADS, len(at))
        kind = rng.integers(0, 3, len(at))
        sh.writer_code[at] = np.where(kind == 0, code_last(who), 0) - \
            np.where(kind == 1, code_last(who), 0)
        sh.rmin_code[at] = np.where(kind == 2, code_first(who), 0)
        sh.rmax_code[at] = np.where(kind == 2, code_last(np.minimum(
            who + rng.integers(0, 3, len(at)), (c + 1) * NTHREADS - 1)), 0)
        if len(at):
            sh.mark(at[:, None])
            sh.note_who(who, who)
            sh.accessed[c] = sh.written[c] = sh.has_readers[c] = True
    return sh


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.sampled_from([4, 8]),
       addresses=st.integers(1, 6), threads=st.integers(1, 2 * NTHREADS),
       descending=st.booleans())
def test_an_address_at_a_time_gives_the_per_thread_report_and_records(
        seed: int, width: int, addresses: int, threads: int, descending: bool) -> None:
    """``atomics.check_shared`` (each address's threads as a range) against
    ``SharedMemory.atomic`` (thread by thread): the same race report, or none, and the
    same records, on random records of plain stores, reads and other atomics; threads
    in ascending order, or descending (``cta_order="descending"``)."""
    rng = np.random.default_rng(seed)
    me = np.sort(rng.choice(NCTA * NTHREADS, threads, replace=False))
    me = me[::-1] if descending else me
    words = rng.choice(64 // width, addresses, replace=False) * width
    flat = (me // NTHREADS * SIZE + rng.choice(words, threads))[:, None] + np.arange(width)
    outcome = []
    for path in (atomics.check_shared, SharedMemory.atomic):
        sh = _records(seed)

        def fail(i: int, what: str, text: str) -> None:
            raise AssertionError(i, what, text)
        try:
            path(sh, flat, me, fail)
            report = None
        except AssertionError as err:
            report = err.args
        outcome.append((report, [a.copy() for a in (
            sh.writer_code, sh.wstamp, sh.rmin_code, sh.rmax_code, sh.dirty_blocks,
            sh.who_lo, sh.who_hi, sh.accessed, sh.written)]))
    (fast, fast_records), (slow, slow_records) = outcome
    assert fast == slow
    if slow is None:
        for a, b in zip(fast_records, slow_records):
            np.testing.assert_array_equal(a, b)
