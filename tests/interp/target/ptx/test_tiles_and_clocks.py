"""Warp instructions whose lanes name different member masks (cooperative groups'
tiles), and the clocks: ``%clock64``, ``%clock`` and ``%clock_hi`` count the PTX
instructions a thread has executed, the same in every run."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interp.target.state import TargetFault
from tessera.ir.text.ptx import PtxSyntaxError
from tests.interp.target.ptx.harness import run_elementwise

rng = np.random.default_rng(7)
A = rng.integers(0, 1000, 64, dtype=np.uint64).astype(np.uint32)
B = rng.integers(0, 1000, 64, dtype=np.uint64).astype(np.uint32)
#: each tile of ``size`` lanes names its own lanes as the member mask
TILE = """
    and.b32 %e, %t, 31;
    and.b32 %e, %e, {align};
    mov.u32 %d, {ones};
    shl.b32 %e, %d, %e;
"""


def tiled(size: int, body: str) -> str:
    ones = (1 << size) - 1
    return TILE.format(align=32 - size, ones=ones) + body


def tiles(x: np.ndarray, size: int) -> np.ndarray:
    return x.astype(np.int64).reshape(-1, size)


@pytest.mark.parametrize("size", [2, 8, 16])
def test_tiles_reduce_vote_and_shuffle_among_themselves(size: int) -> None:
    """Each tile of ``size`` lanes reduces, votes, matches and shuffles with its own
    member mask, as ``cg::tiled_partition<size>`` compiles."""
    part = tiles(A, size)
    got = run_elementwise(tiled(size, "redux.sync.add.u32 %d, %a, %e;"), A, B, B)
    np.testing.assert_array_equal(got, np.repeat(part.sum(axis=1), size))
    got = run_elementwise(tiled(size, "redux.sync.max.u32 %d, %a, %e;"), A, B, B)
    np.testing.assert_array_equal(got, np.repeat(part.max(axis=1), size))
    vote = tiled(size, "setp.lt.u32 %p, %a, %b;\n    vote.sync.ballot.b32 %d, %p, %e;")
    lanes = np.arange(64) % 32
    bits = ((A < B).astype(np.int64) << lanes)
    want = np.repeat(tiles(bits, size).sum(axis=1), size)
    np.testing.assert_array_equal(run_elementwise(vote, A, B, B), want)
    every = tiled(size, "setp.lt.u32 %p, %a, %b;\n    vote.sync.all.pred %q, %p, %e;\n"
                  "    selp.u32 %d, 1, 0, %q;")
    want = np.repeat(tiles(A < B, size).all(axis=1), size)
    np.testing.assert_array_equal(run_elementwise(every, A, B, B), want)
    low = A % 3
    match = tiled(size, "match.any.sync.b32 %d, %a, %e;")
    want = [sum(1 << (j % 32) for j in range(i - i % size, i - i % size + size)
                if low[j] == low[i]) for i in range(64)]
    np.testing.assert_array_equal(run_elementwise(match, low, B, B), want)
    shfl = tiled(size, f"shfl.sync.bfly.b32 %d, %a, 1, {32 - size << 8 | 31:#x}, %e;")
    np.testing.assert_array_equal(run_elementwise(shfl, A, B, B), A.reshape(-1, 2)[:, ::-1]
                                  .ravel())


@pytest.mark.parametrize("mask, why", [
    ("mov.u32 %e, 0x0000FFFF;\n    and.b32 %d, %t, 16;\n    setp.ne.u32 %p, %d, 0;\n"
     "    @%p mov.u32 %e, 0x000FFFF0;", "lanes that execute the redux.sync with that mask"),
    ("mov.u32 %e, 0x0000FFFF;", "names member mask 0x0000ffff"),
])
def test_overlapping_or_foreign_masks_are_divergence(mask: str, why: str) -> None:
    """Lanes 16-31 naming lanes 4-19, or naming lanes 0-15 only, leave a member mask
    that the lanes executing with it do not match."""
    with pytest.raises(TargetFault, match=why):
        run_elementwise(mask + "\n    redux.sync.add.u32 %d, %a, %e;", A, B, B)


CLOCKS = """
    mov.u64 %rd6, %clock64;
    setp.lt.u32 %p, %a, %b;
    @%p bra LONG;
    add.u32 %c, %c, 1;
    bra.uni DONE;
LONG:
    add.u32 %c, %c, 1;
    add.u32 %c, %c, 1;
    add.u32 %c, %c, 1;
DONE:
    mov.u64 %rd7, %clock64;
    sub.s64 %rd7, %rd7, %rd6;
    cvt.u32.u64 %d, %rd7;
"""


def test_clock64_counts_the_threads_own_instructions() -> None:
    """Between the two reads a thread runs the first read, ``setp``, ``bra`` and either
    ``add`` and ``bra`` or three ``add``: 5 or 6 instructions, whatever the other
    threads do."""
    got = run_elementwise(CLOCKS, A, B, B)
    np.testing.assert_array_equal(got, np.where(A < B, 6, 5))
    assert (run_elementwise(CLOCKS, A, B, B) == got).all()
    start = run_elementwise("mov.u32 %d, %clock;\n    mov.u32 %e, %clock_hi;\n"
                            "    add.u32 %d, %d, %e;", A, B, B)
    assert len(set(start)) == 1 and 0 < start[0] < 30  # the loads before, no high word


def test_clock64_is_read_by_a_64_bit_mov() -> None:
    with pytest.raises(PtxSyntaxError, match="read by mov of 64 bits only"):
        run_elementwise("mov.u32 %d, %clock64;", A, B, B)
