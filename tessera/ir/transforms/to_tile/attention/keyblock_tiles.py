"""The tiles of attention passing over key blocks in the exact Target program: how many
query rows, keys per block, and columns of ``V`` one program takes.

Over rows of more than 512 keys the exact kernel is three passes over key blocks
(:mod:`tessera.ir.transforms.to_tile.attention.keyblocks`), each computing every block's scores
again, with exact accumulators of 176 bytes per element in shared memory
(:mod:`tessera.lower.exact.mma`): one buffer for the three passes' scores (their
loops run one after the other, :mod:`tessera.lower.exact.chains`) and one for
``P @ V``. A program that takes fewer than all of ``V``'s columns computes all the
scores again for the other columns, so the choice goes to a whole head of columns
first, then to more query rows, then to longer key blocks, within the registers and
the target's shared memory.
"""

from __future__ import annotations

#: at most this many query rows, and at least this many keys per block (fewer, down to
#: 8, where a block of 16 would load more than KEY_BLOCK_LOADED elements of a long head)
KEY_BLOCK_TILE = (8, 16)
#: the most scores of a key block: two accumulators per thread. ptxas fits the three
#: passes' code in 84-113 registers; four per thread need about 150-170 and spill
#: under the exact kernels' .maxnreg of 128, for no measured gain
KEY_BLOCK_ELEMENTS = 256
#: the most elements of a block of keys or values (block x their row length) the
#: kernel loads into registers before staging them for an ``mma``: 16 per thread. With
#: 32 per thread (64 keys of 64, a ragged last block) ptxas spills under the .maxnreg
#: of 128
KEY_BLOCK_LOADED = 2048
#: the most elements of ``P @ V``'s output tile: two accumulators per thread. Where
#: the schedule gives ``P @ V`` a kernel of its own (a head of 256 columns), four per
#: thread spill under the .maxnreg of 128
PV_ELEMENTS = 256
#: bytes of one exact accumulator (tessera.lower.exact.mma: 21 words and a flag word)
ACC_ELEMENT_BYTES = 176
#: shared bytes per query row of a key-block kernel besides its accumulators and
#: staged tiles: the carried row statistics staged per block and the exact sums'
#: accumulators (a bound on what tessera.lower allocates)
ROW_BYTES = 512


def key_block_bytes(rows: int, block: int, depth: int, cols: int) -> int:
    """A bound on the shared memory of a kernel passing over key blocks of ``rows`` x
    ``block`` scores, of ``depth`` (Q's and K's last dim) and a ``P @ V`` tile of
    ``cols`` columns (0: a row softmax): the accumulators of one score chain (the
    three passes' share a buffer) and of ``P @ V``, the block of keys staged for
    ``Q K^T`` (one buffer for the three passes), the block's f64 terms and ``P``,
    each pass's query tile, and the rows' statistics."""
    return (ACC_ELEMENT_BYTES * rows * (block + cols) + 4 * block * depth
            + 16 * rows * block + 3 * 4 * rows * depth + ROW_BYTES * rows)


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def key_block_tile(rows: int, keys: int, depth: int, values: int,
                   shared: int) -> tuple[int, int, int]:
    """``(query rows, keys per block, columns of V)`` for attention over ``rows`` x
    ``keys`` scores of ``depth`` with ``values`` columns of ``V`` (0: a row softmax of
    the scores, no ``P @ V``), all powers of two: the most columns of ``V`` (a whole
    head where ``P @ V``'s tile stays within :data:`PV_ELEMENTS`), then the most query
    rows (up to ``KEY_BLOCK_TILE[0]``), then the longest block of keys (at most
    ``keys`` rounded up, at least ``KEY_BLOCK_TILE[1]``, 8 for heads of 256) with at most
    :data:`KEY_BLOCK_ELEMENTS` scores and :data:`KEY_BLOCK_LOADED` elements of keys or
    values loaded per block, whose kernel stays within ``shared`` bytes
    (:func:`key_block_bytes`). Longer blocks mean fewer trips of each pass and more
    threads busy (16 keys under 8 rows keep a quarter of the CTA's threads working).
    Where nothing fits, the smallest tile (the lowering then says what does not)."""
    # (a head of 256 loads 16 x 256 keys in 16 blocks of 16: 8 keys keep the load at
    # KEY_BLOCK_LOADED; the three passes' sums need at least 5 columns of a block)
    least = max(min(KEY_BLOCK_TILE[1], KEY_BLOCK_LOADED // _pow2(depth)), 8)
    best: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None
    r = min(_pow2(rows), KEY_BLOCK_TILE[0])
    while r >= 1:
        cols = min(_pow2(values), PV_ELEMENTS // r) if values else 0
        loaded = KEY_BLOCK_LOADED // _pow2(max(depth, cols))
        block = max(min(KEY_BLOCK_ELEMENTS // r, loaded, _pow2(keys)), least)
        while block > least and key_block_bytes(r, block, depth, cols) > shared:
            block //= 2
        if key_block_bytes(r, block, depth, cols) <= shared:
            rank = (cols, r, block)
            if best is None or rank > best[0]:
                best = (rank, (r, block, cols))
        r //= 2
    if best is None:
        r = min(_pow2(rows), KEY_BLOCK_TILE[0])
        return r, least, min(_pow2(values), least) if values else 0
    return best[1]


__all__ = ["ACC_ELEMENT_BYTES", "KEY_BLOCK_ELEMENTS", "KEY_BLOCK_LOADED", "KEY_BLOCK_TILE",
           "PV_ELEMENTS", "key_block_bytes", "key_block_tile"]
