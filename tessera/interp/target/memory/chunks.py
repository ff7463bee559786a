"""Shared memory's per-byte records a 16-byte chunk at a time: one row copy per chunk
instead of an index per byte, for rows that are whole aligned chunks (``ldmatrix``
rows, 16-byte copies, ``wgmma`` operands); and the summaries that let the race checks
skip what holds no record (:class:`RecordSummaries`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

try:  # NumPy's switch of its transparent-huge-page advice (private, so optional)
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # pragma: no cover - other NumPy versions
    _set_madvise_hugepage = None

#: bytes per chunk of the chunked gathers and scatters of the per-byte records
CHUNK = 16
#: bytes per flag of :attr:`RecordSummaries.dirty_blocks`
DIRTY_BLOCK = 64
_BIG = np.int32(np.iinfo(np.int32).max)


@contextmanager
def small_pages() -> Iterator[None]:
    """Allocate the arrays made inside with ordinary 4 KiB pages. NumPy advises huge
    pages for arrays of 4 MiB or more, so the first touch of any byte zeroes a whole
    2 MiB page; records of which a launch touches a few bytes per CTA (mbarrier
    slots, the race records of the bytes its CTAs access) would cost a pass over all
    of their memory."""
    if _set_madvise_hugepage is None:  # pragma: no cover
        yield
        return
    before = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(before)


def take_chunks(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The 16-byte chunks ``index`` (any shape) of the per-byte record ``a``: shape
    ``index.shape + (CHUNK,)`` (one row copy per chunk, several times faster than an
    index per byte)."""
    return np.take(a.reshape(-1, CHUNK), index, axis=0)


