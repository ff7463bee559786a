"""Split-K as generated kernels: a slices launch whose programs each sum one equal
slice of K into a global buffer of partial sums, and the kernel itself, which adds the
partials in slice order and applies the epilogue. Integer matmuls keep the graph's
bits (their partial sums are exact), also on both PTX targets; fast mode stays within
the derived bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.ir.transforms.schedule.bounds import matmul_bound, within
from tests.frontend.graph.lowered.same import assembles_clean, bits, same_on_target

RNG = np.random.default_rng(11)


def linear_relu(a, b, c):  # type: ignore[no-untyped-def]
    return op.relu(a @ b + c)


def _int8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape).astype(np.int8)


def test_an_int8_matmul_is_split_into_slices_and_a_combine() -> None:
    a, b, c = _int8(64, 1000), _int8(1000, 96), _int8(96)
    lowered = ts.jit(linear_relu).lower(a, b, c)
    assert 'reduction = "split_k", split = 4' in lowered.ir("schedule")
    host = lowered.ir("tile").split("host @")[1]
    assert "%k0_partials = global tensor<256x96xint32>" in host, host
    assert "launch @linear_relu_k0_slices grid (1, 1, 4) (%a, %b, %c, %k0_partials)" in host
    # (the combine is elementwise: tiles of 512 elements, 4 x 128 here)
    assert "launch @linear_relu_k0 grid (16, 1) (%a, %b, %c, %k0_partials, %k0_0)" in host
    assert bits(lowered.run(a, b, c, backend="tile")) == bits(lowered.run(a, b, c))


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 70), n=st.integers(1, 70), k_tiles=st.integers(4, 12),
       ragged=st.integers(0, 127), seed=st.integers(0, 2**16))
# K = 448: 3.5 of the schedule's 128-wide tiles in 2 slices of 256, while the K loop
# steps by 64 (a divisor of 448): the second slice's last step lies wholly past K
@example(m=2, n=1, k_tiles=4, ragged=64, seed=0)
def test_drawn_int8_split_k_gives_the_graph_bits(m: int, n: int, k_tiles: int, ragged: int,
                                                  seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = 128 * k_tiles - ragged
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    lowered = ts.jit(lambda a, b: a @ b).lower(a, b)
    if "split_k" in lowered.ir("schedule"):
        assert len(lowered.kernels) == 2
    assert bits(lowered.run(a, b, backend="tile")) == bits(lowered.run(a, b))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_int8_split_k_in_ptx_gives_the_graph_bits(target: str) -> None:
    a, b, c = _int8(32, 1000), _int8(1000, 48), _int8(48)
    lowered = ts.jit(linear_relu).lower(a, b, c)
    assert len(lowered.kernels) == 2
    same_on_target(linear_relu, [a, b, c], target)
    for kernel in lowered.target(target).kernels:
        assembles_clean(kernel)


def test_fast_split_k_stays_within_the_derived_bound() -> None:
    a = (RNG.standard_normal((64, 1000)) * 2.0 ** RNG.integers(-20, 20, (64, 1000))
         ).astype(np.float32)
    b = RNG.standard_normal((1000, 96)).astype(np.float32)
    lowered = ts.jit(lambda a, b: a @ b, mode="fast").lower(a, b)
    assert 'reduction = "split_k"' in lowered.ir("schedule")
    got = np.asarray(lowered.run(a, b, backend="tile"))
    exact = np.asarray(ts.jit(lambda a, b: a @ b).lower(a, b).run(a, b))
    assert within(got, exact, matmul_bound(a, b))
    again = np.asarray(lowered.run(a, b, backend="tile"))
    assert got.tobytes() == again.tobytes()  # the slices are added in a fixed order
