"""The specified binary64 log against a scalar transcription of its steps (Python floats
are IEEE binary64, integers exact) and against ``decimal``; special values."""

from __future__ import annotations

import math
import struct
from decimal import Decimal, localcontext

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.numerics.transcendental.log64 import LG, LN2_HI, LN2_LO, log_f64_specified


def scalar_log(x: float) -> float:
    """Steps 1-5 with branches for the special values."""
    if math.isnan(x):
        bits = struct.unpack("<Q", struct.pack("<d", x))[0] | 0x0008000000000000
        return struct.unpack("<d", struct.pack("<Q", bits))[0]
    if x == 0:
        return -math.inf
    if x < 0:
        return math.nan
    if x == math.inf:
        return x
    b = 0
    if x < 2.0**-1022:
        x, b = x * 2.0**54, -54
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    h = bits >> 32
    i = ((h & 0xFFFFF) + 0x95F64) & 0x100000
    m_bits = (((h & 0xFFFFF) | (i ^ 0x3FF00000)) << 32) | (bits & 0xFFFFFFFF)
    m = struct.unpack("<d", struct.pack("<Q", m_bits))[0]
    k = float((h >> 20) - 1023 + (i >> 20) + b)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    odd = z * (LG[0] + w * (LG[2] + w * (LG[4] + w * LG[6])))
    even = w * (LG[1] + w * (LG[3] + w * LG[5]))
    q = (0.5 * f) * f
    return k * LN2_HI - ((q - (s * (q + (odd + even)) + k * LN2_LO)) - f)


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


SPECIALS = [0.0, -0.0, math.inf, -math.inf, 1.0, 2.0, 0.5, 5e-324, 2.0**-1022, 1e-310,
            math.sqrt(2), math.sqrt(0.5), 1.0 + 2.0**-52, 1.0 - 2.0**-53, 1.7976931348623157e308]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 4, allow_nan=False, width=64)
                | st.floats(allow_nan=False, width=64) | st.sampled_from(SPECIALS),
                min_size=1, max_size=40))
def test_the_vector_algorithm_is_the_scalar_one(xs: list[float]) -> None:
    assert bits(log_f64_specified(np.array(xs))) == bits(np.array([scalar_log(v) for v in xs]))


def test_special_values() -> None:
    got = log_f64_specified(np.array([0.0, -0.0, np.inf, -np.inf, -1.0, 1.0, np.e]))
    assert got[0] == got[1] == -np.inf and got[2] == np.inf
    assert got[3].view(np.uint64) == got[4].view(np.uint64) == 0x7FF8000000000000
    assert got[5] == 0.0 and not np.signbit(got[5]) and got[6] == 1.0
    signalling = np.array([0xFFF0000000000123], np.uint64).view(np.float64)
    assert log_f64_specified(signalling).view(np.uint64)[0] == 0xFFF8000000000123
    assert log_f64_specified(np.float64(2.0)).shape == ()


def test_within_one_ulp_of_log() -> None:
    rng = np.random.default_rng(9)
    xs = np.concatenate([2.0 ** rng.uniform(-1074, 1023, 200), rng.uniform(0.5, 2, 200),
                         1 + rng.uniform(-1e-3, 1e-3, 50), 1 + 2.0 ** rng.uniform(-52, -10, 50)])
    for x, got in zip(xs.tolist(), log_f64_specified(xs).tolist()):
        with localcontext() as ctx:
            ctx.prec = 60
            exact = Decimal(x).ln()
        if exact != 0:
            assert float(abs(Decimal(got) - exact) / Decimal(math.ulp(float(exact)))) <= 1.0, x
