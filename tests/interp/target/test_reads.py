"""Reads kept as rectangles (tessera.interp.target.memory.reads, and the wgmma groups of
tessera.interp.target.memory.async_order) against the per-byte records they stand for.

Random sequences of accesses run on two shared memories: one logs whole-chunk reads,
the other writes every read into its per-byte records at once (the definition). After
every step the records the first one resolves equal the second's, the questions the
checks ask (may a copy overwrite this range?) get the same answers, and the wgmma
groups' reader counts equal counts kept per byte."""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.interp.target.memory import bulk
from tessera.interp.target.memory.async_order import WgmmaGroups, _release
from tessera.interp.target.memory.flight import Copy, issue
from tessera.interp.target.memory.state import CHUNK, DIRTY_BLOCK, SharedMemory

NCTA, NTHREADS, SIZE = 3, 256, 512  # size: 32 chunks, 8 dirty blocks per CTA


def _records(sh: SharedMemory) -> list[np.ndarray]:
    return [sh.rmin, sh.rmax, sh.writer, sh.accessed, sh.written, sh.who_lo, sh.who_hi]


def _assert_same(fast: SharedMemory, slow: SharedMemory) -> None:
    """``fast`` (a copy, resolved) holds the records of ``slow``; both flag every block
    that holds a record as dirty, and every CTA that holds a reader (a writer)."""
    view = copy.deepcopy(fast)
    for x, y in zip(_records(view), _records(slow)):
        np.testing.assert_array_equal(x, y)
    for sh in (view, slow):
        held = ((sh.rmax >= 0) | (sh.writer >= 0)).reshape(NCTA, -1, DIRTY_BLOCK).any(axis=2)
        assert not (held & ~sh.dirty).any()
        # the per-CTA flags by which stores and epochs skip the records hold every CTA
        # that holds a reader (a writer)
        assert not ((sh.rmax >= 0).reshape(NCTA, SIZE).any(axis=1) & ~sh.has_readers).any()
        assert not ((sh.writer >= 0).reshape(NCTA, SIZE).any(axis=1) & ~sh.written).any()


