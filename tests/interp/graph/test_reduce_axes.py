"""Reductions over empty axes and the checking of axis arguments, against NumPy.

Over an empty axis NumPy's sum is 0 and its mean NaN, while max and min refuse; its
axis arguments must be ints in range, each named once. ``ts.*`` follows it eagerly,
under ``@ts.jit`` and under ``ts.grad``, with no NumPy warning leaking out.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.ir.dialects import graph as graph_ir
from tests.interp.graph.util import run1
from tests.mesh_sim.util import raises_here

SETTINGS = settings(max_examples=30, deadline=None)
REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


@st.composite
def empty_case(draw: st.DrawFn) -> tuple[np.ndarray, object]:
    """A float32 tensor with at least one empty dim, and an axis argument."""
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(0, 3)) for _ in range(rank)]
    shape[draw(st.integers(0, rank - 1))] = 0
    axis = draw(st.none() | st.integers(-rank, rank - 1) |
                st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True
                         ).map(tuple))
    return np.zeros(shape, np.float32), axis


def _numpy(name: str, x: np.ndarray, axis: object, keep: bool) -> np.ndarray | None:
    """NumPy's float64 answer cast to float32, or None where NumPy refuses."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's "Mean of empty slice"
        try:
            out = REDUCTIONS[name](x.astype(np.float64), axis=axis, keepdims=keep)
        except ValueError:
            return None
    return np.asarray(out).astype(np.float32)


def _three_ways(name: str, x: np.ndarray, axis: object, keep: bool) -> list[np.ndarray]:
    fn = getattr(ts, name)
    eager = np.asarray(fn(x, axis=axis, keepdims=keep))
    jitted = np.asarray(ts.jit(lambda v: fn(v, axis=axis, keepdims=keep))(x))
    traced = ts.jit(lambda v: ts.sum(fn(v, axis=axis, keepdims=keep)))
    assert np.asarray(traced(x)).shape == ()
    return [eager, jitted]


@SETTINGS
@given(empty_case(), st.sampled_from(sorted(REDUCTIONS)), st.booleans())
def test_empty_axes_follow_numpy(case, name, keep) -> None:
    x, axis = case
    want = _numpy(name, x, axis, keep)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NumPy warning may leak out of tessera
        if want is None:
            with pytest.raises(ts.ShapeError, match="empty"):
                getattr(ts, name)(x, axis=axis, keepdims=keep)
            with pytest.raises(ts.ShapeError, match="empty"):
                ts.jit(lambda v: getattr(ts, name)(v, axis=axis))(x)
            return
        for got in _three_ways(name, x, axis, keep):
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.array_equal(got, want, equal_nan=True)
            assert not np.signbit(got).any()


@SETTINGS
@given(empty_case(), st.sampled_from(["sum", "mean"]))
def test_gradient_over_empty_axes_is_empty_zeros(case, name) -> None:
    x, axis = case
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dx = np.asarray(ts.grad(lambda v: ts.sum(getattr(ts, name)(v, axis=axis)))(x))
    assert dx.shape == x.shape and dx.dtype == np.float32 and not dx.any()


def test_gradient_of_max_over_a_non_empty_axis_of_an_empty_tensor() -> None:
    x = np.zeros((3, 0), np.float32)  # axis 0 has 3 elements; the result is empty
    dx = np.asarray(ts.grad(lambda v: ts.sum(ts.max(v, axis=0)))(x))
    assert dx.shape == (3, 0)


def test_max_over_an_empty_axis_names_the_axis_and_the_line() -> None:
    x = np.zeros((3, 0), np.float32)
    raises_here(ts.ShapeError, lambda: ts.max(x, axis=1), "axis 1", "(3, 0)", "maximum")
    raises_here(ts.ShapeError, lambda: ts.min(x), "axis 1", "minimum")
    # Under jit and grad the error is at the line of the traced body: this one.
    raises_here(ts.ShapeError, lambda: ts.jit(lambda v: ts.max(v, axis=-1))(x), "axis 1")
    raises_here(ts.ShapeError, lambda: ts.grad(lambda v: ts.sum(ts.min(v, 1)))(x), "axis 1")


