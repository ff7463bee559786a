"""The bulk fast paths of the shared-memory records (tessera.interp.target.memory.bulk)
against the per-byte path: each record update equals the per-byte one on random
states, and whole kernels (a clean pipelined sm_90a GEMM and planted bugs) give the
same bits and the same faults with the fast paths on and off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tessera.arch.tma import TensorMap, TensorMapDataType, tma_box, tma_box_store
from tessera.interp.target import TargetFault
from tessera.interp.target.memory import async_copy, bulk, bulk_store
from tessera.interp.target.memory import state as state_module
from tessera.interp.target.memory.global_memory import GlobalMemory
from tessera.interp.target.memory.state import SharedMemory, chunk_rows, code_first, code_last
from tests.lower.sm90a import test_pipeline as pipeline

NCTA, NTHREADS, SIZE = 3, 256, 1024


def random_state(seed: int) -> SharedMemory:
    """Shared memory whose records hold random readers, writers, counts and flags."""
    rng = np.random.default_rng(seed)
    sh = SharedMemory(NCTA, NTHREADS, SIZE, races=True)
    n = NCTA * SIZE
    base = np.repeat(np.arange(NCTA) * NTHREADS, SIZE)
    read = rng.random(n) < 0.5
    lo = base + rng.integers(0, NTHREADS, n)
    sh.rmin_code[:] = np.where(read, code_first(lo), 0)  # 0: none
    sh.rmax_code[:] = np.where(read, code_last(np.minimum(lo + rng.integers(0, 130, n),
                                                          base + NTHREADS - 1)), 0)
    sh.writer_code[:] = np.where(rng.random(n) < 0.3,
                                 code_last(base + rng.integers(0, NTHREADS, n)), 0)
    sh.pending[:] = rng.integers(0, 3, n)
    sh.in_flight = int(sh.pending.sum())
    sh.init[:] = rng.random(n) < 0.7
    sh.unfenced[:] = rng.random(n) < 0.2
    sh.unfenced_ctas[:] = True
    sh.accessed[:] = True
    sh.written[:] = True
    sh.has_readers[:] = True
    sh.who_lo[:] = np.arange(NCTA) * NTHREADS
    sh.who_hi[:] = sh.who_lo + NTHREADS - 1
    # records lie only in dirty blocks (what the bulk paths and bar.sync rely on)
    sh.dirty_blocks[:] = ((sh.rmax >= 0) | (sh.writer >= 0)).reshape(NCTA, -1, 64).any(axis=2)
    return sh


def records(sh: SharedMemory) -> list[np.ndarray]:
    return [sh.rmin, sh.rmax, sh.writer, sh.pending, sh.init, sh.unfenced, sh.dirty,
            sh.accessed, sh.who_lo, sh.who_hi, np.array([sh.in_flight])]


def assert_same(a: SharedMemory, b: SharedMemory) -> None:
    for x, y in zip(records(a), records(b)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("seed", range(4))
def test_chunk_records_equal_the_per_byte_ones(seed: int) -> None:
    fast, slow = random_state(seed), random_state(seed)
    rng = np.random.default_rng(100 + seed)
    ctas = np.array([2, 0])
    chunks = np.sort(rng.choice(SIZE // bulk.CHUNK, 20, replace=False))
    local = (chunks[:, None] * bulk.CHUNK + np.arange(bulk.CHUNK)).ravel()
    rng.shuffle(local)  # any order of the chunks' bytes
    assert np.array_equal(bulk.covered_chunks(local, SIZE), chunks)
    flat = ctas[:, None] * SIZE + local[None, :]
    index = bulk.chunk_index(fast, ctas, chunks)
    assert bulk.chunks_readable(fast, index) == bool(
        slow.init[flat].all() and not slow.pending[flat].any())
    assert bulk.chunks_unfenced(fast, index) == bool(slow.unfenced[flat].any())
    who = ctas * NTHREADS + 3
    blocks = np.unique(local // 64)
    bulk.chunks_readers(fast, ctas, index, blocks, who, who + 127)
    slow.note_readers(flat, who, who + 127, mark=False)
    slow.dirty[ctas[:, None], blocks[None, :]] = True
    assert_same(fast, slow)
    busy_fast, busy_slow = fast.pending.copy(), slow.pending.copy()
    bulk.chunks_add(busy_fast, index, 1)
    np.add.at(busy_slow, flat.ravel(), np.int16(1))
    np.testing.assert_array_equal(busy_fast, busy_slow)


@pytest.mark.parametrize("ctas", [[0, 1], [2, 0], [1]])
def test_range_records_equal_the_per_byte_ones(ctas: list[int]) -> None:
    fast, slow = random_state(7), random_state(7)
    rows = np.array(ctas)
    lo, hi = 256, 768
    where = np.random.default_rng(8).permutation(np.arange(lo, hi))
    assert bulk.covered_range(where) == (lo, hi)
    assert bulk.covered_range(where[1:]) is None
    flat = rows[:, None] * SIZE + where[None, :]
    threads = rows * NTHREADS + 5
    mine = threads[:, None]
    clash = (slow.rmax[flat] >= 0) & ((slow.rmin[flat] != mine) | (slow.rmax[flat] != mine))
    assert bulk.range_clear(fast, rows, threads, lo, hi, None) == bool(
        not clash.any() and not slow.pending[flat].any())
    assert bulk.range_unfenced(fast, rows, lo, hi) == bool(slow.unfenced[flat].any())
    bulk.range_pending(fast, rows, lo, hi, 1)
    slow.add_pending(flat, 1)
    assert_same(fast, slow)
    bulk.range_pending(fast, rows, lo, hi, -1)
    bulk.range_land(fast, rows, lo, hi)
    slow.add_pending(flat, -1)
    slow.land(flat, np.zeros(flat.shape, np.uint8))
    slow.set_writer(flat, None)
    fast.data[flat] = 0
    assert_same(fast, slow)
    np.testing.assert_array_equal(fast.data, slow.data)


def _no_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "covered_chunks", lambda local, size: None)
    monkeypatch.setattr(bulk, "covered_range", lambda where: None)
    monkeypatch.setattr(bulk, "chunks_in_order", lambda local: None)
    monkeypatch.setattr(state_module, "chunk_rows", lambda flat: None)


def _outcome(plant: Callable[[Any], None] | None) -> tuple[str, Any, bytes]:
    """Run the 2-stage pipelined GEMM (``plant`` edits its kernel): the fault's text
    and location, and the output's bytes."""
    m, n, k = 128, 128, 512
    ops = pipeline.operands(m, n, k)
    compiled = pipeline.compile_gemm(m, n, k, (128, 128, 64), {"num_stages": 2})
    if plant is not None:
        plant(compiled.kernel)
    try:
        pipeline.run(compiled, *ops)
    except TargetFault as err:
        return str(err), (err.loc.file, err.loc.line), ops[2].tobytes()
    return "", None, ops[2].tobytes()


