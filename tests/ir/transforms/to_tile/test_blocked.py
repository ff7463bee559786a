"""Reductions over rows longer than a block: one program walks the rows in blocks,
carrying exact accumulators (the schedule's ``blocked`` strategy), and gives the graph
interpreter's bits for any block size, ragged edges, and NaN or infinities anywhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.transforms.schedule import blocked

FORMATS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16,
           "e4m3": ml_dtypes.float8_e4m3fn}

PROGRAMS: dict[str, Callable[..., Any]] = {
    "sum_all": lambda x, y: op.sum(x),
    "sum_rows": lambda x, y: op.sum(x, axis=-1, keepdims=True),
    "mean_rows": lambda x, y: op.mean(x * x + y, axis=-1) * 0.5,
    "mean_columns": lambda x, y: op.mean(x, axis=0),
    "mse": lambda x, y: op.mse(x, y),
    "rows_and_sum": lambda x, y: (op.relu(x - y), op.sum(op.relu(x - y))),
    "layernorm": lambda x, y: _layernorm(x, y),
    "rmsnorm": lambda x, y: x / op.sqrt(op.mean(x * x, axis=-1, keepdims=True) + 1e-5) * y,
    "centred_sums": lambda x, y: (x - op.mean(x, axis=-1, keepdims=True),
                                  op.sum(op.abs(x - op.mean(x, axis=-1, keepdims=True)))),
}
#: the programs that read a reduction along the rows: several passes over the blocks
PASSES = {"layernorm": 3, "rmsnorm": 2, "centred_sums": 2}


def _layernorm(x: Any, g: Any) -> Any:
    mu = op.mean(x, axis=-1, keepdims=True)
    d = x - mu
    return d / op.sqrt(op.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g


def _fresh(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A new function object: ``ts.jit`` keeps compiled programs per function, and the
    tests change the block size between compilations."""
    return lambda *args: fn(*args)


def _strategies(fn: Callable[..., Any], args: list[np.ndarray]) -> list[str]:
    lowered = ts.jit(_fresh(fn)).lower(*args)
    module = lowered.ir("schedule")
    return [(line.split('reduction = "')[1:] or ['none"'])[0].split('"')[0]
            for line in module.splitlines() if "schedule.kernel(" in line]


def _same_bits(fn: Callable[..., Any], args: list[np.ndarray]) -> None:
    lowered = ts.jit(_fresh(fn)).lower(*args)
    want, got = lowered.run(*args), lowered.run(*args, backend="tile")
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert [np.asarray(g).tobytes() for g in got] == [np.asarray(w).tobytes() for w in want]


def _values(rng: np.random.Generator, shape: tuple[int, int], fmt: str,
            spread: int) -> np.ndarray:
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-spread, spread + 1, shape)
    with np.errstate(over="ignore"):  # (fp8 overflows to NaN: a case too)
        return x.astype(FORMATS[fmt])


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(PROGRAMS)), fmt=st.sampled_from(sorted(FORMATS)),
       rows=st.integers(1, 9), cols=st.integers(1, 70), block=st.sampled_from([16, 32, 64]),
       seed=st.integers(0, 2**16), spread=st.integers(0, 40))
def test_blocked_reductions_give_the_graph_bits(name: str, fmt: str, rows: int, cols: int,
                                                 block: int, seed: int, spread: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(blocked, "BLOCK_TERMS", block)
        patch.setattr(blocked, "WHOLE_ROW_TERMS", block)
        _check_drawn(name, fmt, rows, cols, block, seed, spread)


def _check_drawn(name: str, fmt: str, rows: int, cols: int, block: int, seed: int,
                 spread: int) -> None:
    rng = np.random.default_rng(seed)
    args = [_values(rng, (rows, cols), fmt, spread) for _ in range(2)]
    if name in PASSES:
        args[1] = args[1][0]  # a scale per column
    fn = PROGRAMS[name]
    lowered = ts.jit(_fresh(fn)).lower(*args)
    strategies = _strategies(fn, args)
    weight = blocked.MSE_TERMS if name == "mse" else 1
    whole = ("sum_all", "mse", "rows_and_sum", "centred_sums")
    if weight * (rows * cols if name in whole else cols) > block and name != "mean_columns":
        assert "blocked" in strategies
        if name in PASSES and len(lowered.kernels) == 1:  # (narrow norms: 3 kernels)
            assert lowered.ir("tile").count("tile.for") >= PASSES[name]
    _same_bits(fn, args)


def test_nan_and_infinities_in_different_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocked, "BLOCK_TERMS", 16)
    x = np.ones((4, 40), np.float32)
    x[0, 3] = np.nan                           # a NaN in the first block
    x[1, 2], x[1, 35] = np.inf, -np.inf        # infinities of both signs: NaN
    x[2, 20], x[2, 39] = np.inf, np.inf        # one infinity
    x[3, 1], x[3, 38] = 2.0**100, -(2.0**100)  # cancel exactly across blocks
    for fn in (PROGRAMS["sum_rows"], PROGRAMS["mean_rows"], PROGRAMS["mse"]):
        assert "blocked" in _strategies(fn, [x, x * 0.5])
        _same_bits(fn, [x, x * 0.5])


def test_long_reductions_at_size_are_walked_in_blocks() -> None:
    """Whole-tensor sums and mean squared errors of 65,536 elements and rows of 2^17:
    blocks of at most BLOCK_TERMS terms, the graph's bits."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((256, 256)).astype(np.float32)
    y = rng.standard_normal((256, 256)).astype(np.float32)
    rows = rng.standard_normal((2, 1 << 17)).astype(np.float32)
    for fn, args in ((PROGRAMS["sum_all"], [x, y]), (PROGRAMS["mse"], [x, y]),
                     (PROGRAMS["mean_rows"], [rows, rows])):
        lowered = ts.jit(fn).lower(*args)
        scheduled = lowered.ir("schedule")
        assert 'reduction = "blocked"' in scheduled
        (kernel,) = lowered.kernels
        tiles = kernel.function.attrs["tiles"]
        weight = blocked.MSE_TERMS if fn is PROGRAMS["mse"] else 1
        assert weight * int(np.prod(tiles[-2:] if fn is not PROGRAMS["mean_rows"]
                                    else tiles[-1:])) <= blocked.BLOCK_TERMS
        _same_bits(fn, args)


def test_norms_hold_rows_that_fit_and_walk_longer_ones_in_passes() -> None:
    assert "blocked" in schedule_ops.REDUCTIONS
    g = np.ones(4096, np.float32)
    x = np.random.default_rng(2).standard_normal((2, 4096)).astype(np.float32)
    assert _strategies(PROGRAMS["layernorm"], [x, g]) == ["in_tile"]  # one pass, whole
    x = np.random.default_rng(2).standard_normal((2, 20000)).astype(np.float32)
    g = np.random.default_rng(3).standard_normal(20000).astype(np.float32)
    assert _strategies(PROGRAMS["layernorm"], [x, g]) == ["blocked"]
    assert ts.jit(PROGRAMS["layernorm"]).lower(x, g).ir("tile").count("tile.for") == 3
    _same_bits(PROGRAMS["layernorm"], [x, g])
