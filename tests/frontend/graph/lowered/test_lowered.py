"""``ts.jit(f, backend="tile")`` and ``ts.jit(f).lower(...)``: the generated tile
kernels give the graph interpreter's bits; the stages, kernels and errors."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.errors import ArgumentError, StageError, UnsupportedError
from tessera.ir.transforms.to_tile import TileGenerationError
from tests.frontend.graph.lowered.same import bits

FORMATS = {"f32": (ts.f32, np.float32), "bf16": (ts.bf16, None), "f16": (ts.f16, np.float16)}


def _as(fmt: str, x: np.ndarray) -> np.ndarray:
    return ts.Tensor(x.astype(np.float64), FORMATS[fmt][0]).array  # rounded once (RNE)


def chain(x, y, b):  # type: ignore[no-untyped-def]
    z = op.relu(x * y - 1.5) + op.maximum(x, b) / (op.abs(y) + 1.0)
    w = op.sqrt(op.abs(z)) - op.log(op.abs(x) + 0.5)
    return op.where(x > y, w, -z), (w * 0.25).astype(ts.f32)


def with_exp(x, y):  # type: ignore[no-untyped-def]
    return op.exp(x - y) * 0.5


def _same(fn, *args):  # type: ignore[no-untyped-def]
    want = ts.jit(fn)(*args)
    got = ts.jit(fn, backend="tile")(*args)
    assert bits(got) == bits(want)


side = st.integers(1, 40)


@settings(max_examples=25, deadline=None)
@given(rows=side, cols=side, fmt=st.sampled_from(sorted(FORMATS)), seed=st.integers(0, 2**16))
def test_elementwise_chain_gives_the_graph_bits(rows: int, cols: int, fmt: str,
                                                seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = (_as(fmt, rng.standard_normal((rows, cols)) * 4) for _ in range(2))
    b = _as(fmt, rng.standard_normal(cols))
    _same(chain, x, y, b)


@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=0, max_size=5),
       fmt=st.sampled_from(["f32", "bf16"]), seed=st.integers(0, 2**16))
def test_exp_chain_any_rank_gives_the_graph_bits(shape: list[int], fmt: str,
                                                 seed: int) -> None:
    # ranks 0 to 5: more than three loops share one linear grid axis
    rng = np.random.default_rng(seed)
    x, y = (_as(fmt, rng.standard_normal(shape) * 30) for _ in range(2))
    _same(with_exp, x, y)


def test_specials_and_nan_payloads_give_the_graph_bits() -> None:
    payload = np.array([0x7FC00001, 0xFFC12345], np.uint32).view(np.float32)
    x = np.array([np.inf, -np.inf, 0.0, -0.0, 3e38, 1e-45, *payload, 1.0, -2.0], np.float32)
    y = np.array([np.inf, 1.0, -0.0, 0.0, 3e38, 1e-45, 1.0, *payload, -2.0], np.float32)
    _same(chain, x, y, y[::-1].copy())
    _same(with_exp, x, y)


def test_integer_arithmetic_saturates_as_the_graph_does() -> None:
    x = np.array([[127, -128, 100, -7]], np.int8)
    y = np.array([[1, -1, 100, 3]], np.int8)
    _same(lambda x, y: (x + y, x * y - y, -x, op.abs(x), op.maximum(x, y)), x, y)


def test_lower_gives_stages_kernels_and_runs() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 48)).astype(np.float32), np.ones((64, 48), np.float32)
    b = np.zeros(48, np.float32)
    lowered = ts.jit(chain).lower(x, y, b)
    assert "graph.func @chain" in lowered.ir("graph")
    assert lowered.ir("schedule").count("schedule.kernel(") == len(lowered.kernels) == 1
    kernel = lowered.kernels[0]
    assert kernel.grid == (4, 1) and "tile.kernel @chain_k0" in kernel.text
    assert "launch @chain_k0 grid (4, 1)" in lowered.ir("tile")
    assert lowered.ir("tile") == ts.inspect_ir(chain, "tile", x, y, b)
    assert bits(lowered.run(x, y, b, backend="tile")) == bits(lowered.run(x, y, b))
    with pytest.raises(StageError):
        lowered.ir("ptx")
    assert "ptx.kernel @chain_k0" in lowered.ir("target")  # log: the specified one
    assert bits(lowered.run(x, y, b, backend="target")) == bits(lowered.run(x, y, b))
    with pytest.raises(ArgumentError, match="other argument shapes"):
        lowered.run(x[:2], y[:2], b)


def test_backends_that_do_not_exist() -> None:
    with pytest.raises(ArgumentError, match="unknown backend"):
        ts.jit(chain, backend="gpu")
    assert [ts.jit(chain, backend=b).backend for b in ("target", "cuda")] == ["target", "cuda"]


def mlp(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.sin(x @ w1 + b1) @ w2 + b2


def test_unsupported_op_names_op_and_line_and_interp_still_runs() -> None:
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32)
            for s in [(16, 8), (8, 32), (32,), (32, 8), (8,)]]
    with pytest.raises(TileGenerationError) as err:
        ts.jit(mlp, backend="tile")(*args)
    _, start = inspect.getsourcelines(mlp)
    assert "graph.sin" in str(err.value)
    assert f"test_lowered.py:{start + 1}:" in str(err.value)
    assert isinstance(err.value, UnsupportedError)
    assert ts.jit(mlp)(*args).shape == (16, 8)
    assert ts.jit(mlp).lower(*args).run(*args).shape == (16, 8)


def test_f16_exp_gives_the_graph_bits_on_every_f16_input() -> None:
    """The tile level's f16 ``exp`` (the correctly rounded f32 ``exp`` rounded to f16)
    is the graph's on all 65,536 f16 values, NaNs' bits included."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    tile = ts.jit(lambda a: op.exp(a), backend="tile")(x)
    graph = ts.jit(lambda a: op.exp(a))(x)
    assert np.asarray(tile.array).tobytes() == np.asarray(graph.array).tobytes()


