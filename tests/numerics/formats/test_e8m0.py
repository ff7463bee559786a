"""Conversion to e8m0 (OCP MX v1.0's scale format) against a reference written from the
rule in docs/numerics.md, and against ml_dtypes where the two rules agree.

The reference works on exact Fractions: the E8M0 values are 2**k, k = -127..127
(encoding k + 127); round to nearest picks the nearest value, a tie the even encoding;
toward zero the largest value <= x (else 2**-127), toward +inf the smallest value >= x
(else 2**127). Zeros give 2**-127, +inf gives 2**127; NaN, negative values and -inf
give NaN (encoding 0xFF).
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.numerics import convert, to_e8m0

POWERS = [Fraction(2) ** k for k in range(-127, 128)]  # index = encoding
NAN = 0xFF


def reference_code(x: float, rounding: str) -> int:
    """The E8M0 encoding of ``x`` by the documented rule, computed exactly."""
    if math.isnan(x) or x < 0:
        return NAN
    if x == 0:
        return 0
    if math.isinf(x):
        return 254
    q = Fraction(x)
    hi = bisect.bisect_left(POWERS, q)  # POWERS[hi - 1] < q <= POWERS[hi]
    if hi < len(POWERS) and POWERS[hi] == q:
        return hi
    lo_code, hi_code = hi - 1, hi
    if lo_code < 0:  # below 2**-127: every mode saturates to the smallest value
        return 0
    if hi_code > 254:  # above 2**127
        return 254
    if rounding == "rz":
        return lo_code
    if rounding == "rp":
        return hi_code
    below, above = q - POWERS[lo_code], POWERS[hi_code] - q
    if below != above:
        return lo_code if below < above else hi_code
    return lo_code if lo_code % 2 == 0 else hi_code


def codes(arr: np.ndarray) -> np.ndarray:
    return np.asarray(arr).view(np.uint8)


def ties_and_neighbours() -> st.SearchStrategy[float]:
    """Midpoints 1.5 * 2**k and their float64 neighbours, where rounding is decided."""
    k = st.integers(-135, 130)
    step = st.sampled_from([-1, 0, 1])
    return st.builds(lambda k, s: float(np.nextafter(1.5 * 2.0**k, np.inf * s) if s
                                        else 1.5 * 2.0**k), k, step)


VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                   st.floats(2.0**-140, 2.0**140, width=64), ties_and_neighbours(),
                   st.integers(-130, 130).map(lambda k: 2.0**k))


@settings(max_examples=400, deadline=None)
@given(x=VALUES, rounding=st.sampled_from(["rn", "rz", "rp"]))
def test_to_e8m0_follows_the_rule(x: float, rounding: str) -> None:
    assert int(codes(to_e8m0(np.array([x]), rounding))[0]) == reference_code(x, rounding)


@settings(max_examples=200, deadline=None)
@given(xs=st.lists(VALUES, min_size=1, max_size=20))
def test_convert_and_cast_round_to_nearest_even(xs: list[float]) -> None:
    want = np.array([reference_code(x, "rn") for x in xs], np.uint8)
    x64 = np.array(xs)
    assert np.array_equal(codes(convert(x64, ts.e8m0)), want)
    # float32 inputs (exactly representable ones) go the same way
    with np.errstate(over="ignore"):
        x32 = x64.astype(np.float32)
    fits = (x32.astype(np.float64) == x64) | np.isnan(x64)
    assert np.array_equal(codes(convert(x32, "e8m0"))[fits], want[fits])
    # the graph operator and tensor construction use the same conversion
    assert np.array_equal(codes(np.asarray(ts.cast(x64, ts.e8m0))), want)
    assert np.array_equal(codes(ts.as_tensor(x64, "ue8m0").numpy()), want)


def test_every_value_converts_to_itself() -> None:
    values = np.ldexp(1.0, np.arange(-127, 128))
    for rounding in ("rn", "rz", "rp"):
        assert np.array_equal(codes(to_e8m0(values, rounding)), np.arange(255))
    assert np.array_equal(convert(values, "e8m0").astype(np.float64), values)


def test_documented_special_values() -> None:
    x = np.array([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 2.0**-200, 2.0**200, 3.0, 0.75])
    got = convert(x, "e8m0").astype(np.float64)
    want = [2.0**-127, 2.0**-127, np.nan, np.nan, 2.0**127, np.nan, 2.0**-127, 2.0**127,
            2.0, 0.5]  # 3 and 0.75 are ties: to the even encodings 128 (2.0) and 126 (0.5)
    assert np.array_equal(got, want, equal_nan=True)


@settings(max_examples=300, deadline=None)
@given(x=st.floats(2.0**-126, 2.0**127, width=32))
def test_agrees_with_ml_dtypes_except_at_ties(x: float) -> None:
    """ml_dtypes 0.6 rounds e8m0 ties up; every other positive normal float32 agrees
    (subnormal inputs: the next test)."""
    x32 = np.array([x], np.float32)
    ours = int(codes(convert(x32, "e8m0"))[0])
    theirs = int(codes(x32.astype(ml_dtypes.float8_e8m0fnu))[0])
    mant, exp = np.frexp(x32.astype(np.float64)[0])
    if mant * 2 == 1.5:  # a tie between encodings lower and lower + 1
        lower = int(exp) - 1 + 127
        assert theirs == lower + 1  # ml_dtypes: up
        assert ours == (lower if lower % 2 == 0 else lower + 1)  # tessera: the even one
    else:
        assert ours == theirs


@settings(max_examples=200, deadline=None)
@given(x=st.floats(2.0**-127, 2.0**-126, exclude_max=True, width=32))
def test_subnormal_inputs_round_to_the_nearer_power(x: float) -> None:
    """Between 2**-127 (code 0) and 2**-126 (code 1) lie float32 subnormals; the nearer
    power wins, the tie 1.5 * 2**-127 goes to the even code 0. (ml_dtypes 0.6 gives
    code 1 to subnormals well below the tie, e.g. 1.004 * 2**-127, so it is no
    reference here.)"""
    want = 0 if x <= 1.5 * 2.0**-127 else 1
    assert int(codes(convert(np.array([x], np.float32), "e8m0"))[0]) == want


def test_every_tie_against_ml_dtypes() -> None:
    """At the 254 midpoints 1.5 * 2**k, ml_dtypes takes 2**(k+1); tessera the even code."""
    k = np.arange(-127, 127)
    ties = (1.5 * np.ldexp(1.0, k)).astype(np.float32)
    lower = k + 127
    assert np.array_equal(codes(ties.astype(ml_dtypes.float8_e8m0fnu)), lower + 1)
    assert np.array_equal(codes(convert(ties, "e8m0")), np.where(lower % 2 == 0, lower,
                                                                 lower + 1))


def test_ml_dtypes_differs_on_zero_negatives_and_infinity() -> None:
    """The documented differences: ml_dtypes gives NaN where tessera saturates."""
    x = np.array([0.0, np.inf], np.float32)
    assert np.isnan(x.astype(ml_dtypes.float8_e8m0fnu).astype(np.float64)).all()
    assert list(convert(x, "e8m0").astype(np.float64)) == [2.0**-127, 2.0**127]


def test_round_toward_zero_is_the_mx_scale_rule() -> None:
    """OCP MX v1.0's shared scale: 2**(floor(log2(amax)) - emax_elem), emax 8 for e4m3."""
    amax = np.abs(np.random.default_rng(1).standard_normal(500)) * 2.0 ** 40
    scale = to_e8m0(amax / 2.0**8, "rz").astype(np.float64)
    assert np.array_equal(scale, np.ldexp(1.0, np.floor(np.log2(amax)).astype(int) - 8))


