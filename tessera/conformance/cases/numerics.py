"""Conversion rules, one family per format: round to nearest with ties to even at every
boundary, one rounding from float64, overflow (saturation or infinity), NaN, and
subnormal ties; integer and e8m0 conversion; stochastic rounding.

The expected values come from ``reference.FORMATS`` (the written format definitions)
and exact ``Fraction`` rounding.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from tessera.conformance.reference import FORMATS, Format, mismatch, same_values
from tessera.conformance.registry import register

SPEC_RNE = "decisions.md Numerics: round to nearest, ties to even; numerics.md Conversion"
SPEC_SAT = "decisions.md Numerics: fp8/fp6/fp4 saturate (PTX satfinite); numerics.md Formats"


def _convert(x: np.ndarray, name: str) -> np.ndarray:
    from tessera.numerics import convert

    return np.asarray(convert(x, name))


def _check(x: np.ndarray, name: str, want: list[float]) -> None:
    got = _convert(x, name)
    assert str(got.dtype) == str(np.dtype(FORMATS[name].np_type)), got.dtype
    assert same_values(got, np.array(want)).all(), mismatch(x, got, np.array(want))


def _starts(fmt: Format) -> list[Fraction]:
    """Values whose upper neighbour is checked: all of a narrow format; for a wide one
    the subnormals' first and last 16 and both ends of a few binades (the smallest,
    around 1, the largest), each binade boundary included."""
    top = Fraction(fmt.max)
    if fmt.emax - fmt.emin <= 30 and fmt.precision <= 4:
        binades = range(fmt.emin, fmt.emax + 1)
        per = 2 ** (fmt.precision - 1)  # every value of each binade
    else:
        binades = [fmt.emin, fmt.emin + 1, -2, -1, 0, 1, fmt.emax - 1, fmt.emax]
        per = 16
    tiny = fmt.min_subnormal
    sub = 2 ** (fmt.precision - 1)
    starts = {k * tiny for k in [*range(min(per, sub)), *range(max(0, sub - per), sub)]}
    for e in binades:
        q = fmt.ulp(Fraction(2) ** e)
        starts |= {Fraction(2) ** e + k * q for k in range(per)}
        starts |= {Fraction(2) ** (e + 1) - k * q for k in range(1, per + 1)}
    return sorted(v for v in starts if 0 <= v < top)


def _midpoints(fmt: Format) -> list[Fraction]:
    mids = [v + fmt.ulp(v) / 2 for v in _starts(fmt)]
    return mids + [-m for m in mids]


def ties(fmt: Format) -> Any:
    def run(ctx: Any) -> None:
        mids = _midpoints(fmt)
        want = [fmt.round(m) for m in mids]
        # every midpoint has an even and an odd neighbour: the even one must win
        for m, w in zip(mids, want):
            q = fmt.ulp(abs(m))
            assert (Fraction(abs(w)) / q) % 2 == 0, (m, w)
        for container in (np.float64, np.float32):
            x = np.array([float(m) for m in mids], container)
            assert all(Fraction(float(v)) == m for v, m in zip(x, mids))  # exact ties
            _check(x, fmt.name, want)

    run.__doc__ = (f"Every midpoint between adjacent {fmt.name} values (f32 and f64 inputs) "
                   "rounds to the neighbour with the even significand.")
    return run


def near_ties(fmt: Format) -> Any:
    def run(ctx: Any) -> None:
        mids = [m for m in _midpoints(fmt) if m != 0]
        x = np.array([float(m) for m in mids])
        for direction in (np.inf, -np.inf):
            near = np.nextafter(x, direction)
            _check(near, fmt.name, [fmt.round(Fraction(float(v))) for v in near])

    run.__doc__ = (f"float64 values one ulp beside each {fmt.name} midpoint round to the "
                   "nearer neighbour: one rounding, never two (via float32).")
    return run


def overflow(fmt: Format) -> Any:
    def run(ctx: Any) -> None:
        top = Fraction(fmt.max)
        half = fmt.ulp(top) / 2
        x = [float(top + half / 2), -float(top + half / 2), float(top + half),
             float(top * 3), math.inf, -math.inf, 1e300]
        expect_big = fmt.max if fmt.saturate else math.inf
        want = [fmt.max, -fmt.max, expect_big, expect_big, expect_big, -expect_big,
                expect_big]
        assert [fmt.round(v) for v in x] == want  # the reference states the rule
        _check(np.array(x), fmt.name, want)

    kind = "saturates to the largest finite value" if fmt.saturate else "becomes infinity"
    run.__doc__ = (f"Past the tie above {fmt.name}'s largest finite value ({fmt.max:g}), a "
                   f"conversion {kind}; below it, it rounds down to the largest finite.")
    return run


def nan_rule(fmt: Format) -> Any:
    def run(ctx: Any) -> None:
        x = np.array([math.nan, -math.nan], np.float32)
        got = _convert(x, fmt.name).astype(np.float64)
        if fmt.nan:
            assert np.isnan(got).all(), got
        else:
            assert (got == fmt.max).all(), got  # PTX: no NaN encoding gives +max

    run.__doc__ = (f"NaN converts to NaN in {fmt.name}" if fmt.nan else
                   f"{fmt.name} has no NaN: NaN converts to +{fmt.max:g} (PTX satfinite)")
    return run


def subnormal(fmt: Format) -> Any:
    def run(ctx: Any) -> None:
        tiny = fmt.min_subnormal
        x = [tiny / 2, -tiny / 2, tiny * 3 / 2, tiny * 5 / 2, tiny / 3, -tiny / 3,
             tiny * Fraction(7, 4)]
        want = [0.0, -0.0, float(tiny * 2), float(tiny * 2), 0.0, -0.0, float(tiny * 2)]
        _check(np.array([float(v) for v in x]), fmt.name, want)
        got = _convert(np.array([-float(tiny / 2)]), fmt.name).astype(np.float64)
        assert np.signbit(got[0]), "a negative value rounding to zero keeps its sign"

    run.__doc__ = (f"Ties at {fmt.name}'s smallest subnormal ({float(fmt.min_subnormal):g}) "
                   "go to even (0 or 2 ulps); zero keeps the sign.")
    return run


FAMILIES = [("ties", ties, SPEC_RNE), ("near-ties", near_ties, SPEC_RNE),
            ("overflow", overflow, SPEC_SAT), ("nan", nan_rule, SPEC_SAT),
            ("subnormal", subnormal, SPEC_RNE)]
for _name, _fmt in FORMATS.items():
    for _kind, _make, _spec in FAMILIES:
        register(f"numerics.{_kind}.{_name}", _make(_fmt), spec=_spec)


def _int8(ctx: Any) -> None:
    """To int8: round half to even, saturate to [-128, 127], NaN to 0."""
    x = np.array([2.5, 3.5, -2.5, -3.5, 0.5, 1.5, 126.5, 127.5, 300.0, -1e9, np.inf,
                  -np.inf, np.nan])
    want = [2, 4, -2, -4, 0, 2, 126, 127, 127, -128, 127, -128, 0]
    got = _convert(x, "int8")
    assert got.dtype == np.int8 and got.tolist() == want, got.tolist()


def _e8m0(ctx: Any) -> None:
    """To e8m0 (powers of two): nearest, ties to the even encoding, saturating at
    2^-127 and 2^127; zero gives 2^-127, negative values and NaN give NaN."""
    x = np.array([1.5, 3.0, 6.0, 1.25, 1.75, 0.0, 1e-300, 1e300, np.inf, -1.0, np.nan])
    # 1.5: between 2^0 (code 127, odd) and 2^1 (code 128, even) -> 2; 3.0: 2^1 (128) and
    # 2^2 (129) -> 2; 6.0: 2^2 (129) and 2^3 (130) -> 8
    want = [2.0, 2.0, 8.0, 1.0, 2.0, 2.0**-127, 2.0**-127, 2.0**127, 2.0**127, np.nan, np.nan]
    got = _convert(x, "e8m0")
    assert same_values(got, np.array(want)).all(), mismatch(x, got, np.array(want))


def _stochastic(ctx: Any) -> None:
    """Stochastic rounding picks one of the two bf16 neighbours, the upper with
    probability (x - lo)/(hi - lo), reproducibly for a seed (Philox-4x32-10)."""
    import tessera as ts

    x = np.full(4000, 1.0 + 2.0**-9, np.float32)  # a quarter of the way to 1 + 2^-7
    policy = ts.bf16 @ ts.stochastic_round(seed=11)
    r1 = np.asarray(ts.cast(x, policy)).astype(np.float64)
    r2 = np.asarray(ts.cast(x, policy)).astype(np.float64)
    assert np.array_equal(r1, r2), "same seed, same bits"
    assert set(np.unique(r1)) <= {1.0, 1.0 + 2.0**-7}
    up = float(np.mean(r1 > 1.0))
    # binomial(4000, 1/4): 5 standard deviations is 0.034
    assert abs(up - 0.25) < 0.035, up
    r3 = np.asarray(ts.cast(x, ts.bf16 @ ts.stochastic_round(seed=12))).astype(np.float64)
    assert not np.array_equal(r1, r3), "another seed, other bits"


register("numerics.convert.int8", _int8,
         spec="numerics.md Conversion: to the int formats, half to even, saturate, NaN to 0")
register("numerics.convert.e8m0", _e8m0, spec="numerics.md The e8m0 scale format")
register("numerics.stochastic.bf16", _stochastic,
         spec="decisions.md Numerics: stochastic rounding is seeded Philox; numerics.md "
              "Stochastic rounding")