def mlp_relu(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.relu(x @ w1 + b1) @ w2 + b2


def epilogues(x, w, b, r):  # type: ignore[no-untyped-def]
    """bias, activation, cast to f32 and a residual after one matmul."""
    y = op.maximum(x @ w + b, b * 0.5)
    return y.astype(ts.f32) + r


def _fmt_array(fmt: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    if fmt == "int8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return ts.Tensor(rng.standard_normal(shape) * 4, getattr(ts, fmt)).array


@settings(max_examples=20, deadline=None)
@given(m=side, k=side, n=side, h=side,
       fmt=st.sampled_from(["fp8_e4m3", "int8", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1"]),
       seed=st.integers(0, 2**16))
def test_mlp_gives_the_graph_bits_where_mma_sums_are_exact(m: int, k: int, n: int, h: int,
                                                           fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    args = [_fmt_array(fmt, rng, s) for s in [(m, k), (k, h), (h,), (h, n), (n,)]]
    lowered = ts.jit(mlp_relu).lower(*args)
    # 2 kernels (the contraction rule); 1 when the hidden width is 1 (no loop to cut)
    assert len(lowered.kernels) == lowered.ir("schedule").count("schedule.kernel(") <= 2
    assert bits(lowered.run(*args, backend="tile")) == bits(lowered.run(*args))


@settings(max_examples=10, deadline=None)
@given(m=side, k=side, n=side, seed=st.integers(0, 2**16))
def test_matmul_epilogues_give_the_graph_bits(m: int, k: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, w, b = (_fmt_array("fp8_e4m3", rng, s) for s in [(m, k), (k, n), (n,)])
    r = rng.standard_normal((m, n)).astype(np.float32)
    lowered = ts.jit(epilogues).lower(x, w, b, r)
    assert len(lowered.kernels) == 1
    assert bits(lowered.run(x, w, b, r, backend="tile")) == bits(lowered.run(x, w, b, r))


@pytest.mark.parametrize(("hidden", "kernels"), [(1, 1), (64, 2), (256, 2)])
def test_mlp_kernel_counts(hidden: int, kernels: int) -> None:
    rng = np.random.default_rng(5)
    args = [_fmt_array("int8", rng, s)
            for s in [(32, 64), (64, hidden), (hidden,), (hidden, 16), (16,)]]
    lowered = ts.jit(mlp_relu).lower(*args)
    assert len(lowered.kernels) == kernels
    assert sum(k.text.count("tile.mma(") for k in lowered.kernels) == 2
    assert bits(ts.jit(mlp_relu, backend="tile")(*args)) == bits(ts.jit(mlp_relu)(*args))


def layernorm(x):  # type: ignore[no-untyped-def]
    mu = op.mean(x, axis=-1, keepdims=True)
    return (x - mu) / op.sqrt(op.mean((x - mu) * (x - mu), axis=-1, keepdims=True) + 1e-5)


def test_row_reductions_give_the_graph_bits() -> None:
    x = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
    assert bits(ts.jit(layernorm, backend="tile")(x)) == bits(ts.jit(layernorm)(x))


def test_stochastic_rounding_and_one_operand_matmul_are_refused() -> None:
    def rounded(x):  # type: ignore[no-untyped-def]
        return (x * 3.0).astype(ts.bf16 @ ts.stochastic_round())

    def square(x):  # type: ignore[no-untyped-def]
        return x @ x

    with pytest.raises(TileGenerationError, match="stochastic rounding"):
        ts.jit(rounded, backend="tile")(np.ones((4, 4), np.float32))
    with pytest.raises(TileGenerationError, match="both operands"):
        ts.jit(square, backend="tile")(np.ones((8, 8), np.int8))
