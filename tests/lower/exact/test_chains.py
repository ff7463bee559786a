"""Exact accumulator chains sharing shared-memory buffers
(tessera.lower.exact.chains): chains whose live ranges (intervals of top-level
instructions) are disjoint take one buffer, the size of the largest; chains live at
once, even for one instruction, never share; and a kernel's live ranges come from where
its chain values are defined and used, loops counting as a whole."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.interp.tile.wide import possibly_exact
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.types import TensorType
from tessera.lower.exact.chains import chains, live_ranges, share


class _Chain:
    """A stand-in for a chain's representative value."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"chain{self.n}"


def test_disjoint_chains_share_one_buffer_of_the_largest_size() -> None:
    a, b, c = _Chain(0), _Chain(1), _Chain(2)
    slots = share({a: (0, 2), b: (3, 3), c: (4, 9)}, {a: 100, b: 300, c: 200})  # type: ignore[dict-item]
    assert len(slots) == 1 and slots[0].chains == [a, b, c] and slots[0].size == 300


def test_chains_that_meet_at_one_instruction_stay_apart() -> None:
    score, pv, later = _Chain(0), _Chain(1), _Chain(2)
    # P @ V's chain starts inside the loop where the last scores' chain lives
    slots = share({score: (2, 2), pv: (2, 5), later: (6, 7)},  # type: ignore[dict-item]
                  {score: 90, pv: 20, later: 80})
    assert [s.chains for s in slots] == [[score, later], [pv]]
    assert [s.size for s in slots] == [90, 20]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 4), st.integers(1, 9)),
                min_size=1, max_size=8))
def test_no_two_chains_of_a_buffer_overlap(spans: list[tuple[int, int, int]]) -> None:
    roots = [_Chain(n) for n in range(len(spans))]
    ranges = {r: (lo, lo + length) for r, (lo, length, _) in zip(roots, spans)}
    sizes = {r: size for r, (_, _, size) in zip(roots, spans)}
    slots = share(ranges, sizes)  # type: ignore[arg-type]
    assert sorted(r.n for s in slots for r in s.chains) == list(range(len(roots)))
    for s in slots:
        assert s.size == max(sizes[r] for r in s.chains)
        for x, y in zip(s.chains, s.chains[1:]):
            assert ranges[x][1] < ranges[y][0]
    # never more buffers than chains live at one instruction (interval graphs)
    most = max(sum(lo <= t <= hi for lo, hi in ranges.values()) for t in range(20))
    assert len(slots) == most


def test_the_three_passes_scores_share_a_buffer_and_p_v_keeps_its_own() -> None:
    """The kernel of attention over key blocks: three top-level loops, each with a
    score chain; P @ V's chain lives in the third and after it."""

    def attention(q, k, v):  # type: ignore[no-untyped-def]
        return op.matmul(op.softmax(op.matmul(q, op.transpose(k, (0, 2, 1))), axis=-1), v)

    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(1, 2, 4), (1, 600, 4),
                                                               (1, 600, 4)]]
    (kernel,) = ts.jit(attention).lower(*args).target("sm_80").tile.module.functions.values()
    members = chains(kernel)
    ranges = live_ranges(kernel, members, possibly_exact(kernel))
    loops = [n for n, i in enumerate(kernel.body.instrs) if isinstance(i.op, tile_ir.For)]
    assert len(loops) == 3 and len(ranges) == 4
    spans = sorted(ranges.values())
    assert spans[:3] == [(loops[0], loops[0]), (loops[1], loops[1]), (loops[2], loops[2])]
    assert spans[3][0] == loops[2] and spans[3][1] > loops[2]  # rounded after the loop
    sizes = {r: 176 * int(np.prod(r.type.shape)) for r in ranges
             if isinstance(r.type, TensorType)}
    slots = share(ranges, sizes)
    assert sorted(len(s.chains) for s in slots) == [1, 3]
