"""``ts.tile.tanh`` and ``ts.tile.erf``: the specified binary64 tanh and erf rounded
once to the element, in checked and reference mode, and with the same bits on the
Target IR interpreter (sm_80 and sm_90a)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import op
from tessera.numerics.transcendental.erf64 import erf_f64_specified
from tessera.numerics.transcendental.tanh64 import tanh_f64_specified
from tests.frontend.graph.lowered.same import one_nan


@ts.kernel
def curves(X: ts.Tensor["N", ts.f32], T: ts.Tensor["N", ts.f32],
           E: ts.Tensor["N", ts.f32]) -> None:
    x = X[tile_m:tile_m + BM]
    T[tile_m:tile_m + BM] = ts.tile.tanh(x)
    E[tile_m:tile_m + BM] = ts.tile.erf(x)


@pytest.mark.parametrize("mode", ["checked", "reference"])
def test_rounded_once_from_float64(mode: str) -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(256) * 3).astype(np.float32)
    x[:4] = [np.inf, -np.inf, -0.0, 1e-30]
    t, e = np.zeros_like(x), np.zeros_like(x)
    curves(x, t, e, tile_shape=(64,), mode=mode)
    assert t.tobytes() == tanh_f64_specified(x.astype(np.float64)).astype(np.float32).tobytes()
    want = erf_f64_specified(x.astype(np.float64)).astype(np.float32)
    assert e.tobytes() == want.tobytes()


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_on_target_they_give_the_simulator_bits(target: str) -> None:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(512) * 4.0 ** rng.integers(-3, 3, 512)).astype(np.float32)
    x[:10] = [np.inf, -np.inf, -0.0, 0.0, np.nan, 3e-45, -1e-38, 6.0, 0.55, -22.5]
    want = [np.zeros_like(x) for _ in range(2)]
    got = [np.zeros_like(x) for _ in range(2)]
    curves(x, *want, tile_shape=(128,))
    ts.launch(curves, None, (x, *got), backend="target", target=target, tile_shape=(128,))
    # a NaN is a NaN between the simulator (NumPy's) and the Target IR interpreter (the
    # canonical NaN a GPU writes); every other bit is equal
    assert [one_nan(g).tobytes() for g in got] == [one_nan(w).tobytes() for w in want]


def test_fast_mode_gelu_is_close_to_the_graph_bits() -> None:
    """Fast mode cubes by two multiplications instead of the library's ``pow``: the
    GELU is within 2 ulps of f32 of the checked result, which has the graph's bits."""
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((64, 128)) * 2.0 ** rng.integers(-8, 4, (64, 128))).astype(
        np.float32)
    lowered = ts.jit(op.gelu).lower(x)
    exact = np.asarray(lowered.run(x))
    fast = np.asarray(ts.jit(op.gelu, backend="tile", mode="fast")(x).array)
    assert np.asarray(lowered.run(x, backend="tile")).tobytes() == exact.tobytes()
    ulps = np.abs(fast.view(np.int32).astype(np.int64) - exact.view(np.int32))
    assert ulps.max() <= 2