def put_chunks(a: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:
    """Store ``values`` (``index.shape + (CHUNK,)``) into the chunks ``index`` of ``a``
    through a view with one void element per chunk (NumPy's row assignment is several
    times slower)."""
    whole = np.dtype((np.void, CHUNK * a.itemsize))
    a.view(whole)[index.ravel()] = np.ascontiguousarray(values, a.dtype).view(whole).ravel()


def chunk_rows(flat: np.ndarray) -> np.ndarray | None:
    """The chunk numbers of ``flat`` when each of its rows is one aligned 16-byte chunk,
    bytes in order (an ``ldmatrix`` row, a 16-byte copy), else None."""
    if flat.ndim != 2 or flat.shape[1] != CHUNK:
        return None
    return word_rows(flat, CHUNK)


def add_at(target: np.ndarray, index: np.ndarray, delta: int | np.ndarray) -> None:
    """``target[index] += delta`` with repeated indices counted (``np.add.at``), called
    the way NumPy runs fast: a flat index and a value of the target's type."""
    value = np.asarray(delta, target.dtype)
    np.add.at(target, np.ravel(index), value if value.ndim == 0 else np.ravel(value))


def word_rows(flat: np.ndarray, size: int, consecutive: bool = False) -> np.ndarray | None:
    """The word numbers of ``flat`` (M, W) when each row is one aligned word of W
    bytes (W a power of two up to 16 dividing ``size``, the bytes per CTA), bytes in
    order: a store's rows, each then one element of a W-byte view. ``consecutive``:
    the caller knows each row to be consecutive bytes (no pass over every byte)."""
    if flat.ndim != 2 or not flat.size:
        return None
    width = flat.shape[1]
    if width > CHUNK or width & (width - 1) or size % width:
        return None
    first = flat[:, 0]
    if (first % width).any() or not (
            consecutive or (flat - first[:, None] == np.arange(width)).all()):
        return None
    return first // width


def take_rows(a: np.ndarray, rows: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """``a[flat]`` for the words ``rows`` of ``flat`` (from :func:`word_rows`)."""
    return np.take(a.reshape(-1, flat.shape[1]), rows, axis=0)


def put_rows(a: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """Store ``values`` (M, W) into the words ``rows`` (from :func:`word_rows`) of the
    per-byte record ``a``, one void element per word (a later row wins on repeats, as
    a per-byte store)."""
    whole = np.dtype((np.void, values.shape[1] * a.itemsize))
    a.view(whole)[rows] = np.ascontiguousarray(values, a.dtype).view(whole).ravel()


class RecordSummaries:
    """What may hold a race record in the shared memory of CTAs of ``nthreads``
    threads and ``size`` bytes each: per CTA and block of ``DIRTY_BLOCK`` bytes
    (``dirty_blocks``), and per CTA the lowest and highest thread a record names
    (``who_lo``, ``who_hi``; global ids); and the records as thread ids."""

    size: int
    nthreads: int
    dirty_blocks: np.ndarray
    who_lo: np.ndarray
    who_hi: np.ndarray
    rmin_code: np.ndarray
    rmax_code: np.ndarray
    writer_code: np.ndarray
    log: Any  # :class:`~.reads.ReadLog`

    def readers(self) -> tuple[np.ndarray, np.ndarray]:
        """``rmin_code`` and ``rmax_code`` with every logged read in them."""
        self.log.resolve()
        return self.rmin_code, self.rmax_code

    @property
    def rmin(self) -> np.ndarray:
        """A copy: the lowest reading thread (global id) of each byte; int32 max: none."""
        return self.readers()[0] + _BIG

    @property
    def rmax(self) -> np.ndarray:
        """A copy: the highest reading thread (global id) of each byte; -1: none."""
        return self.readers()[1] - np.int32(1)

    @property
    def writer(self) -> np.ndarray:
        """A copy: the thread (global id) whose store or atomic (its code negated) each
        byte holds; -1: none."""
        return np.abs(self.writer_code) - np.int32(1)

    @property
    def dirty(self) -> np.ndarray:
        """Per CTA and ``DIRTY_BLOCK`` bytes: whether a byte may hold a writer or a reader."""
        self.log.resolve()
        return self.dirty_blocks

    def in_dirty(self, flat: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """Per row of ``flat`` (M, nbytes): whether a byte of it lies in a dirty block
        (``rows`` from :func:`word_rows`: each row one aligned word, in one block)."""
        idx = flat.reshape(len(flat), -1)
        if self.size % DIRTY_BLOCK == 0 and rows is not None:
            return self.dirty_blocks.reshape(-1)[idx[:, 0] // DIRTY_BLOCK]
        if self.size % DIRTY_BLOCK == 0:
            hit = self.dirty_blocks.reshape(-1)[idx // DIRTY_BLOCK]
        else:
            hit = self.dirty_blocks[idx // self.size, idx % self.size // DIRTY_BLOCK]
        return hit.any(axis=1)

    def mark(self, flat: np.ndarray) -> None:
        """Flag the blocks of the flat byte indices ``flat`` as dirty. Rows of at most
        ``DIRTY_BLOCK`` consecutive bytes (every checked access) lie in at most two
        blocks: their first and last bytes find both."""
        if flat.ndim == 2 and len(flat) == 1 and flat.shape[1] <= DIRTY_BLOCK:
            for end in (int(flat[0, 0]), int(flat[0, -1])):  # one row: its two ends' blocks
                self.dirty_blocks[end // self.size, end % self.size // DIRTY_BLOCK] = True
            return
        if flat.ndim == 2 and flat.shape[1] <= DIRTY_BLOCK and \
                (flat[:, -1] - flat[:, 0] == flat.shape[1] - 1).all():
            flat = np.concatenate([flat[:, 0], flat[:, -1]])
        idx = flat.ravel()
        if self.size % DIRTY_BLOCK == 0:
            self.dirty_blocks.reshape(-1)[idx // DIRTY_BLOCK] = True
        else:
            self.dirty_blocks[idx // self.size, idx % self.size // DIRTY_BLOCK] = True

    def note_who(self, first: np.ndarray, last: np.ndarray) -> None:
        """Widen the bounds :attr:`who_lo` / :attr:`who_hi` of the CTAs of threads
        ``first`` (global ids) to take in ``first[i] .. last[i]``."""
        cta = first // self.nthreads
        if len(cta) == 1:  # one thread: scalars (ufunc.at is slow)
            c = cta[0]
            self.who_lo[c] = min(self.who_lo[c], first[0])
            self.who_hi[c] = max(self.who_hi[c], np.asarray(last).ravel()[0])
            return
        np.minimum.at(self.who_lo, cta, first.astype(np.int32))
        np.maximum.at(self.who_hi, cta, np.asarray(last).astype(np.int32))


__all__ = ["CHUNK", "DIRTY_BLOCK", "RecordSummaries", "add_at", "chunk_rows", "put_chunks",
           "put_rows", "take_chunks", "take_rows", "word_rows"]
