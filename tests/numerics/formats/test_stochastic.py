"""Philox-4x32-10 known answers and the statistics of stochastic rounding."""

from __future__ import annotations

import numpy as np
import pytest

import tessera.numerics as ts
from tessera.errors import DTypeError
from tessera.numerics.formats.stochastic import philox4x32
from tests.numerics.reference import TABLES

# Random123's published known-answer vectors for philox4x32_10.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize(("counter", "key", "expected"), KAT)
def test_philox_known_answers(counter: tuple[int, ...], key: tuple[int, int],
                              expected: tuple[int, ...]) -> None:
    out = philox4x32(np.array([counter], dtype=np.uint32), key)
    assert out.dtype == np.uint32
    assert tuple(int(v) for v in out[0]) == expected


def test_philox_vectorised_matches_one_at_a_time() -> None:
    counters = np.arange(50, dtype=np.uint64) * 7919 + 2**33
    together = ts.philox_uint32(12345, counters)
    assert together.shape == (50, 4)
    for i, c in enumerate(counters.tolist()):
        alone = philox4x32(np.array([[c & 0xFFFFFFFF, c >> 32, 0, 0]], dtype=np.uint32),
                           (12345, 0))
        assert np.array_equal(alone[0], together[i])


def test_philox_words_look_uniform() -> None:
    words = ts.philox_uint32(7, np.arange(200_000)).astype(np.float64).ravel() / 2**32
    n = words.size
    # mean of U(0,1) has sd sqrt(1/12/n); the bound is 6 sd.
    assert abs(words.mean() - 0.5) < 6 * np.sqrt(1 / 12 / n)
    assert abs(np.var(words) - 1 / 12) < 0.001


def _neighbours(x: float, name: str) -> tuple[float, float]:
    vals = np.concatenate([-TABLES[name].values[::-1], TABLES[name].values])
    k = np.searchsorted(vals, x, side="right")
    return float(vals[k - 1]), float(vals[k])


@pytest.mark.parametrize(("x", "name"), [
    (1.0 + 2.0**-9, "bf16"),  # a quarter of the way from 1 to the next bf16
    (0.3, "bf16"),
    (-2.71828, "fp8_e4m3"),
    (1e-3, "fp8_e5m2"),  # in the subnormal range
    (5.1, "fp4_e2m1"),
    (0.1, "fp6_e2m3"),
    (1.0 + 2.0**-12, "tf32"),
    (-3.3, "int8"),
])
def test_unbiased(x: float, name: str) -> None:
    n = 200_000
    xs = np.full(n, x)
    out = ts.sr_round(xs, ts.dtype(name), seed=11).astype(np.float64)
    if name == "int8":
        lo, hi = np.floor(x), np.floor(x) + 1
    else:
        lo, hi = _neighbours(x, name)
    assert set(np.unique(out)) <= {lo, hi}
    p = (x - lo) / (hi - lo)
    sigma = (hi - lo) * np.sqrt(p * (1 - p))
    assert abs(out.mean() - x) < 6 * sigma / np.sqrt(n)


def test_exact_probability_for_dyadic_fraction() -> None:
    # 1 + 2**-9 lies exactly 1/4 of the way up (bf16 spacing at 1 is 2**-7).
    n = 400_000
    up = ts.sr_round(np.full(n, 1.0 + 2.0**-9), ts.bf16, seed=3).astype(np.float64) > 1
    assert abs(up.mean() - 0.25) < 6 * np.sqrt(0.25 * 0.75 / n)


def test_reproducible_and_seed_dependent() -> None:
    x = np.random.default_rng(1).standard_normal(10_000)
    a = ts.sr_round(x, ts.bf16, seed=5)
    b = ts.sr_round(x, ts.bf16, seed=5)
    c = ts.sr_round(x, ts.bf16, seed=6)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    assert np.mean(a.view(np.uint16) != c.view(np.uint16)) > 0.3


def test_counter_offset_shifts_the_stream() -> None:
    x = np.full(100, 0.1)
    whole = ts.sr_round(x, ts.bf16, seed=9)
    tail = ts.sr_round(x[40:], ts.bf16, seed=9, counter_offset=40)
    assert np.array_equal(whole[40:].view(np.uint16), tail.view(np.uint16))


def test_exact_values_never_move() -> None:
    vals = TABLES["fp8_e4m3"].values
    vals = np.concatenate([vals, -vals])
    for seed in range(5):
        out = ts.sr_round(vals, ts.fp8_e4m3, seed=seed).astype(np.float64)
        assert np.array_equal(out, vals)


def test_saturation_and_specials() -> None:
    x = np.array([1e6, -1e6, 450.0, np.inf, np.nan, -0.0, 0.0])
    out = ts.sr_round(x, ts.fp8_e4m3, seed=1).astype(np.float64)
    assert list(out[:4]) == [448.0, -448.0, 448.0, 448.0]
    assert np.isnan(out[4]) and np.signbit(out[5]) and not np.signbit(out[6])
    tiny = ts.sr_round(np.full(1000, -1e-30), ts.bf16, seed=2).astype(np.float64)
    assert np.all(np.signbit(tiny))  # -tiny rounds to -0 or to -min, never +0
    big = ts.sr_round(np.full(1000, 3.4e38), ts.bf16, seed=2).astype(np.float64)
    assert set(np.unique(big)) <= {float(np.float64(ts.bf16.max_finite)), np.inf}


def test_convert_applies_the_policy() -> None:
    pol = ts.bf16 @ ts.stochastic_round(seed=4)
    x = np.full(1000, 1.0 + 2.0**-9)
    out = ts.convert(x, pol)
    assert np.array_equal(out.view(np.uint16),
                          ts.sr_round(x, ts.bf16, seed=4).view(np.uint16))
    assert len(np.unique(out.astype(np.float64))) == 2
    shifted = ts.convert(x, pol, counter_offset=3)
    assert np.array_equal(shifted[:-3].view(np.uint16), out[3:].view(np.uint16))
    z = ts.convert(np.full(100, 0.1 + 0.1j), ts.c64 @ ts.stochastic_round)
    assert z.dtype == np.complex64


def test_unsupported_targets() -> None:
    with pytest.raises(DTypeError):
        ts.sr_round(np.ones(3), ts.e8m0, seed=0)
    with pytest.raises(DTypeError):
        ts.sr_round(np.ones(3), ts.bool_, seed=0)
