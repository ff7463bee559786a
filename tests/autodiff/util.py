"""Finite-difference references and checks shared by the autodiff tests.

The reference derivative of a NumPy float64 function is a five-point central
difference, ``(f(x-2h) - 8 f(x-h) + 8 f(x+h) - f(x+2h)) / 12h``: its truncation error is
O(h^4), so with ``h = 1e-4`` it agrees with the true derivative to about 1e-11 for the
smooth functions tested here, far inside the 1e-6 tolerance of the checks. Inputs
are kept at least ``4h`` away from kinks by the strategies that draw them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

import tessera as ts

H = 1e-4
RTOL = 1e-6
ATOL = 1e-8

NpFn = Callable[..., np.ndarray]


def directional(f: NpFn, xs: Sequence[np.ndarray], ts_: Sequence[np.ndarray]) -> np.ndarray:
    """The derivative of ``f`` at ``xs`` along ``ts_`` (five-point central difference)."""
    def at(s: float) -> np.ndarray:
        return np.asarray(f(*[x + s * t for x, t in zip(xs, ts_)]), np.float64)

    return (at(-2 * H) - 8 * at(-H) + 8 * at(H) - at(2 * H)) / (12 * H)


def jacobians(f: NpFn, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For each input k, the Jacobian of ``f`` with shape ``out.shape + xs[k].shape``."""
    out_shape = np.shape(f(*xs))
    jac = []
    for k, x in enumerate(xs):
        j = np.zeros(out_shape + x.shape)
        for i in np.ndindex(x.shape):
            t = [np.zeros_like(v) for v in xs]
            t[k][i] = 1.0
            j[(Ellipsis, *i)] = directional(f, xs, t)
        jac.append(j)
    return jac


def close(actual: Any, expected: Any, rtol: float = RTOL, atol: float = ATOL) -> None:
    """``actual`` (a tessera tensor or array) equals ``expected`` within tolerances."""
    a = np.asarray(actual)
    e = np.asarray(expected)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    np.testing.assert_allclose(a.astype(np.complex128 if np.iscomplexobj(a) else np.float64),
                               e, rtol=rtol, atol=atol)


def check_derivatives(ts_fn: Callable[..., Any], np_fn: NpFn, xs: Sequence[np.ndarray],
                      seed: int) -> None:
    """VJP and JVP of ``ts_fn`` against the finite-difference Jacobian of ``np_fn``.

    Also checks the primal output and the transposition identity
    ``<vjp(ct), t> == <ct, jvp(t)>`` for random ``ct`` and ``t``.
    """
    rng = np.random.default_rng(seed)
    xs = [np.asarray(x, np.float64) for x in xs]
    expected_out = np.asarray(np_fn(*xs), np.float64)
    jac = jacobians(np_fn, xs)
    ct = rng.normal(size=expected_out.shape)
    tangents = [rng.normal(size=x.shape) for x in xs]

    out, pullback = ts.vjp(ts_fn, *xs)
    close(out, expected_out, rtol=1e-12, atol=1e-12)
    cts = pullback(ct)
    assert isinstance(cts, tuple) and len(cts) == len(xs)
    n_out = expected_out.ndim
    for k, (got, j) in enumerate(zip(cts, jac)):
        assert np.asarray(got).dtype == np.float64, f"cotangent {k} is {np.asarray(got).dtype}"
        close(got, np.tensordot(ct, j, axes=(list(range(n_out)), list(range(n_out)))))

    out2, tangent_out = ts.jvp(ts_fn, xs, tangents)
    close(out2, expected_out, rtol=1e-12, atol=1e-12)
    expected_tan = sum(np.tensordot(j, t, axes=t.ndim) for j, t in zip(jac, tangents))
    close(tangent_out, expected_tan)

    lhs = sum(float(np.sum(np.asarray(c) * t)) for c, t in zip(cts, tangents))
    rhs = float(np.sum(ct * np.asarray(tangent_out)))
    assert np.isclose(lhs, rhs, rtol=1e-10, atol=1e-10), (lhs, rhs)


# ---------------------------------------------------------------------------- strategies
def shapes(min_rank: int = 1, max_rank: int = 3, max_side: int = 4) -> st.SearchStrategy:
    """Small tensor shapes (so the finite-difference Jacobian stays cheap)."""
    return st.lists(st.integers(1, max_side), min_size=min_rank, max_size=max_rank).map(tuple)


def values(shape: tuple[int, ...], lo: float = -2.0, hi: float = 2.0) -> st.SearchStrategy:
    """float64 arrays of ``shape`` with entries in ``[lo, hi]``."""
    n = int(np.prod(shape, dtype=np.int64))
    return st.lists(st.floats(lo, hi, allow_nan=False, width=64), min_size=n,
                    max_size=n).map(lambda v: np.asarray(v, np.float64).reshape(shape))


def away_from_zero(x: np.ndarray, margin: float = 0.05) -> np.ndarray:
    """``x`` pushed at least ``margin`` away from 0 (for kinks such as relu and abs)."""
    return np.where(x >= 0, x + margin, x - margin)


def distinct(x: np.ndarray, gap: float = 0.05) -> np.ndarray:
    """``x`` with all entries at least ``gap`` apart (for max/min reductions)."""
    flat = x.reshape(-1)
    order = np.argsort(flat, kind="stable")
    spread = np.empty_like(flat)
    spread[order] = np.arange(flat.size) * gap
    return (flat + spread).reshape(x.shape)