chunk_sets = st.lists(st.integers(0, SIZE // CHUNK - 1), min_size=1, max_size=12, unique=True)
cta_sets = st.lists(st.integers(0, NCTA - 1), min_size=1, max_size=NCTA, unique=True)
threads = st.tuples(st.integers(0, NTHREADS - 1), st.integers(0, NTHREADS - 1))

step = st.one_of(
    st.tuples(st.just("chunks"), cta_sets, chunk_sets, threads),
    st.tuples(st.just("rows"), st.lists(st.tuples(st.integers(0, NCTA * NTHREADS - 1),
                                                  st.integers(0, SIZE // CHUNK - 1)),
                                        min_size=1, max_size=6)),
    st.tuples(st.just("issue"), st.lists(st.tuples(st.integers(0, NCTA * NTHREADS - 1),
                                                   st.integers(0, SIZE - 8)),
                                         min_size=1, max_size=4)),
    st.tuples(st.just("bytes"), st.integers(0, NCTA * NTHREADS - 1),
              st.integers(0, SIZE - 4), st.integers(1, 4)),
    st.tuples(st.just("write"), st.integers(0, NCTA * NTHREADS - 1), st.integers(0, SIZE - 4)),
    st.tuples(st.just("store"), st.sampled_from([1, 2, 4, 8, 16]),
              st.lists(st.tuples(st.integers(0, NCTA * NTHREADS - 1), st.integers(0, SIZE - 16)),
                       min_size=1, max_size=6)),
    st.tuples(st.just("release"), cta_sets, threads, st.booleans(), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("sync"), cta_sets),
    st.tuples(st.just("tick")),  # an mbarrier arrival elsewhere: the clock moves on
    st.tuples(st.just("clear"), cta_sets, st.integers(0, SIZE // CHUNK - 1),
              st.integers(1, 8), st.integers(0, NTHREADS - 1)),
)


def _apply(fast: SharedMemory, slow: SharedMemory, op: tuple) -> None:
    kind = op[0]
    if kind == "chunks":  # a wgmma operand: the same chunks in each CTA, one warpgroup each
        _, ctas, chunks, (a, b) = op
        ctas, chunks = np.array(ctas), np.sort(np.array(chunks))
        first = ctas * NTHREADS + min(a, b)
        last = ctas * NTHREADS + max(a, b)
        local = (chunks[:, None] * CHUNK + np.arange(CHUNK)).ravel()
        blocks = np.unique(local // DIRTY_BLOCK)
        fast.log.add(ctas, chunks, blocks, first, last)
        slow.note_readers(ctas[:, None] * SIZE + local[None, :], first, last, mark=False)
        slow.dirty[ctas[:, None], blocks[None, :]] = True
    elif kind == "rows":  # ldmatrix-like: one 16-byte chunk per thread
        me = np.array([t for t, _ in op[1]])
        index = me // NTHREADS * (SIZE // CHUNK) + np.array([c for _, c in op[1]])
        fast.log.add_rows(index, me, me)
        slow.note_readers(index[:, None] * CHUNK + np.arange(CHUNK), me, me)
    elif kind == "issue":  # cp.async of 8 bytes per thread: the same fault, or none
        me = np.array([t for t, _ in op[1]])
        dst = np.array([a // 8 * 8 for _, a in op[1]])
        flat = (me // NTHREADS * SIZE + dst)[:, None] + np.arange(8)
        faults = []
        for sh in (fast, slow):
            m = SimpleNamespace(shared=sh, ncta=NCTA, nthreads=NTHREADS, n=NCTA * NTHREADS)
            copy_ = Copy(me, np.zeros(len(me), np.int64), flat, np.zeros(flat.shape, np.uint8),
                         bounds=(int(dst.min()), int(dst.max()) + 8))
            faults.append(_fault(lambda fail, m=m, c=copy_: issue(m, c, fail)))
        assert faults[0] == faults[1]
    elif kind == "bytes":  # ld.shared of one thread
        _, who, at, n = op
        flat = np.array([[who // NTHREADS * SIZE + at + i for i in range(n)]])
        for sh in (fast, slow):
            sh.note_readers(flat, np.array([who]), np.array([who]))
    elif kind == "write":
        _, who, at = op
        flat = np.array([[who // NTHREADS * SIZE + at]])
        for sh in (fast, slow):
            sh.set_writer(flat, np.array([who]))
    elif kind == "store":  # a checked st.shared: the first clashing byte, or none
        _, width, rows = op
        me = np.array([t for t, _ in rows])
        flat = (me // NTHREADS * SIZE + np.array([a // width * width for _, a in rows]))[:, None] \
            + np.arange(width)
        if slow.in_flight and (slow.pending[flat] != 0).any():
            return  # another fault, checked before the race records
        got = _fault(lambda fail: fast.write(flat, np.zeros(flat.shape, np.uint8), me, fail))
        assert got == _store_race(slow, flat, me)
        if not got:
            slow.set_writer(flat, me)
    elif kind == "release":  # an mbarrier wait: the arrivals of one phase per CTA
        _, ctas, (a, b), one_range, seed = op
        by_cta, released = {}, {}
        rng = np.random.default_rng(seed)
        for c in ctas:
            who = np.zeros(NTHREADS, bool)
            if one_range:
                who[min(a, b): max(a, b) + 1] = True
            else:
                who[rng.random(NTHREADS) < 0.7] = True
                who[a] = True
            by_cta[c] = c  # one mbarrier per CTA, its id the CTA's
            # when they arrived (together, or one a tick later): at any time so far,
            # and accesses after it stay unordered
            at = rng.integers(1, fast.clock + 1) + (rng.random(NTHREADS) < 0.1)
            released[c] = np.where(who, np.minimum(at, fast.clock), 0)
        for sh in (fast, slow):
            _release(SimpleNamespace(shared=sh, nthreads=NTHREADS), dict(by_cta), released)
    elif kind == "tick":
        for sh in (fast, slow):
            sh.clock += 1
    elif kind == "sync":
        mask = np.zeros(NCTA, bool)
        mask[op[1]] = True
        for sh in (fast, slow):
            sh.sync(mask)
    else:  # may an async copy by one thread per CTA overwrite this range?
        _, ctas, chunk, n, t = op
        ctas = np.sort(np.array(ctas))
        lo, hi = chunk * CHUNK, min(SIZE, (chunk + n) * CHUNK)
        mine = ctas * NTHREADS + t
        answers = [bulk.range_clear(sh, ctas, mine, lo, hi, None) for sh in (fast, slow)]
        assert answers[0] == answers[1]


def _store_race(sh: SharedMemory, flat: np.ndarray, me: np.ndarray) -> str:
    """The race fault of a store by threads ``me`` to ``flat``, from the per-byte
    records: a byte another thread wrote or read (first row, then first byte)."""
    writer, rmin, rmax = sh.writer[flat], sh.rmin[flat], sh.rmax[flat]
    read = rmax >= 0
    for i, j in zip(*np.nonzero(((writer >= 0) & (writer != me[:, None])) | (
            read & ((rmin != me[:, None]) | (rmax != me[:, None]))))):
        other = int(writer[i, j]) if writer[i, j] >= 0 else int(rmin[i, j])
        if other == int(me[i]):
            other = int(rmax[i, j])
        return (f"{i} shared memory race write of {sh._where(flat[i, j])} also accessed by "
                f"thread {other % NTHREADS} without a bar.sync between")
    return ""


def _fault(call: Callable[[Callable[[int, str, str], None]], None]) -> str:
    """The fault ``call(fail)`` reports, or ""."""
    def fail(i: int, what: str, text: str) -> None:
        raise AssertionError(f"{i} {what} {text}")
    try:
        call(fail)
    except AssertionError as err:
        return str(err)
    return ""


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=14))
def test_logged_reads_give_the_per_byte_records(ops: list[tuple]) -> None:
    fast, slow = (SharedMemory(NCTA, NTHREADS, SIZE, races=True) for _ in range(2))
    for op in ops:
        _apply(fast, slow, op)
        _assert_same(fast, slow)
    fast.log.resolve()
    assert not fast.log


def test_an_epoch_drops_the_reads_it_clears_unresolved() -> None:
    """The pipelined case: consumers' operand reads, all of whose readers arrive on the
    stage's mbarrier, are never written into the per-byte records; where one reader
    has not arrived, the rows sharing its bytes are written and kept."""
    chunks = np.arange(4, 12)
    blocks = np.unique((chunks * CHUNK) // DIRTY_BLOCK)
    for arrivals, kept in ((256, False), (255, True)):
        sh = SharedMemory(NCTA, NTHREADS, SIZE, races=True)
        ctas = np.arange(NCTA)
        for g in range(2):
            first = ctas * NTHREADS + 128 * g
            sh.log.add(ctas, chunks, blocks, first, first + 127)
        arrived = np.zeros(NTHREADS, bool)
        arrived[:arrivals] = True
        _release(SimpleNamespace(shared=sh, nthreads=NTHREADS), {0: 0}, {0: arrived})
        # CTA 0's rows left the log; the other CTAs' rows wait in it
        assert [e.first.tolist() for e in sh.log.entries] == [[256, 512], [384, 640]]
        assert sh.dirty_blocks[0].tolist() == [False, kept, kept] + [False] * 5
        first, last = (a.reshape(NCTA, SIZE)[0, 64:192] for a in (sh.rmin_code + np.iinfo(
            np.int32).max, sh.rmax_code - 1))  # the raw records' ids, log unresolved
        assert (first == (0 if kept else np.iinfo(np.int32).max)).all()
        assert (last == (255 if kept else -1)).all()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("read"), cta_sets, chunk_sets, st.booleans()),
    st.tuples(st.just("commit"), st.lists(st.integers(0, 2 * NCTA - 1), min_size=1,
                                          unique=True)),
    st.tuples(st.just("wait"), st.lists(st.integers(0, 2 * NCTA - 1), min_size=1, unique=True),
              st.integers(0, 2)),
    st.tuples(st.just("ask"), cta_sets, st.integers(0, SIZE - 1), st.integers(1, SIZE))),
    max_size=20))
def test_wgmma_groups_count_their_readers_per_byte(ops: list[tuple]) -> None:
    """Reader counts of groups in flight against counts kept per byte, group by group."""
    rec = WgmmaGroups(NCTA, SIZE, 2 * NCTA)  # two warpgroups per CTA
    want = np.zeros(NCTA * SIZE, np.int64)
    open_: dict[int, list[np.ndarray]] = {}
    done: dict[int, list[list[np.ndarray]]] = {}
    for op in ops:
        if op[0] == "read":
            _, ctas, chunks, second = op
            ctas, chunks = np.array(ctas), np.sort(np.array(chunks))
            groups = ctas * 2 + second
            local = (chunks[:, None] * CHUNK + np.arange(CHUNK)).ravel()
            flat = ctas[:, None] * SIZE + local[None, :]
            if len(ctas) % 2:
                rec.read_chunks(groups, ctas, chunks)
            else:
                rec.read(groups, flat)
            for g, row in zip(groups.tolist(), flat):
                open_.setdefault(g, []).append(row)
                np.add.at(want, row, 1)
        elif op[0] == "commit":
            rec.commit(np.array(op[1]))
            for g in op[1]:
                done.setdefault(g, []).append(open_.pop(g, []))
        elif op[0] == "wait":
            rec.wait(np.array(op[1]), op[2])
            for g in op[1]:
                while len(done.get(g, [])) > op[2]:
                    for row in done[g].pop(0):
                        np.add.at(want, row, -1)
        else:
            _, ctas, lo, n = op
            hi = min(SIZE, lo + n)
            busy = want.reshape(NCTA, SIZE)[ctas, lo:hi].any()
            assert rec.overlaps(np.array(ctas), lo, hi) or not busy
        np.testing.assert_array_equal(rec.busy, want)
        assert rec.reading == int(want.sum())