def test_unknown_rounding_is_an_argument_error() -> None:
    with pytest.raises(ts.ArgumentError, match="rn, rz, rp"):
        to_e8m0(np.ones(2), "rne")


PTX_CVT = """.version 8.7
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 p) {{
  .reg .f32 %f<2>; .reg .b16 %rs<2>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  ld.global.f32 %f1, [%rd1];
  cvt.{mode}.satfinite.ue8m0x2.f32 %rs1, %f1, %f1;
  st.global.b16 [%rd1], %rs1;
  ret;
}}
"""


@pytest.mark.parametrize(("mode", "legal"), [("rz", True), ("rp", True), ("rn", False)])
def test_ptx_has_only_rz_and_rp_for_ue8m0(mode: str, legal: bool, tmp_path: object) -> None:
    """The docs' claim, checked with ptxas: PTX converts f32 to ue8m0x2 only with .rz/.rp."""
    import subprocess
    from pathlib import Path

    from tessera.backend.ptx.driver.assemble import ToolchainMissing, find_ptxas

    try:
        ptxas = find_ptxas()
    except ToolchainMissing:
        pytest.skip("ptxas from the nvidia-cuda-nvcc wheel is not installed")
    src = Path(str(tmp_path)) / "cvt.ptx"
    src.write_text(PTX_CVT.format(mode=mode))
    out = subprocess.run([ptxas, "-arch=sm_100a", str(src), "-o", str(src.with_suffix(".o"))],
                         capture_output=True, text=True, timeout=120)
    if "sm_100a" in out.stderr and "not defined" in out.stderr:
        pytest.skip("this ptxas predates sm_100a")
    assert (out.returncode == 0) == legal, out.stderr
    if not legal:
        assert "Illegal rounding modifier" in out.stderr
