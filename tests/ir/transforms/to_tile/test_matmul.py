"""Matmul kernels at the tile level: which contractions the checked ``mma`` sums
exactly in float64, the exact ``mma`` of the others (f32, tf32, bf16, f16, fp8_e5m2),
the K loop it generates, and the refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.interp.graph import run_function
from tessera.interp.tile.program import run_program
from tessera.ir.transforms.to_tile import TileGenerationError, lower_module
from tessera.ir.transforms.to_tile.matmul import exact_contraction
from tessera.numerics import convert, dtype
from tests.ir.transforms.to_tile import programs

GOLDEN = Path(__file__).parents[3] / "golden" / "to_tile"


@pytest.mark.parametrize(("a", "b", "limit"), [
    # e4m3: products are multiples of 2^-18 below 448^2 < 2^18, so 2^53 / (448^2 2^18)
    ("fp8_e4m3", "fp8_e4m3", int(2**53 // (448.0**2 * 2**18))),
    ("int8", "int8", 2**17 - 1),
    ("f32", "f32", 0), ("bf16", "bf16", 0), ("f16", "f16", 0), ("fp8_e5m2", "fp8_e5m2", 0),
    ("fp8_e4m3", "f32", 0), ("int8", "int32", 0),
])
def test_exact_contraction(a: str, b: str, limit: int) -> None:
    assert exact_contraction(dtype(a), dtype(b)) == limit


def test_the_bound_is_tight_for_e4m3() -> None:
    """At the bound the largest partial sum in quanta is at most 2^53; one more product
    of the largest magnitude passes it."""
    quanta = 448.0**2 * 2**18
    k = exact_contraction(dtype("fp8_e4m3"), dtype("fp8_e4m3"))
    assert k * quanta <= 2**53 < (k + 1) * quanta


def _int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, shape).astype(np.int8)


def test_linear_relu_golden_and_bits() -> None:
    rng = np.random.default_rng(3)
    args = [_int8(rng, (16, 256)), _int8(rng, (256, 16)), _int8(rng, (16,))]
    compiled = ts.jit(programs.linear_relu).compile(*args)
    program = lower_module(compiled.module)
    assert str(program) + "\n" == (GOLDEN / "linear_relu.tir").read_text()
    text = str(program.kernels[0])
    assert text.count("tile.mma(") == 1 and "tile.for(" in text
    # rows rounded up to the tensor cores' 64 (masked past 16); B copied K-major
    assert "tiles = [64, 16, 64]" in text and "tile.transpose(" in text
    want = run_function(compiled.function, args)
    assert [g.tobytes() for g in run_program(program, args)] == [w.tobytes() for w in want]


def _bits(x: object) -> list[bytes]:
    xs = x if isinstance(x, tuple) else (x,)
    return [np.asarray(v).tobytes() for v in xs]


def mlp_relu(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    """The MLP with the activation the tile level has (GELU has no tile op yet)."""
    return op.relu(x @ w1 + b1) @ w2 + b2


def _array(fmt: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    wide = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 6, shape)
    return np.asarray(convert(wide, dtype(fmt)))


@pytest.mark.parametrize("fmt", ["f32", "bf16", "f16", "fp8_e5m2"])
def test_float_matmuls_use_the_exact_mma(fmt: str) -> None:
    rng = np.random.default_rng(11)
    args = [_array(fmt, rng, s) for s in [(64, 32), (32, 128), (128,), (128, 32), (32,)]]
    lowered = ts.jit(mlp_relu).lower(*args)
    assert len(lowered.kernels) == 2
    assert all("exact = true" in k.text for k in lowered.kernels)
    assert _bits(lowered.run(*args, backend="tile")) == _bits(lowered.run(*args))


def test_tf32_operands() -> None:
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((32, 64)).astype(np.float32), \
        rng.standard_normal((64, 16)).astype(np.float32)
    lowered = ts.jit(lambda x, w: x.astype(ts.tf32) @ w.astype(ts.tf32)).lower(x, w)
    assert "tf32" in lowered.kernels[0].text
    assert _bits(lowered.run(x, w, backend="tile")) == _bits(lowered.run(x, w))


def test_the_float64_hard_case_is_rounded_as_the_graph_does() -> None:
    """The f32 row [1, 2^-24, 2^-40] times the column [1, 1, 2^-40]: the exact sum
    1 + 2^-24 + 2^-80 rounds up, the float64 sum (the midpoint) would round down."""
    a = np.zeros((16, 48), np.float32)
    b = np.zeros((48, 16), np.float32)
    a[:, :3], b[:3, :] = [1.0, 2.0**-24, 2.0**-40], np.array([[1.0], [1.0], [2.0**-40]])
    lowered = ts.jit(lambda a, b: a @ b).lower(a, b)
    got = np.asarray(lowered.run(a, b, backend="tile"))
    assert (got == np.float32(1 + 2.0**-23)).all()
    assert _bits(got) == _bits(lowered.run(a, b))


@settings(max_examples=15, deadline=None)
@given(m=st.sampled_from([1, 8, 24]), k=st.sampled_from([1, 16, 48, 80]),
       n=st.sampled_from([1, 8, 32]), fmt=st.sampled_from(["f32", "bf16", "f16"]),
       seed=st.integers(0, 2**16))
def test_hypothesis_matmul_chains(m: int, k: int, n: int, fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, w, b = (_array(fmt, rng, s) for s in [(m, k), (k, n), (n,)])
    r = _array(fmt, rng, (m, n))
    fn = lambda x, w, b, r: op.maximum(x @ w + b, r) - r * 0.5  # noqa: E731
    lowered = ts.jit(fn).lower(x, w, b, r)
    assert _bits(lowered.run(x, w, b, r, backend="tile")) == _bits(lowered.run(x, w, b, r))


def test_transposed_and_batched_operands() -> None:
    """A transpose of the last two axes is the tile's transpose; a batched matmul runs
    one batch element per program (its tile drops the batch axis for the mma)."""
    rng = np.random.default_rng(8)
    x, w = _int8(rng, (8, 16)), _int8(rng, (8, 16))
    lowered = ts.jit(lambda x, w: x @ op.transpose(w, (1, 0))).lower(x, w)
    assert "tile.transpose" in lowered.kernels[0].text
    assert _bits(lowered.run(x, w, backend="tile")) == _bits(lowered.run(x, w))
    x3, w3 = _int8(rng, (2, 8, 16)), _int8(rng, (2, 16, 8))
    lowered = ts.jit(lambda x, w: x @ w).lower(x3, w3)
    assert lowered.kernels[0].grid[0] == 2
    assert _bits(lowered.run(x3, w3, backend="tile")) == _bits(lowered.run(x3, w3))
    with pytest.raises(TileGenerationError, match="permutation"):
        lower_module(ts.jit(lambda x: op.transpose(x, (1, 0, 2)) * 2).compile(x3).module)


@pytest.mark.parametrize("policy", ["bf16 @ accum(f32)", "f16 @ accum(f32)",
                                    "bf16 @ accum(bf16)"])
def test_policies(policy: str) -> None:
    """Operands cast to a policy: the exact mma accumulates into the policy's
    accumulator and the graph's two roundings (to it, then to the result) follow."""
    pol = {"bf16 @ accum(f32)": ts.bf16 @ ts.accum(ts.f32),
           "f16 @ accum(f32)": ts.f16 @ ts.accum(ts.f32),
           "bf16 @ accum(bf16)": ts.bf16 @ ts.accum(ts.bf16)}[policy]
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((32, 64)).astype(np.float32), \
        rng.standard_normal((64, 16)).astype(np.float32)

    def mm(x, w):  # type: ignore[no-untyped-def]
        return op.relu(x.astype(pol) @ w.astype(pol))

    def rows(x):  # type: ignore[no-untyped-def]
        p = x.astype(pol)
        return op.softmax(p, axis=-1) * op.mean(p, axis=-1, keepdims=True)

    for fn, args in [(mm, (x, w)), (rows, (x,))]:
        lowered = ts.jit(fn).lower(*args)
        assert _bits(lowered.run(*args, backend="tile")) == _bits(lowered.run(*args))