def _drop_consumer_waits(fn: Any) -> None:
    pipeline.drop_wait(fn, 1)


def _drop_producer_waits(fn: Any) -> None:
    pipeline.drop_wait(fn, 0)


def _drop_wgmma_wait(fn: Any) -> None:
    (main,) = pipeline.loops(pipeline.split(fn).regions[1].block)
    body = main.regions[0].block
    body.instrs[:] = [i for i in body.instrs if not isinstance(i.op, pipeline.WgmmaWait)]


@pytest.mark.parametrize("plant", [None, _drop_consumer_waits, _drop_producer_waits,
                                   _drop_wgmma_wait])
def test_kernels_give_the_same_bits_and_faults_with_and_without_bulk_paths(
        plant: Callable[[Any], None] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _outcome(plant)
    _no_bulk(monkeypatch)
    slow = _outcome(plant)
    assert fast == slow
    assert (fast[0] == "") == (plant is None)


@pytest.mark.parametrize("seed", range(3))
def test_chunk_rows_readers_equal_the_per_byte_ones(seed: int) -> None:
    """ldmatrix-like reads: rows of one aligned 16-byte chunk, repeated across threads."""
    fast, slow = random_state(seed), random_state(seed)
    rng = np.random.default_rng(200 + seed)
    me = np.sort(rng.choice(NCTA * NTHREADS, 90, replace=False))
    chunk = rng.integers(0, 6, len(me)) + (me // NTHREADS) * (SIZE // bulk.CHUNK)
    flat = chunk[:, None] * bulk.CHUNK + np.arange(bulk.CHUNK)
    rows = chunk_rows(flat)
    assert np.array_equal(rows, chunk) and len(np.unique(rows)) < len(rows)
    assert chunk_rows(flat[:, ::-1]) is None and chunk_rows(flat + 1) is None
    fast.note_readers(flat, me, me, rows=rows)
    slow.note_readers(flat, me, me)
    assert_same(fast, slow)
    assert fast.scratch is not None
    assert (fast.scratch[0] == 0).all() and (fast.scratch[1] == 0).all()  # no reader


def _fault(sh: SharedMemory, flat: np.ndarray, me: np.ndarray) -> str:
    def fail(i: int, what: str, text: str) -> None:
        raise AssertionError(f"{i} {what} {text}")
    try:
        sh.check_read(flat, me, fail)
    except AssertionError as err:
        return str(err)
    return ""


def test_chunk_rows_check_read_reports_the_per_byte_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    me = np.arange(0, 40, 2)
    flat = (me % 7)[:, None] * bulk.CHUNK + np.arange(bulk.CHUNK)
    found = []
    for seed in range(6):
        fast = _fault(random_state(seed), flat, me)
        with monkeypatch.context() as patch:
            patch.setattr(state_module, "chunk_rows", lambda flat: None)
            slow = _fault(random_state(seed), flat, me)
        assert fast == slow
        found.append(fast)
    assert all(found)  # the random states hold poison, copies in flight and races


def test_chunk_rows_land_and_writer_equal_the_per_byte_ones() -> None:
    """cp.async of 16 bytes landing: data, initialisation, fences and the writer."""
    fast, slow = random_state(11), random_state(11)
    rng = np.random.default_rng(12)
    chunk = rng.choice(NCTA * SIZE // bulk.CHUNK, 50, replace=False)
    flat = chunk[:, None] * bulk.CHUNK + np.arange(bulk.CHUNK)
    who = (chunk * bulk.CHUNK // SIZE) * NTHREADS + rng.integers(0, NTHREADS, len(chunk))
    data = rng.integers(0, 256, flat.shape).astype(np.uint8)
    fast.land(flat, data, chunk)
    fast.set_writer(flat, who, chunk)
    slow.land(flat, data)
    slow.set_writer(flat, who)
    assert_same(fast, slow)
    np.testing.assert_array_equal(fast.data, slow.data)
    np.testing.assert_array_equal(fast.writer, slow.writer)


@settings(max_examples=120, deadline=None)
@given(st.sampled_from([(TensorMapDataType.BFLOAT16, 2), (TensorMapDataType.FLOAT32, 4),
                        (TensorMapDataType.UINT8, 1)]),
       st.integers(1, 4), st.integers(1, 40), st.integers(0, 3), st.integers(1, 12),
       st.integers(1, 3), st.lists(st.tuples(st.integers(-1, 3), st.sampled_from([0, 0, 0, 3]),
                                             st.integers(-5, 40)), min_size=1, max_size=5))
@example((TensorMapDataType.BFLOAT16, 2), 1, 10, 1, 4, 1, [(1, 0, 2), (0, 0, 5)])
def test_tma_box_rows_equal_the_element_gather(dtype: tuple, wide: int, rows: int, pad: int,
                                               high: int, stride: int,
                                               coords: list[tuple[int, int, int]]) -> None:
    """The interpreter's row copies of TMA boxes against tessera.arch.tma.tma_box on
    random 2-D maps (dense and padded rows, partial and outside boxes, strides)."""
    kind, size = dtype
    box = (16 // size * wide, high)
    inner = box[0] * (1 + pad % 2) + 16 // size * (pad // 2)  # row pitch: whole rows or not
    tmap = TensorMap(kind, 0, (inner, rows), (inner * size,), box,
                     element_strides=(1, stride))
    buffer = np.random.default_rng(rows).integers(0, 256, inner * rows * size).astype(np.uint8)
    at = np.array([(k * box[0] + off, c) for k, off, c in coords], np.int64)  # mostly aligned
    want = tma_box(tmap, buffer, at)
    np.testing.assert_array_equal(async_copy.tma_box(tmap, buffer, at), want)


@settings(max_examples=120, deadline=None)
@given(st.sampled_from([(TensorMapDataType.BFLOAT16, 2), (TensorMapDataType.FLOAT32, 4),
                        (TensorMapDataType.UINT8, 1)]),
       st.integers(1, 4), st.integers(1, 40), st.integers(0, 3), st.integers(1, 12),
       st.integers(1, 3), st.lists(st.tuples(st.integers(-1, 3), st.sampled_from([0, 0, 0, 3]),
                                             st.integers(-5, 40)), min_size=1, max_size=3,
                                   unique_by=lambda c: (c[0], c[2])))
@example((TensorMapDataType.BFLOAT16, 2), 1, 10, 1, 4, 1, [(1, 0, 2), (0, 0, 5)])
def test_tma_store_rows_equal_the_element_scatter(dtype: tuple, wide: int, rows: int, pad: int,
                                                  high: int, stride: int,
                                                  coords: list[tuple[int, int, int]]) -> None:
    """TMA store boxes written a row at a time against tessera.arch.tma.tma_box_store."""
    kind, size = dtype
    box = (16 // size * wide, high)
    inner = box[0] * (1 + pad % 2) + 16 // size * (pad // 2)
    tmap = TensorMap(kind, 0, (inner, rows), (inner * size,), box,
                     element_strides=(1, stride))
    at = np.array([(k * box[0] + off, c) for k, off, c in coords], np.int64)
    data = np.random.default_rng(high).integers(0, 256, (len(at), tmap.box_bytes)).astype(
        np.uint8)
    fast, slow = (np.zeros(inner * rows * size, np.uint8) for _ in range(2))
    bulk_store._store(tmap, fast, at, data)
    tma_box_store(tmap, slow, at, data)
    np.testing.assert_array_equal(fast, slow)


@pytest.mark.parametrize("width", [1, 2, 4, 8, 16])
def test_word_row_stores_equal_the_per_byte_ones(width: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """st.shared of aligned words (rows of one element of a width-byte view): records,
    bytes and the first fault as the per-byte store gives them."""
    found = []
    for seed in range(6):  # seeds 4 and 5: fresh memories, where every store succeeds
        rng = np.random.default_rng(300 + seed)
        me = np.sort(rng.choice(NCTA * NTHREADS, 40, replace=False))
        words = rng.integers(0, SIZE // width, len(me))
        flat = ((me // NTHREADS) * SIZE + words * width)[:, None] + np.arange(width)
        data = rng.integers(0, 256, flat.shape).astype(np.uint8)
        outcomes = []
        # words found from the rows' first bytes (rows known consecutive), found by a
        # pass over the bytes, and none (the per-byte path)
        for mode in ("consecutive", "rows", "bytes"):
            sh = random_state(seed) if seed < 4 else SharedMemory(NCTA, NTHREADS, SIZE, True)
            sh.in_flight = 0 if seed % 2 else sh.in_flight  # past the copies, or not
            with monkeypatch.context() as patch:
                if mode == "bytes":
                    patch.setattr(state_module, "word_rows", lambda *args: None)
                else:
                    assert state_module.word_rows(flat, SIZE) is not None
                fault = ""
                try:
                    sh.write(flat, data, me, lambda i, w, t: (_ for _ in ()).throw(
                        AssertionError(f"{i} {w} {t}")), consecutive=mode == "consecutive")
                except AssertionError as err:
                    fault = str(err)
            outcomes.append((fault, sh))
        (slow_fault, slow) = outcomes[-1]
        for fast_fault, fast in outcomes[:-1]:
            assert fast_fault == slow_fault
            assert_same(fast, slow)
        found.append(slow_fault)
        np.testing.assert_array_equal(fast.data, slow.data)
    assert any(found[:4]) and not any(found[4:])  # the random records hold races


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([None, 16]), st.integers(0, 2**31),
       st.booleans())
def test_global_word_reads_equal_the_byte_gather(nbytes: int, align: int | None, seed: int,
                                                 two: bool) -> None:
    """GlobalMemory.read of aligned words (one element of a word view each) against
    the bytes at each address, over one or two buffers of ragged sizes."""
    rng = np.random.default_rng(seed)
    glob = GlobalMemory()
    bufs = [rng.integers(0, 256, int(rng.integers(1, 40)) * 16 + 8, dtype=np.uint8)
            for _ in range(2 if two else 1)]
    bases = [glob.add(b, f"buffer {i}") for i, b in enumerate(bufs)]
    step = align or nbytes
    which = rng.integers(0, len(bufs), 50)
    offs = np.array([rng.integers(0, (bufs[w].size - nbytes) // step + 1) * step
                     for w in which], np.int64)
    addr = np.array(bases, np.int64)[which] + offs

    def fail(k: int, what: str, text: str) -> None:
        raise AssertionError(f"{what}: {text}")

    got = glob.read(addr.astype(np.uint64), nbytes, fail, align)
    want = np.stack([bufs[w][o:o + nbytes] for w, o in zip(which, offs)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(10))
def test_tma_store_box_reads_equal_the_chunk_rows(seed: int) -> None:
    """A TMA store's source read on row slices of its box (bulk_store.box_read): where
    it finds nothing wrong, the per-byte path finds nothing either and leaves the same
    records; otherwise it records nothing and the per-byte path decides. Random
    records (seeds 0-3) and clean ones, written by the storing threads or by others."""
    rng = np.random.default_rng(400 + seed)
    ctas = np.sort(rng.choice(NCTA, int(rng.integers(1, NCTA + 1)), replace=False))
    me = ctas * NTHREADS + rng.integers(0, NTHREADS, len(ctas))
    first, count = int(rng.integers(0, SIZE // 128)), int(rng.integers(1, 4))
    lo, hi = 128 * first, min(SIZE, 128 * (first + count))
    chunks = rng.permutation(np.arange(lo, hi, bulk.CHUNK))  # a swizzle moves chunks
    where = (chunks[:, None] + np.arange(bulk.CHUNK)).ravel()
    flat = ctas[:, None] * SIZE + where[None, :]

    def make() -> SharedMemory:
        sh = random_state(seed) if seed < 4 else SharedMemory(NCTA, NTHREADS, SIZE, True)
        if seed >= 4:
            sh.init[:] = True
            if seed % 3:  # the storing threads (1) or their neighbours (2, a race) wrote
                sh.set_writer(flat, me + seed % 3 - 1)
                sh.unfenced[:] = False
        return sh
    fast, slow = make(), make()
    took = bulk_store.box_read(fast, ctas, me, (lo, hi))

    def fail(i: int, what: str, text: str) -> None:
        raise AssertionError(f"{i} {what} {text}")
    fault = ""
    try:
        if slow.unfenced_ctas[ctas].any() and slow.unfenced[flat].any():
            fail(0, "missing proxy fence", "")
        bulk_store._check_read(slow, flat, where, me, fail)
    except AssertionError as err:
        fault = str(err)
    if took:
        assert fault == ""
        assert_same(fast, slow)
    else:  # nothing recorded
        assert_same(fast, make())
    assert took == (seed >= 4 and seed % 3 != 2)  # clean memories take the row slices
    assert ("shared memory race" in fault) == (seed >= 4 and seed % 3 == 2)
