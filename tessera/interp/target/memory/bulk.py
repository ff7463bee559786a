"""Fast paths of the shared-memory records for bulk accesses.

A TMA box lands on every byte of one range ``[lo, hi)`` of its CTA's shared memory (in
swizzled order), and a ``wgmma`` operand reads whole aligned 16-byte chunks (the
swizzles of PTX ISA sec. 9.7.15.5.1 permute 16-byte units). Their records (the per-byte
arrays of :class:`~tessera.interp.target.memory.state.SharedMemory`) can then be read
and updated a row slice or a 16-byte chunk at a time instead of one index per byte,
much as compute-sanitizer-style tools keep shadow state per word.

Every fast path here only *proves that nothing is wrong*: when one of its checks might
fail it returns False and the caller takes the per-byte path, which finds and reports
the same first fault (message, instruction and thread) as before. The updates they
make are those of the per-byte path; ``tests/interp/target/test_bulk.py`` compares both.
"""

from __future__ import annotations

import numpy as np

from tessera.interp.target.memory.state import (
    CHUNK,
    DIRTY_BLOCK,
    SharedMemory,
    code_first,
    code_last,
    put_chunks,
    take_chunks,
)


def distinct(ctas: np.ndarray) -> bool:
    """Whether no CTA occurs twice in ``ctas`` (row updates then never collide)."""
    return len(ctas) < 2 or bool((np.diff(ctas) > 0).all()) or \
        len(np.unique(ctas)) == len(ctas)


def rows(ctas: np.ndarray) -> slice | np.ndarray:
    """A row index for ``ctas``: a slice (views, no copies) when they are consecutive."""
    first = int(ctas[0])
    if (np.diff(ctas) == 1).all():
        return slice(first, first + len(ctas))
    return ctas


def covered_range(local: np.ndarray) -> tuple[int, int] | None:
    """``(lo, hi)`` when the byte offsets ``local`` are each of ``lo .. hi - 1`` once."""
    lo, hi = int(local.min()), int(local.max()) + 1
    if hi - lo != local.size:
        return None
    seen = np.zeros(hi - lo, bool)
    seen[local - lo] = True
    return (lo, hi) if seen.all() else None


def covered_chunks(local: np.ndarray, size: int) -> np.ndarray | None:
    """The sorted 16-byte chunk numbers when the byte offsets ``local`` (inside
    ``size`` bytes) are every byte of those chunks, each once."""
    if size % CHUNK or local.size % CHUNK or local.min() < 0 or local.max() >= size:
        return None
    # sorted, the bytes are whole chunks each once exactly when every 16 of them are
    # one aligned chunk in order (a repeated byte or chunk breaks a run of 16)
    return chunks_in_order(np.sort(local, axis=None))


def chunks_in_order(local: np.ndarray) -> np.ndarray | None:
    """The chunk number of every 16 bytes of ``local`` when each 16 are one aligned
    16-byte chunk, bytes in order, else None."""
    if local.size % CHUNK:
        return None
    rows = local.reshape(-1, CHUNK)
    first = rows[:, 0]
    if (first % CHUNK).any() or not (rows - first[:, None] == np.arange(CHUNK)).all():
        return None
    return first // CHUNK


def _grid(sh: SharedMemory, a: np.ndarray) -> np.ndarray:
    return a.reshape(sh.ncta, sh.size)


# -- ranges: one [lo, hi) per row, distinct CTAs ------------------------------------------


