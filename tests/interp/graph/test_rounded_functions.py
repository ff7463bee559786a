"""``sin``, ``cos`` and ``pow`` of formats of up to 32 bits give the same bits on every
machine: the float32 nearest the exact value (then the element's rounding), whatever the
platform's float64 library returns within a few ulps. The exact values come from
independent decimal arithmetic: Taylor series with pi from ``decimal``'s own recipe
constants, and ``Decimal.__pow__``."""

from __future__ import annotations

import decimal
from collections.abc import Callable

import numpy as np
import pytest

from tessera.interp.graph import elementwise
from tessera.ir.dialects import graph as graph_ir
from tests.interp.graph.util import run1

F32 = np.float32
#: pi to 110 digits (a published constant), enough to reduce any float32 by 2 pi
PI = decimal.Decimal("3.1415926535897932384626433832795028841971693993751058209749445923"
                     "078164062862089986280348253421170679821480865132823066470938446")


def exact_sin_cos(x: float, fn: str) -> decimal.Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = 100
        r = decimal.Decimal(x).remainder_near(2 * PI)
        term = r if fn == "sin" else decimal.Decimal(1)
        total, n = term, 1 if fn == "sin" else 0
        while abs(term) > decimal.Decimal(10) ** -90:
            term = -term * r * r / ((n + 1) * (n + 2))
            n += 2
            total += term
        return total


def nearest_f32(v: decimal.Decimal) -> np.float32:
    c = F32(float(v))
    cands = [np.nextafter(c, F32(-np.inf)), c, np.nextafter(c, F32(np.inf))]
    return min(cands, key=lambda y: abs(decimal.Decimal(float(y)) - v))


XS = np.array([0.5, 1.0, -2.5, 3.1415927, 1e-30, 100.0, 1e22, 3.4e38, 7.0e5, 12345.678,
               -8.75, 0.75], np.float32)


@pytest.mark.parametrize("cls, fn", [(graph_ir.Sin, "sin"), (graph_ir.Cos, "cos")])
def test_sin_and_cos_are_correctly_rounded(cls: type, fn: str) -> None:
    got = run1(cls(), XS, elements=["f32"])
    want = np.array([nearest_f32(exact_sin_cos(float(v), fn)) for v in XS], F32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_pow_is_correctly_rounded() -> None:
    a = np.array([1.5, 2.0, 0.1, 10.0, 3.7, -1.5, 0.999, 1e-3], np.float32)
    b = np.array([2.5, -3.0, 0.3, 7.7, 1.0 / 3, 3.0, 1000.0, -1.5], np.float32)
    got = run1(graph_ir.Pow(), a, b, elements=["f32", "f32"])
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        want = np.array([nearest_f32(decimal.Decimal(float(x)) ** decimal.Decimal(float(y)))
                         for x, y in zip(a, b)], F32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _skewed(fn: Callable[..., np.ndarray], ulps: int) -> Callable[..., np.ndarray]:
    def off(*args: np.ndarray) -> np.ndarray:
        y = np.asarray(fn(*args), np.float64)
        return (y.view(np.int64) + ulps).view(np.float64)
    return off


#: inputs whose float64 sin, cos or power lies within 40 float64 ulps of a float32 midpoint
HARD_X = np.array([0xC01F2100, 0x401F2100, 0xC010A4BF, 0x424790CE, 0x4215BFE0],
                  np.uint32).view(F32)
HARD_POW = np.array([[0x400E1EB0, 0x403E51B4], [0x3FF11767, 0x3F4242A2]],
                    np.uint32).view(F32)


@pytest.mark.parametrize("ulps", [-100, 60])
def test_a_different_libm_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch,
                                              ulps: int) -> None:
    """NumPy's float64 sin, cos and power moved by some ulps, as another platform's
    library may be: elements near an f32 midpoint are decided exactly, so nothing moves."""
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.uniform(-50, 50, 4000).astype(F32), HARD_X, HARD_POW[:, 0]])
    y = np.concatenate([rng.uniform(0.1, 3, 4005).astype(F32), HARD_POW[:, 1]])
    before = [run1(graph_ir.Sin(), x, elements=["f32"]),
              run1(graph_ir.Cos(), x, elements=["f32"]),
              run1(graph_ir.Pow(), np.abs(x), y, elements=["f32", "f32"])]
    monkeypatch.setitem(elementwise._ROUNDED, graph_ir.Sin, ("sin", _skewed(np.sin, ulps)))
    monkeypatch.setitem(elementwise._ROUNDED, graph_ir.Cos, ("cos", _skewed(np.cos, ulps)))
    monkeypatch.setattr(np, "power", _skewed(np.power, ulps))
    after = [run1(graph_ir.Sin(), x, elements=["f32"]),
             run1(graph_ir.Cos(), x, elements=["f32"]),
             run1(graph_ir.Pow(), np.abs(x), y, elements=["f32", "f32"])]
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    hard = HARD_X.astype(np.float64)  # rounding the skewed values would move some
    naive = [_skewed(f, ulps)(hard).astype(F32) for f in (np.sin, np.cos)]
    assert any(not np.array_equal(n, b[4000:4005]) for n, b in zip(naive, before))
