"""Atomic updates apply one at a time in arrival order: the integer updates applied as
running values (all at once, or an address at a time) give the bits and the old values
of one update after another."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.interp.target.memory import atomics


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