def range_clear(sh: SharedMemory, ctas: np.ndarray, threads: np.ndarray, lo: int, hi: int,
                busy: np.ndarray | None) -> bool:
    """Whether an async copy by ``threads`` over bytes ``lo .. hi - 1`` of ``ctas`` meets
    no other thread's read since the last ``bar.sync``, no ``wgmma`` operand in use
    (``busy``: the readers per byte, None when none) and no copy in flight."""
    r = rows(ctas)
    if sh.races and sh.accessed[ctas].any():
        sh.log.resolve(sh.cta_mask(ctas), lo, hi)  # the logged reads that may meet it
    # blocks never flagged dirty hold no reader: most refills of a stage meet none
    if sh.races and sh.dirty_blocks[r, lo // DIRTY_BLOCK: -(-hi // DIRTY_BLOCK)].any():
        first, last = _grid(sh, sh.rmin_code)[r, lo:hi], _grid(sh, sh.rmax_code)[r, lo:hi]
        if ((last > 0) & ((first != code_first(threads)[:, None]) |
                          (last != code_last(threads)[:, None]))).any():
            return False
    if busy is not None and _grid(sh, busy)[r, lo:hi].any():
        return False
    return not (sh.in_flight and _grid(sh, sh.pending)[r, lo:hi].any())


def range_unfenced(sh: SharedMemory, ctas: np.ndarray, lo: int, hi: int) -> bool:
    """Whether a byte of the range holds an ``st.shared`` with no proxy fence since."""
    return bool(sh.unfenced_ctas[ctas].any()) and \
        bool(_grid(sh, sh.unfenced)[rows(ctas), lo:hi].any())


def range_pending(sh: SharedMemory, ctas: np.ndarray, lo: int, hi: int, delta: int) -> None:
    """``delta`` more copies in flight to every byte of the range."""
    _grid(sh, sh.pending)[rows(ctas), lo:hi] += np.int16(delta)
    sh.in_flight += delta * len(ctas) * (hi - lo)


def range_land(sh: SharedMemory, ctas: np.ndarray, lo: int, hi: int) -> None:
    """The records of :meth:`SharedMemory.land` and of ``set_writer(..., None)`` (TMA
    data, ordered by its mbarrier) for the range; the caller stores the data."""
    r = rows(ctas)
    _grid(sh, sh.init)[r, lo:hi] = True
    if sh.unfenced_ctas[ctas].any():  # else no byte of these CTAs awaits a fence
        _grid(sh, sh.unfenced)[r, lo:hi] = False
    # writers lie only in dirty blocks: a range with none holds no writer to clear
    if sh.races and sh.dirty_blocks[r, lo // DIRTY_BLOCK: -(-hi // DIRTY_BLOCK)].any():
        _grid(sh, sh.writer_code)[r, lo:hi] = 0
    if sh.clustered is not None:
        sh.clustered.landed_range(ctas, lo, hi)


# -- chunks: whole 16-byte chunks per row -------------------------------------------------


def chunk_index(sh: SharedMemory, ctas: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """Flat chunk numbers (R, C) of the CTA-local ``chunks`` in each of ``ctas``."""
    return ctas[:, None] * (sh.size // CHUNK) + chunks[None, :]


def chunks_readable(sh: SharedMemory, index: np.ndarray) -> bool:
    """Whether every byte of the chunks is initialised, with no copy in flight to it."""
    if not take_chunks(sh.init, index).all():
        return False
    return not (sh.in_flight and take_chunks(sh.pending, index).any())


def chunks_written(sh: SharedMemory, ctas: np.ndarray, index: np.ndarray,
                   blocks: np.ndarray) -> bool:
    """Whether a byte of the chunks ``index`` (in the dirty ``blocks`` of ``ctas``) holds
    a writer: a store that no barrier has ordered before other threads' accesses yet."""
    if not sh.written[ctas].any() or not sh.dirty_blocks[ctas[:, None], blocks[None, :]].any():
        return False
    return bool(take_chunks(sh.writer_code, index).any())


def chunks_unfenced(sh: SharedMemory, index: np.ndarray) -> bool:
    """Whether a byte of the chunks holds an ``st.shared`` with no proxy fence since."""
    return bool(sh.unfenced_ctas.any()) and bool(take_chunks(sh.unfenced, index).any())


def chunks_add(counts: np.ndarray, index: np.ndarray, delta: int) -> None:
    """``delta`` more per byte of the chunks ``index``, each of them once."""
    flat = index.ravel()
    put_chunks(counts, flat, take_chunks(counts, flat) + counts.dtype.type(delta))


def chunks_readers(sh: SharedMemory, ctas: np.ndarray, index: np.ndarray, blocks: np.ndarray,
                   first: np.ndarray, last: np.ndarray) -> None:
    """:meth:`SharedMemory.note_readers` for distinct ``ctas``: threads ``first[i]`` to
    ``last[i]`` read the chunks ``index[i]``; their dirty ``blocks`` are flagged."""
    sh.accessed[ctas] = True
    sh.has_readers[ctas] = True
    sh.note_who(first, last)
    sh.dirty[ctas[:, None], blocks[None, :]] = True
    for arr, who, pick in zip(sh.readers(), (code_first(first), code_last(last)),
                              (np.minimum, np.maximum)):
        put_chunks(arr, index, pick(take_chunks(arr, index), who[:, None, None]))


__all__ = ["CHUNK", "chunk_index", "chunks_add", "chunks_in_order", "chunks_readable",
           "chunks_readers", "chunks_unfenced", "chunks_written", "covered_chunks",
           "covered_range", "distinct", "range_clear", "range_land", "range_pending",
           "range_unfenced", "rows"]
