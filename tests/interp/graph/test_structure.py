"""Data movement rules against NumPy: values move, nothing is rounded."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.ir.dialects import graph as graph_ir
from tests.interp.graph.util import run1, same

ELEMENTS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn}
SETTINGS = settings(max_examples=50, deadline=None)


@st.composite
def tensor(draw: st.DrawFn, min_rank: int = 0):
    name = draw(st.sampled_from(sorted(ELEMENTS)))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=min_rank, max_size=4)))
    values = np.arange(math.prod(shape), dtype=np.float64).reshape(shape) % 17 - 8
    return name, values.astype(ELEMENTS[name])


@SETTINGS
@given(tensor(), st.randoms())
def test_transpose(case, rnd) -> None:
    name, x = case
    perm = list(range(x.ndim))
    rnd.shuffle(perm)
    assert same(run1(graph_ir.Transpose(tuple(perm)), x, elements=[name]), np.transpose(x, perm))


@SETTINGS
@given(tensor())
def test_reshape_flattens_row_major(case) -> None:
    name, x = case
    assert same(run1(graph_ir.Reshape((x.size,)), x, elements=[name]), x.reshape(-1))


@SETTINGS
@given(tensor(), st.lists(st.integers(1, 3), max_size=2))
def test_broadcast(case, lead) -> None:
    name, x = case
    shape = tuple(lead) + x.shape
    assert same(run1(graph_ir.Broadcast(shape), x, elements=[name]), np.broadcast_to(x, shape))


@SETTINGS
@given(tensor(min_rank=1), st.data())
def test_slice_and_embed_are_transposes(case, data) -> None:
    name, x = case
    starts, stops, steps = [], [], []
    for dim in x.shape:
        lo = data.draw(st.integers(0, dim))
        starts.append(lo)
        stops.append(data.draw(st.integers(lo, dim)))
        steps.append(data.draw(st.integers(1, 3)))
    window = tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps))
    part = run1(graph_ir.Slice(tuple(starts), tuple(stops), tuple(steps)), x, elements=[name])
    assert same(part, x[window])
    back = run1(graph_ir.Embed(x.shape, tuple(starts), tuple(steps)), part, elements=[name])
    want = np.zeros_like(x)
    want[window] = x[window]
    assert same(back, want)
