"""Per-target limits (CUDA C++ Programming Guide, "Compute Capabilities": maximum shared
memory per thread block) and the placement of shared buffers."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tessera.arch.limits import STATIC_SHARED_LIMIT, TARGETS, place_shared, shared_limit


def test_per_block_shared_memory_of_each_target() -> None:
    assert STATIC_SHARED_LIMIT == 49152
    assert {t: shared_limit(t) for t in TARGETS} == {
        "sm_80": 166912, "sm_86": 101376, "sm_89": 101376, "sm_90a": 232448}


def test_place_shared_by_hand() -> None:
    offsets, total = place_shared([("bars", 64, 8), ("a", 16384, 1024), ("bars", 64, 8),
                                   ("cnt", 4, 4), ("b", 100, 128)])
    assert offsets == {"bars": 0, "a": 1024, "cnt": 17408, "b": 17536}
    assert total == 17648  # 17636 rounded up to 16


@given(st.lists(st.tuples(st.integers(1, 5000), st.sampled_from([4, 8, 16, 128, 1024])),
                min_size=1, max_size=8))
def test_buffers_are_aligned_in_order_and_disjoint(buffers: list[tuple[int, int]]) -> None:
    named = [(f"b{k}", size, align) for k, (size, align) in enumerate(buffers)]
    offsets, total = place_shared(named)
    spans = [(offsets[name], offsets[name] + size) for name, size, _ in named]
    assert all(offsets[name] % align == 0 for name, _, align in named)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    assert total % 16 == 0 and spans[-1][1] <= total < spans[-1][1] + 16
