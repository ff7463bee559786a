"""Stochastic-rounding seeds are the 64-bit Philox key: every seed in [0, 2**64) is
accepted and used whole; anything else is a PolicyError, never silently wrapped."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.numerics import philox_uint32, stochastic_round_array
from tessera.numerics.formats.stochastic import philox4x32

HERE = os.path.basename(__file__)
LIMIT = 2**64


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, LIMIT - 1))
def test_every_64_bit_seed_is_kept_whole(seed: int) -> None:
    p = ts.bf16 @ ts.stochastic_round(seed=seed)
    assert p.seed == seed
    assert ts.parse_policy(str(p)) == p
    # the key is the seed's two 32-bit halves, low word first (Random123's layout)
    want = philox4x32(np.array([[5, 0, 0, 0]], np.uint32), (seed & 0xFFFFFFFF, seed >> 32))
    assert np.array_equal(philox_uint32(seed, np.array([5])), want)


@settings(max_examples=50, deadline=None)
@given(seed=st.one_of(st.integers(LIMIT, 2**80), st.integers(-(2**70), -1)))
def test_seeds_outside_the_key_range_are_refused(seed: int) -> None:
    for make in (lambda: ts.stochastic_round(seed=seed),
                 lambda: ts.parse_policy(f"bf16 @stochastic_round(seed={seed})"),
                 lambda: ts.Policy(ts.bf16, stochastic_round=True, seed=seed),
                 lambda: stochastic_round_array(np.ones(2), ts.bf16, seed=seed),
                 lambda: philox_uint32(seed, np.arange(2))):
        with pytest.raises(ts.PolicyError) as info:
            make()
        text = str(info.value)
        assert "outside [0, 2**64)" in text and HERE in text, text


@pytest.mark.parametrize("seed", [1.5, 2.0, "7", True, None, np.float64(3)])
def test_non_integer_seeds_are_refused(seed: object) -> None:
    with pytest.raises(ts.PolicyError, match="must be an int"):
        ts.stochastic_round(seed=seed)


def test_top_seed_differs_from_its_wrapped_values() -> None:
    """2**64 - 1 uses both key words: its stream is neither seed 0's nor 2**32 - 1's."""
    x = np.full(64, 1.0 + 2.0**-9)
    top = stochastic_round_array(x, ts.bf16, seed=LIMIT - 1)
    assert not np.array_equal(top, stochastic_round_array(x, ts.bf16, seed=2**32 - 1))
    assert not np.array_equal(top, stochastic_round_array(x, ts.bf16, seed=0))
    assert ts.stochastic_round(seed=np.uint64(LIMIT - 1)).seed == LIMIT - 1