def test_mean_of_no_integers_is_refused_not_zero() -> None:
    x = np.zeros((2, 0), np.int32)
    raises_here(ts.DTypeError, lambda: ts.mean(x, axis=1), "NaN", "int32")
    assert np.array_equal(np.asarray(ts.sum(x, axis=1)), np.zeros(2, np.int32))


def test_interpreter_sums_empty_axes_in_both_modes() -> None:
    x = np.zeros((2, 0, 3), np.float32)
    for mode in ("exact", "fast"):
        assert np.array_equal(run1(graph_ir.Sum((1,)), x, mode=mode), np.zeros((2, 3), np.float32))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert np.isnan(run1(graph_ir.Mean((1,), True), x, mode=mode)).all()
    with pytest.raises(ts.InterpretError, match="axis 1"):
        run1(graph_ir.Max((1,)), x)


BAD_AXES = [((0, 0), ts.ShapeError, "named twice"), ((1, -1), ts.ShapeError, "named twice"),
            (1.5, ts.ArgumentError, "not an integer"), ((0, 1.0), ts.ArgumentError, "1.0"),
            ("0", ts.ArgumentError, "not an integer"), (True, ts.ArgumentError, "True"),
            (2, ts.ShapeError, "out of range"), (-3, ts.ShapeError, "out of range"),
            ((0, 5), ts.ShapeError, "axis 5")]


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize(("axis", "exc", "words"), BAD_AXES)
def test_bad_axes_are_refused_like_numpy(name, axis, exc, words) -> None:
    x = np.ones((2, 3), np.float32)
    with pytest.raises((TypeError, ValueError)):
        REDUCTIONS[name](x, axis=axis)  # NumPy refuses each of these too
    fn = getattr(ts, name)
    raises_here(exc, lambda: fn(x, axis=axis), words, f"ts.{name}")
    raises_here(exc, lambda: ts.jit(lambda v: fn(v, axis=axis))(x), words)


@pytest.mark.parametrize("name", ["softmax", "fft", "ifft"])
@pytest.mark.parametrize(("axis", "exc"), [(1.5, ts.ArgumentError), (2, ts.ShapeError),
                                           (-3, ts.ShapeError), (None, ts.ArgumentError)])
def test_single_axis_operators_check_their_axis(name, axis, exc) -> None:
    x = np.ones((2, 3), np.float32)
    raises_here(exc, lambda: getattr(ts, name)(x, axis=axis), f"ts.{name}")


def test_numpy_integer_axes_and_the_empty_tuple() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(np.asarray(ts.sum(x, axis=np.int64(1))), x.sum(axis=1))
    for name, fn in REDUCTIONS.items():
        # axis=() reduces over no axis: every element stays as it is.
        got = np.asarray(getattr(ts, name)(x, axis=()))
        assert np.array_equal(got, fn(x, axis=())) and got.shape == (2, 3)
    raises_here(ts.ShapeError, lambda: ts.sum(np.float32(2.0), axis=0), "rank 0")


def test_other_bad_arguments_of_the_operators() -> None:
    x = np.ones((2, 3), np.float32)
    raises_here(ts.ArgumentError, lambda: ts.sum(x, keepdims=np.ones(2)), "keepdims")
    raises_here(ts.ArgumentError, lambda: ts.add(x), "add", "missing")
    raises_here(ts.ArgumentError, lambda: ts.max(x, 1, True, 5), "max")
    raises_here(ts.ArgumentError, lambda: ts.softmax(x, dim=1), "softmax", "dim")
    for shape in (None, "ab", -1, (2, -3), (2, 1.5), np.ones(()), [1, [2, 3]]):
        raises_here(ts.ShapeError, lambda s=shape: ts.broadcast_to(x, s), "not a shape")
    assert np.asarray(ts.broadcast_to(x, np.array([4, 2, 3]))).shape == (4, 2, 3)
